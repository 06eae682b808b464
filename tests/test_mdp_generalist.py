"""The MDP generalist: equivariance, its cache against counts recomputed from scratch, the labels, the
trainer's resume, the kind row and the adapter's refusals, each against an independent computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from agents.learned.mdp_generalist import MDPGeneralistAgent
from icrl_gym.checkpoint import CheckpointKind, load_checkpoint, read_checkpoint, read_record, save_checkpoint
from icrl_gym.envs.dark_room import dark_room_spec, dark_room_successors
from icrl_gym.envs.mdp_core import MDPBatch, MDPSpec
from icrl_gym.envs.mdp_env import reset_info
from icrl_gym.kinds import KINDS
from icrl_gym.models.mdp_generalist import KNOWN_MOVE_COUNT, CountStats, MDPGeneralist
from icrl_gym.registry import make_agent
from icrl_gym.training.mdp_generalist import MDPGeneralistTrainConfig, rollout_queries, train
from tests.helpers import TINY_MDP_GENERALIST, tiny_mdp_generalist, tiny_mdp_generalist_config


def _slow_counts(spec: MDPSpec, states, actions, rewards, t: int) -> CountStats:
    """The statistics of steps 0..t-1 of one run (and the start of step t), by a plain loop over the steps."""
    S, A, H = spec.num_states, spec.num_actions, spec.horizon
    hs = 1 if spec.is_stationary else H
    n_sas, n_sa, r_sum, starts = np.zeros((hs, S, A, S)), np.zeros((hs, S, A)), np.zeros((hs, S, A)), np.zeros(S)
    if spec.kind == "dark_room":  # the prior's moves, one pseudo-count each (what the agent starts from)
        moves = dark_room_successors(spec.size)
        for s in range(S):
            for a in range(A):
                n_sas[:, s, a, moves[s, a]] += KNOWN_MOVE_COUNT
    for j in range(t + 1):
        h = j % H
        if h == 0:
            starts[states[j]] += 1
        if j == t:
            break
        i = 0 if hs == 1 else h
        n_sa[i, states[j], actions[j]] += 1
        r_sum[i, states[j], actions[j]] += rewards[j]
        if h < H - 1:
            n_sas[i, states[j], actions[j], states[j + 1]] += 1
    return CountStats(*(torch.as_tensor(x[None], dtype=torch.float64) for x in (n_sas, n_sa, r_sum, starts)))


def _queries(spec: MDPSpec, runs: int = 3, queries: int = 6, seed: int = 1):
    batch = rollout_queries(spec, runs, queries, 0.3, 8, np.random.default_rng(seed))
    counts, states, h, k = batch.model_input(torch.device("cpu"))
    counts = CountStats(*(x.double() for x in (counts.n_sas, counts.n_sa, counts.reward_sum, counts.starts)))
    return batch, counts, states, h, k


@pytest.mark.parametrize("stationary", [True, False])
def test_logits_are_equivariant_to_state_and_action_labels(stationary):
    spec = MDPSpec(num_states=6, num_actions=4, horizon=5, episodes=4, stationary=stationary, random_start=True)
    _, c, states, h, k = _queries(spec)
    model = tiny_mdp_generalist(dtype=torch.float64)
    with torch.no_grad():
        logits = model(c, states, h, k, spec.horizon, spec.episodes)
        gen = torch.Generator().manual_seed(3)
        ps, pa = torch.randperm(6, generator=gen), torch.randperm(4, generator=gen)
        # new state i is old state ps[i], new action j is old action pa[j]
        relabelled = CountStats(
            c.n_sas[:, :, ps][:, :, :, pa][..., ps],
            c.n_sa[:, :, ps][:, :, :, pa],
            c.reward_sum[:, :, ps][:, :, :, pa],
            c.starts[:, ps],
        )
        moved = model(relabelled, torch.argsort(ps)[states], h, k, spec.horizon, spec.episodes)
    assert logits.abs().max() > 0.1 and (logits[:, pa] - logits[:, pa].mean(1, keepdim=True)).abs().max() > 1e-3
    assert torch.allclose(moved, logits[:, pa], atol=1e-5, rtol=0)


def test_a_batch_of_problems_equals_each_problem_alone():
    spec = MDPSpec(num_states=4, num_actions=3, horizon=6, episodes=3, stationary=False)
    _, c, states, h, k = _queries(spec)
    model = tiny_mdp_generalist(dtype=torch.float64)
    with torch.no_grad():
        together = model(c, states, h, k, spec.horizon, spec.episodes)
        alone = [model(c.rows(torch.tensor([i])), states[[i]], h[[i]], k[[i]], 6, 3) for i in range(len(states))]
    assert torch.allclose(together, torch.cat(alone), atol=1e-10, rtol=0)


@pytest.mark.parametrize(
    "spec",
    [
        MDPSpec(num_states=5, num_actions=3, horizon=4, episodes=4, stationary=False, random_start=True),
        MDPSpec(num_states=5, num_actions=3, horizon=4, episodes=4),
        dark_room_spec(3, horizon=5, episodes=3),
    ],
    ids=["nonstationary", "stationary", "dark_room"],
)
def test_the_agents_cached_steps_equal_counts_recomputed_from_scratch(spec):
    model = tiny_mdp_generalist(dtype=torch.float64)
    agent = MDPGeneralistAgent.from_model(model, greedy=False, seed=2)
    B, T = 3, spec.total_steps
    env = MDPBatch(spec, B, np.random.default_rng(5))
    agent.reset(reset_info(spec, env))
    states, actions, rewards = np.zeros((B, T), int), np.zeros((B, T), int), np.zeros((B, T))
    probs = np.zeros((B, T, spec.num_actions))
    for t in range(T):
        s, h = env.state.copy(), env.h
        probs[:, t] = agent.policy_batch(s, h)
        a = agent.act_batch(s, h)
        out = env.step(a)
        agent.update_batch(s, h, a, out["reward"], out["next_state"])
        states[:, t], actions[:, t], rewards[:, t] = s, a, out["reward"]
    for b in range(B):
        for t in (0, 1, spec.horizon - 1, spec.horizon, T - 1):
            c = _slow_counts(spec, states[b], actions[b], rewards[b], t)
            with torch.no_grad():
                logits = model(
                    c,
                    torch.tensor([states[b, t]]),
                    torch.tensor([t % spec.horizon]),
                    torch.tensor([t // spec.horizon]),
                    spec.horizon,
                    spec.episodes,
                )
            assert np.allclose(torch.softmax(logits, -1)[0].numpy(), probs[b, t], atol=1e-5), (b, t)


def test_query_snapshots_are_the_counts_before_the_query_step():
    spec = MDPSpec(num_states=4, num_actions=3, horizon=3, episodes=4, stationary=False, random_start=True)
    B = 3
    batch = rollout_queries(spec, B, 5, 0.5, 8, np.random.default_rng(4))
    # every total the counts before step t must have follows from t alone: t visits, one start per episode begun,
    # a successor for every step but an episode's last
    t_of = batch.k * spec.horizon + batch.h
    assert np.all(np.diff(t_of) > 0) and batch.targets.shape == (B, len(t_of), 3)
    assert np.allclose(batch.targets.sum(-1), 1.0)
    for q, t in enumerate(t_of):
        # visits before step t: t per run, spread over the per-step slices
        assert batch.n_sa[:, q].sum(axis=(1, 2, 3)).tolist() == [t] * B
        # transitions with a successor: the steps before t that are not an episode's last
        assert batch.n_sas[:, q].sum(axis=(1, 2, 3, 4)).tolist() == [t - (t // spec.horizon)] * B
        assert batch.starts[:, q].sum(1).tolist() == [t // spec.horizon + 1] * B
        assert np.all(batch.n_sa[:, q][:, t % spec.horizon :].sum(axis=(2, 3)) <= t // spec.horizon)


def _beta_max_probs(successes: np.ndarray, failures: np.ndarray) -> np.ndarray:
    """P(arm a has the largest mean) under independent Beta(1 + successes, 1 + failures), by quadrature."""
    out = []
    for a in range(len(successes)):
        others = [stats.beta(1 + successes[j], 1 + failures[j]) for j in range(len(successes)) if j != a]
        mine = stats.beta(1 + successes[a], 1 + failures[a])
        out.append(integrate.quad(lambda x, m=mine, o=others: m.pdf(x) * math.prod(f.cdf(x) for f in o), 0, 1)[0])
    return np.array(out)


def test_labels_of_one_step_episodes_are_the_beta_posterior_of_the_best_mean():
    """H = 1: Q*_1(s, a) = R(s, a), so P(a* = a | D) = P(R(s, a) is the largest) under the Beta posteriors."""
    spec = MDPSpec(num_states=2, num_actions=3, horizon=1, episodes=8)
    batch = rollout_queries(spec, 3, 8, 0.5, 20_000, np.random.default_rng(0))
    checked = 0
    for b in range(3):
        for q in (3, 7):
            s = batch.states[b, q]
            n, r = batch.n_sa[b, q, 0, s], batch.reward_sum[b, q, 0, s]
            exact = _beta_max_probs(r, n - r)
            assert np.allclose(batch.targets[b, q], exact, atol=0.02), (b, q, batch.targets[b, q], exact)
            checked += 1
    assert checked == 6


def _room_posterior(size: int, horizon: int, states, rewards, s_now: int, h: int) -> np.ndarray:
    """P(a* = a | D) in a dark room by brute force: the goals consistent with D, each goal's first optimal action."""
    S, nxt = size * size, dark_room_successors(size)
    found = [s for s, r in zip(states, rewards, strict=True) if r > 0]
    goals = found[:1] if found else [g for g in range(S) if g not in set(states)]
    votes = np.zeros(5)
    for g in goals:
        v = np.zeros(S)
        for level in range(horizon - 1, h - 1, -1):
            q = (np.arange(S) == g)[:, None] + v[nxt]
            if level == h:
                votes[int(np.argmax(q[s_now]))] += 1
            v = q.max(1)
    return votes / votes.sum()


def test_dark_room_labels_are_the_exact_goal_posterior():
    spec = dark_room_spec(3, horizon=4, episodes=3)
    batch = rollout_queries(spec, 4, 6, 1.0, 8, np.random.default_rng(2))
    # the visited cells are the states counted before the query; their rewards are the reward sums
    for b in range(4):
        for q, (h, k) in enumerate(zip(batch.h, batch.k, strict=True)):
            n_sa, r_sum = batch.n_sa[b, q, 0], batch.reward_sum[b, q, 0]
            visited = [s for s in range(9) for _ in range(int(n_sa[s].sum()))]
            rewards = [float(r_sum[s].sum() > 0) for s in visited]
            exact = _room_posterior(3, spec.horizon, visited, rewards, batch.states[b, q], h)
            assert np.allclose(batch.targets[b, q], exact), (b, q, k)


def test_resume_reproduces_an_uninterrupted_run(tmp_path):
    whole = train(tiny_mdp_generalist_config(tmp_path / "whole"), echo=False)
    train(tiny_mdp_generalist_config(tmp_path / "split", steps=3), echo=False)  # "interrupted" after a saved state at 3
    resumed = train(tiny_mdp_generalist_config(tmp_path / "split"), echo=False)
    assert "resumed from" in (tmp_path / "split" / "train.log").read_text()
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    _, meta = read_checkpoint(tmp_path / "split" / "checkpoints" / "step_0000006")
    assert meta["kind"] == "mdp_generalist" and meta["training"]["steps"] == 6
    assert meta["trained_range"]["num_states"] == [2, 9] and meta["trained_range"]["random"]["num_actions"] == [2, 3]


def test_the_configuration_refuses_unordered_ranges_and_a_bad_model():
    with pytest.raises(ValueError, match="min_states=9 must be <= MDPGeneralistTrainConfig.max_states=4"):
        MDPGeneralistTrainConfig(min_states=9, max_states=4)
    with pytest.raises(ValueError, match="not an MDPGeneralistConfig"):
        MDPGeneralistTrainConfig(model={"d_model": 0})
    with pytest.raises(ValueError, match="min_arms=1 must be >= 2"):
        MDPGeneralistTrainConfig(min_arms=1)


def _saved(tmp_path, playable=None):
    cfg = MDPGeneralistTrainConfig(
        out_dir=str(tmp_path / "run"), model=TINY_MDP_GENERALIST, max_states=6, dark_room_fraction=0.0
    )
    if playable is not None:
        cfg.playable_range = playable
    model = tiny_mdp_generalist()
    return save_checkpoint(tmp_path / "mdpg", model, cfg.checkpoint_fields(), kind=CheckpointKind.MDP_GENERALIST), model


def test_the_kind_row_loads_a_saved_checkpoint_and_the_agent_plays_it(tmp_path):
    path, model = _saved(tmp_path)
    assert KINDS[CheckpointKind.MDP_GENERALIST].agent == "mdp_generalist"
    loaded, meta = load_checkpoint(path, kind=CheckpointKind.MDP_GENERALIST)
    assert isinstance(loaded, MDPGeneralist) and meta["trained_range"]["num_states"] == [2, 6]
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    # as agents.pretrained builds a shipped model: the record's kind names the agent
    kind = read_record(path).kind
    agent = make_agent({"name": kind.agent, "checkpoint": str(path)}, seed=0)
    assert isinstance(agent, MDPGeneralistAgent) and agent.greedy
    spec = MDPSpec(num_states=5, num_actions=3, horizon=4, episodes=2)
    env = MDPBatch(spec, 2, np.random.default_rng(0))
    agent.reset(reset_info(spec, env))
    for _ in range(spec.total_steps):
        s, h = env.state.copy(), env.h
        a = agent.act_batch(s, h)
        out = env.step(a)
        agent.update_batch(s, h, a, out["reward"], out["next_state"])
    assert env.done


def test_the_agent_refuses_sizes_outside_the_playable_range(tmp_path):
    playable = {"num_states": [2, 6], "num_actions": [2, 6], "horizon": [2, 30], "episodes": [1, 50]}
    path, _ = _saved(tmp_path, playable)
    agent = MDPGeneralistAgent(path)
    for spec, problem in (
        (MDPSpec(num_states=7, num_actions=3, horizon=4, episodes=2), r"num_states=7 is outside \[2, 6\]"),
        (MDPSpec(num_states=3, num_actions=3, horizon=31, episodes=2), r"horizon=31 is outside \[2, 30\]"),
        (MDPSpec(num_states=3, num_actions=3, horizon=4, episodes=51), r"episodes=51 is outside \[1, 50\]"),
    ):
        env = MDPBatch(spec, 1, np.random.default_rng(0))
        with pytest.raises(ValueError, match=problem + r" \(trained on \["):
            agent.reset(reset_info(spec, env))
