"""The first reliability pass: bad input and faults of the environments, agents, files, training and harness.

Every case listed then under "silently wrong", "obscure crash" and "work lost" is one probe
(:mod:`tests.reliability.framework` says what a probe is and how its verdict is reached).  Every
file goes to the probe's temporary folder; nothing in ``runs/`` or ``results/`` is touched.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import icrl_gym  # noqa: F401  (registers the environments)
from agents import make_agent
from tests.reliability import framework as rp
from tests.reliability.framework import Outcome, Section, Verdict, probe

NAN, INF = float("nan"), float("inf")
MDP_AGENTS = ("mdp_uniform", "mdp_optimal", "ucbvi", "psrl", "posterior_optimal_action")
"""The registered algorithms for tabular MDPs (``dark_room_psrl`` needs a DarkRoom and is probed beside them)."""


rp.surface("First pass: environments and agents")


def _linear(**kwargs: Any) -> Any:
    return gym.make("ICRL-LinearBandit-v0", **kwargs)


def _mdp(env_id: str = "ICRL-TabularMDP-v0", **kwargs: Any) -> tuple[Any, np.ndarray, dict[str, Any]]:
    env = gym.make(env_id, **kwargs).unwrapped
    obs, info = env.reset(seed=0)
    return env, obs, info


def _mdp_agent(name: str) -> tuple[Any, np.ndarray, dict[str, Any]]:
    """The agent ``name`` reset on its MDP (a small DarkRoom for ``dark_room_psrl``), with the first observation."""
    env_id, kwargs = ("ICRL-DarkRoom-v0", {"size": 3}) if name == "dark_room_psrl" else ("ICRL-TabularMDP-v0", {})
    _, obs, info = _mdp(env_id, **kwargs)
    agent = make_agent(name, seed=0)
    agent.reset(info)
    return agent, obs, info


def _each_mdp_agent(act: Callable[[Any, np.ndarray, dict[str, Any]], Any], dark_room: bool = False) -> dict:
    names = MDP_AGENTS + (("dark_room_psrl",) if dark_room else ())
    return {name: (lambda name=name: act(*_mdp_agent(name))) for name in names}


for _value in (NAN, INF):
    rp.input_probe(
        f"linear prior='gaussian', prior_var={_value}",
        Section.SILENT,
        lambda value=_value: _linear(prior="gaussian", prior_var=value),
        "prior_var",
        repr(_value),
        kinds=(ValueError,),
    )
rp.input_probe(
    "linear horizon=2.5", Section.SILENT, lambda: _linear(horizon=2.5), "horizon", "2.5", kinds=(ValueError,)
)
for _value in (NAN, INF):
    rp.input_probe(
        f"TabularMDP concentration={_value}",
        Section.SILENT,
        lambda value=_value: gym.make("ICRL-TabularMDP-v0", concentration=value),
        "concentration",
        repr(_value),
        kinds=(ValueError,),
    )


def _reset_with(edit: Callable[[dict[str, np.ndarray]], None]) -> Any:
    env, _, info = _mdp()
    options = {key: np.array(info[key], dtype=np.float64) for key in ("P", "R", "mu")}
    edit(options)
    return env.reset(options=options)


def _negative_p(o: dict[str, np.ndarray]) -> None:
    p = o["P"].reshape(-1, o["P"].shape[-1])
    p[0, 0], p[0, 1] = -0.5, p[0, 1] + p[0, 0] + 0.5  # the row still sums to 1


def _nan_r(o: dict[str, np.ndarray]) -> None:
    o["R"].flat[0] = NAN


def _negative_mu(o: dict[str, np.ndarray]) -> None:
    mu = o["mu"].reshape(-1)
    mu[0], mu[1] = 1.5, -0.5


rp.input_probe(
    "MDP reset(options) with P < 0", Section.SILENT, lambda: _reset_with(_negative_p), "P", "-0.5", kinds=(ValueError,)
)
rp.input_probe(
    "MDP reset(options) with R = nan", Section.SILENT, lambda: _reset_with(_nan_r), "R", "nan", kinds=(ValueError,)
)
rp.input_probe(
    "MDP reset(options) with mu < 0",
    Section.SILENT,
    lambda: _reset_with(_negative_mu),
    "mu",
    "-0.5",
    kinds=(ValueError,),
)


def _linucb_nan_reward() -> Any:
    env = _linear().unwrapped
    obs, info = env.reset(seed=0)
    agent = make_agent("linucb")
    agent.reset(info)
    return agent.update(agent.act(obs), NAN)


rp.input_probe("NaN reward to LinUCB", Section.SILENT, _linucb_nan_reward, "reward", "nan", kinds=(ValueError,))


@probe("MDP agents given an all-zero observation", Section.SILENT)
def _all_zero_obs(tmp: Path) -> Outcome:
    return rp.refused_by_each(
        "MDP agents",
        _each_mdp_agent(lambda agent, obs, info: agent.act(np.zeros_like(obs))),
        "one-hot",
        "all zeros",
        kinds=(ValueError,),
    )


@probe("MDP agents given an observation of another MDP of the same length", Section.SILENT)
def _foreign_obs(tmp: Path) -> Outcome:
    def act(agent: Any, obs: np.ndarray, info: dict[str, Any]) -> Any:
        S, H = info["num_states"], info["horizon"]  # another MDP with S' = H, H' = S: the same length S + H
        other = np.zeros(S + H, np.float32)
        other[[H - 1, H + S - 1]] = 1.0  # its last state at its last step: nonzero at [H-1, H+S-1]
        return agent.act(other)

    return rp.refused_by_each("MDP agents", _each_mdp_agent(act), "one-hot", "nonzero entries", kinds=(ValueError,))


def _update_after_act(action: Any) -> Callable[[Any, np.ndarray, dict[str, Any]], Any]:
    def run(agent: Any, obs: np.ndarray, info: dict[str, Any]) -> Any:
        agent.act(obs)
        agent.update(action, 0.0)
        return agent.act(obs)  # UCB-VI and PSRL used to fail only here, with an IndexError

    return run


@probe("MDP agents update(99)", Section.SILENT)
def _update_99(tmp: Path) -> Outcome:
    return rp.refused_by_each(
        "MDP agents", _each_mdp_agent(_update_after_act(99), dark_room=True), "actions", "99", kinds=(ValueError,)
    )


@probe("MDP agents update(1.7)", Section.SILENT)
def _update_fraction(tmp: Path) -> Outcome:
    return rp.refused_by_each(
        "MDP agents", _each_mdp_agent(_update_after_act(1.7), dark_room=True), "actions", "1.7", kinds=(ValueError,)
    )


rp.input_probe(
    "dark_room_psrl on a TabularMDP",
    Section.SILENT,
    lambda: make_agent("dark_room_psrl").reset(_mdp()[2]),
    "dark_room_psrl",
    "DarkRoom",
    kinds=(ValueError,),
)


rp.surface("First pass: trajectory files")


def _trajectory_file(tmp: Path) -> Path:
    """A small AD dataset of the paper's linear prior (d=5, A=10), T=50, stored with the library's writer."""
    from icrl_gym.data.trajectories import collect_trajectories, save_trajectories
    from icrl_gym.envs import linear_bandit_spec

    data = collect_trajectories(linear_bandit_spec(horizon=50, dim=5), "linucb", 6, seed=2, label="ad")
    return save_trajectories(data, tmp / "data.npz")


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {info.filename: zf.read(info) for info in zf.infolist()}


def _rezip(path: Path, members: dict[str, bytes]) -> Path:
    """An .npz of ``members`` with valid CRCs: an edit made with a zip tool."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, body in members.items():
            zf.writestr(name, body)
    return path


def _load_trajectories(path: Path) -> Any:
    from icrl_gym.data.trajectories import load_trajectories

    return load_trajectories(path)


@probe("trajectory file: rewards header '<f4' -> '<f2'", Section.SILENT)
def _trajectory_header_edit(tmp: Path) -> Outcome:
    from icrl_gym.data.trajectories import DatasetError

    path = _trajectory_file(tmp)
    raw = path.read_bytes()
    member = _members(path)["rewards.npy"]
    at = raw.index(member)  # np.savez stores members uncompressed
    edited = member.replace(b"'<f4'", b"'<f2'", 1)
    in_place = tmp / "in_place.npz"
    in_place.write_bytes(raw[:at] + edited + raw[at + len(member) :])
    rezipped = _rezip(tmp / "rezipped.npz", {**_members(path), "rewards.npy": edited})
    cases = {"in place": lambda: _load_trajectories(in_place), "rezipped": lambda: _load_trajectories(rezipped)}
    return rp.refused_by_each("edits (in place, rezipped)", cases, ".npz", kinds=(DatasetError,))


@probe("trajectory file: 300 random byte flips in the npy headers", Section.SILENT)
def _trajectory_header_flips(tmp: Path) -> Outcome:
    from icrl_gym.data.trajectories import DatasetError

    path = _trajectory_file(tmp)
    reference, raw = _load_trajectories(path), path.read_bytes()
    spans = []
    start = raw.find(b"\x93NUMPY")
    while start >= 0:
        spans.append(np.arange(start, raw.index(b"\n", start) + 1))
        start = raw.find(b"\x93NUMPY", start + 1)
    positions = np.concatenate(spans)
    rng = np.random.default_rng(0)
    counts = {"DatasetError": 0, "identical": 0}
    target = tmp / "flipped.npz"
    for _ in range(300):
        buf = bytearray(raw)
        buf[positions[rng.integers(len(positions))]] ^= 1 << int(rng.integers(8))
        target.write_bytes(bytes(buf))
        try:
            loaded = _load_trajectories(target)
        except DatasetError:
            counts["DatasetError"] += 1
            continue
        except Exception as err:
            return Outcome(Verdict.PROBLEM, f"raw {rp.described(err)} after {sum(counts.values())} clean flips")
        x, y = loaded.arrays(), reference.arrays()
        if x.keys() != y.keys() or loaded.meta != reference.meta or not all(np.array_equal(x[k], y[k]) for k in x):
            return Outcome(Verdict.PROBLEM, "a flipped file loaded different data without an error")
        counts["identical"] += 1
    return Outcome(Verdict.CLEAR, f"{counts['DatasetError']} DatasetError, {counts['identical']} loads identical")


def _forged(tmp: Path, name: str, edit: Callable[[dict[str, np.ndarray], dict[str, Any]], None]) -> Path:
    """The dataset with its arrays and record edited by ``edit`` and its content hash recomputed (a consistent file)."""
    from icrl_gym.utils.fileio import CONTENT_HASH_FIELD, content_sha256

    path = _trajectory_file(tmp)
    with np.load(path) as stored:
        arrays = {key: stored[key] for key in stored.files}
    meta = json.loads(str(arrays.pop("meta_json")[()]))
    del meta[CONTENT_HASH_FIELD]
    edit(arrays, meta)
    meta[CONTENT_HASH_FIELD] = content_sha256(meta, arrays)
    target = tmp / f"{name}.npz"
    np.savez(target, **arrays, meta_json=np.array(json.dumps(meta)))
    return target


def _labels_outside(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    labels = arrays["actions"].copy()
    labels[0, 3] = meta["env"]["num_actions"]
    arrays["labels"] = labels
    meta["storage"].pop("labels", None)


def _labels_missing(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    arrays.pop("labels", None)
    meta["storage"].pop("labels", None)  # label='ad' stores its labels as "the actions"


def _nan_reward_entry(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    arrays["rewards"] = arrays["rewards"].copy()
    arrays["rewards"][1, 2] = np.nan


INCONSISTENT_RECORDS: dict[str, tuple[Callable[[dict[str, np.ndarray], dict[str, Any]], None], tuple[str, ...]]] = {
    "dim 7 for d=5 arrays": (lambda a, m: m["env"].update(dim=7), ("dim=7", "d=5")),
    "horizon 999 for T=50 arrays": (lambda a, m: m["env"].update(horizon=999), ("horizon=999", "T=50")),
    "labels outside [0, A)": (_labels_outside, ("labels outside",)),
    "labels missing for label='ad'": (_labels_missing, ("label='ad'", "labels")),
    "NaN rewards": (_nan_reward_entry, ("rewards", "non-finite")),
}
"""Records that do not describe their arrays (consistently hashed, so only the checks of the record can tell)."""


def _inconsistent_probe(case: str) -> Callable[[Path], Outcome]:
    def run(tmp: Path) -> Outcome:
        from icrl_gym.data.trajectories import DatasetError

        edit, fragments = INCONSISTENT_RECORDS[case]
        path = _forged(tmp, "forged", edit)
        return rp.refused(lambda: _load_trajectories(path), str(path), *fragments, kinds=(DatasetError,))

    return run


for _case in INCONSISTENT_RECORDS:
    rp.add_probe(f"trajectory metadata inconsistent: {_case}", Section.SILENT, _inconsistent_probe(_case))


rp.surface("First pass: checkpoints")


def _tiny_checkpoint(tmp: Path) -> Path:
    import torch

    from icrl_gym.checkpoint import save_checkpoint
    from icrl_gym.envs import linear_bandit_spec
    from icrl_gym.models.transformer import BanditTransformer, TransformerConfig

    torch.manual_seed(0)
    model = BanditTransformer(
        TransformerConfig(n_layer=1, n_head=2, n_embd=8, num_actions=3, dim=2, horizon=6, attention="relu")
    )
    meta = {"env": linear_bandit_spec(horizon=6, num_actions=3, dim=2).to_dict(), "training": {"steps": 0}}
    return save_checkpoint(tmp / "tiny", model, meta)


@probe("checkpoint record edited: attention / n_head", Section.SILENT)
def _record_edit(tmp: Path) -> Outcome:
    from icrl_gym.checkpoint import CheckpointError, load_checkpoint

    stem = _tiny_checkpoint(tmp)
    record = json.loads(stem.with_suffix(".json").read_text())

    def edited(field: str, value: Any) -> Callable[[], Any]:
        def load() -> Any:
            target = tmp / f"edited-{field}"
            shutil.copyfile(stem.with_suffix(".safetensors"), target.with_suffix(".safetensors"))
            edit = {**record, "model": {**record["model"], field: value}}
            target.with_suffix(".json").write_text(json.dumps(edit, indent=2, sort_keys=True))
            return load_checkpoint(target)

        return load

    cases = {"attention": edited("attention", "softmax"), "n_head": edited("n_head", 1)}
    return rp.refused_by_each("edits (attention, n_head)", cases, ".json", kinds=(CheckpointError,))


def _linear_info(**kwargs: Any) -> dict[str, Any]:
    return _linear(**kwargs).unwrapped.reset(seed=0)[1]


def _checkpoint_error() -> tuple[type[BaseException], ...]:
    from icrl_gym.checkpoint import CheckpointError

    return (CheckpointError,)


@probe("Bernoulli checkpoint on a linear bandit with A=5", Section.SILENT)
def _bernoulli_on_linear(tmp: Path) -> Outcome:
    agent = make_agent({"name": "transformer", "checkpoint": "bernoulli-ad-ucb"})
    return rp.refused(lambda: agent.reset(_linear_info(num_actions=5)), "bernoulli-ad-ucb", kinds=_checkpoint_error())


rp.surface("First pass: training (tiny pretraining runs)")


def _pretrain(out: Path, steps: int, command: str, **overrides: Any) -> dict[str, Any]:
    """A tiny pretraining run (or its resumption) in ``out``; returns its training record."""
    from icrl_gym.envs import bernoulli_bandit_spec
    from icrl_gym.training.pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(
        **{
            "name": "probe",
            "env": bernoulli_bandit_spec(num_arms=3, horizon=6).to_dict(),
            "context": {"name": "ucb"},
            "model": {"n_layer": 1, "n_head": 1, "n_embd": 8, "layout": "compact"},
            "trajectories_per_chunk": 8,
            "batch_size": 4,
            "val_trajectories": 4,
            "steps": steps,
            "warmup_steps": 0,
            "eval_every": 1,
            "threads": 1,
            "device": "cpu",
            "out_dir": str(out),
            **overrides,
        }
    )
    return pretrain(cfg, command=command, echo=False)[1]["training"]


def _optimizer_state(run: Path) -> Path:
    """The file holding the run's optimizer state: ``optimizer.pt`` (first layout) or the newest ``*.state.pt``."""
    found = sorted(run.glob("optimizer.pt")) + sorted(run.rglob("*.state.pt"))
    if not found:
        raise FileNotFoundError(f"no optimizer state (optimizer.pt or *.state.pt) under {run}")
    return found[-1]


def _resumed(training: dict[str, Any]) -> bool:
    """Whether a run's record says it continued an earlier command (rather than starting again at step 0)."""
    return len(training.get("command_history", [])) > 1


def _training_state_error() -> tuple[type[BaseException], ...]:
    from icrl_gym.training.state import TrainingStateError

    return (TrainingStateError,)


def _resume_outcome(action: Callable[[], dict[str, Any]], *fragments: str) -> Outcome:
    """A damaged run folder: a ``TrainingStateError`` naming ``fragments`` is clear; resuming anyway is a PROBLEM."""
    try:
        training = action()
    except Exception as err:
        return rp.classify_error(err, fragments, _training_state_error())
    if _resumed(training):
        return Outcome(Verdict.PROBLEM, f"resumed silently to step {training['step']} from the damaged state")
    return Outcome(Verdict.PROBLEM, "started again from step 0 over the saved run (work lost)")


def _damaged_optimizer_probe(damage: Callable[[Path], None]) -> Callable[[Path], Outcome]:
    def run(tmp: Path) -> Outcome:
        out = tmp / "run"
        _pretrain(out, 1, "first")
        state = _optimizer_state(out)
        damage(state)
        return _resume_outcome(lambda: _pretrain(out, 2, "resume"), state.name)

    return run


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_middle_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    path.write_bytes(bytes(raw))


for _label, _section, _damage in (
    ("truncated", Section.CRASH, _truncate),
    ("missing", Section.CRASH, Path.unlink),
    ("byte-flipped", Section.SILENT, _flip_middle_byte),
):
    rp.add_probe(f"training: optimizer state {_label} on resume", _section, _damaged_optimizer_probe(_damage))


@probe("training: stopped between the weights and the optimizer write", Section.SILENT)
def _optimizer_of_an_earlier_step(tmp: Path) -> Outcome:
    """The weights of step 2 beside the optimizer state of step 1, as a stop between the two writes left them."""
    out = tmp / "run"
    _pretrain(out, 1, "first")
    earlier = _optimizer_state(out).read_bytes()
    _pretrain(out, 2, "second")
    state = _optimizer_state(out)
    state.write_bytes(earlier)
    return _resume_outcome(lambda: _pretrain(out, 3, "resume"), state.name)


@probe("training: checkpoint.json missing, weights present", Section.SILENT)
def _record_missing(tmp: Path) -> Outcome:
    """The run's record gone (checkpoint.json, and resume.json where the layout has one); the weights stay."""
    out = tmp / "run"
    _pretrain(out, 1, "first")
    for name in ("checkpoint.json", "resume.json"):
        (out / name).unlink(missing_ok=True)
    try:
        training = _pretrain(out, 2, "resume")
    except Exception as err:
        return rp.classify_error(err, (str(out),), _training_state_error())
    if _resumed(training):
        return Outcome(Verdict.HANDLED, f"resumed from the remaining state to step {training['step']}")
    return Outcome(Verdict.PROBLEM, "started again from step 0 and overwrote the saved weights (work lost)")
