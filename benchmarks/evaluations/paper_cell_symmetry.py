"""What the paper's cell costs a policy that is not told the sign of the prior: Bayes-UCB under told mixtures.

The paper's linear cell (d = 5, A = 10, T = 200, sigma = 1.5, w* ~ U[0, 1]^5, arms Unif([-1, 1]^5) fixed for
the run) has arms whose law is symmetric under x -> -x.  Some policies' choices do not change when every
feature, of the arms and of the history, is negated: LinUCB, TS and Bayes-UCB under N(0, I), the grid's model
average, and the linear generalists that read its posterior features (v2 on), whose priors are all symmetric.
Such a policy plays the instance (X, w*) as it plays (-X, w*), whose rewards are those of (X, -w*); averaged
over X it has the same regret under U[0, 1]^5 as under U[-1, 0]^5, hence as under their even mixture.  Its
regret at the paper's cell is its Bayes regret under that mixture, and no such policy does better than the
mixture's Bayes-optimal policy.

This study measures Bayes-UCB, u_k = m_k + c z_t sd_k (z_t = Phi^{-1}(1 - 1/(t + 1)), the model average's
mean and sd over Gaussian components with their evidence), told ever less:

- **told**: N(1/2 1, I / 12), the prior's Gaussian moment match;
- **told but the sign**: (N(1/2 1, I / 12) + N(-1/2 1, I / 12)) / 2, the mixture above; it is itself symmetric;
- **symmetric Gaussian**: N(0, I / 12 + 1/4 1 1^T), the scale and the centre's size told, not the centre;
- **grid**: the model average over the linear generalist's grid of priors
  (:mod:`icrl_gym.models.linear_posterior`), the best uninformed reference of the acceptance at this cell;
- **N(0, I)**: the fixed prior of the uninformed references,

each at several constants c, and the checkpoints named by ``--model``, on the same instances (common random
numbers).  The best c of the told-but-the-
sign row is what an index policy that knows everything but the sign reaches; a learned policy can do better
than an index, as the first linear generalist (trained on the told prior, 10.3) does than told Bayes-UCB at
c = 1.  ``--sign-mixture NAME`` plays :class:`SignMixture`: the told-prior checkpoint NAME and its mirror
image, chosen by the sign's posterior, a learned policy told everything but the sign.  Run as::

    python -m benchmarks.evaluations.paper_cell_symmetry --runs 4000 --model linear-generalist-v5 \
        --sign-mixture linear-generalist-v1
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
from scipy.stats import norm

import agents
from agents.bandit.index_agent import IndexAgent
from agents.bandit.linear_posterior import GaussianModel
from benchmarks.experiments.rows import as_bandit_agent
from icrl_gym.algorithm import BanditAgent
from icrl_gym.data.trajectories import evaluate_regret
from icrl_gym.envs import linear_bandit_spec
from icrl_gym.models.linear_posterior import CENTRE_SCALES, PRIOR_SCALES
from icrl_gym.utils.cli import doc_parser
from icrl_gym.utils.fileio import atomic_write_bytes

DIM, ARMS, HORIZON, SIGMA = 5, 10, 200, 1.5
Component = tuple[np.ndarray, np.ndarray]
"""A Gaussian prior N(mean (d,), covariance (d, d)) of w*."""


class MixtureBayesUCB(IndexAgent):
    """Bayes-UCB under an equal-weight mixture of Gaussian priors, sigma told (the study's policies).

    Per component j: Lambda_j = G / sigma^2 + P_j^{-1}, mu_j = Lambda_j^{-1} (b / sigma^2 + P_j^{-1} m_j) and the
    log evidence up to a constant shared by the components, -1/2 [rr / sigma^2 + m_j^T P_j^{-1} m_j
    - mu_j^T Lambda_j mu_j + log det P_j + log det Lambda_j]; then the mixture's mean and sd of every arm's reward
    (the law of total variance) and u_k = m_k + c z_t sd_k.  G, b, rr are running sums.
    """

    name = "mixture_bayes_ucb"

    def __init__(self, components: list[Component], noise_std: float, scale: float = 1.0) -> None:
        super().__init__()
        self.components, self.noise_std, self.scale = components, noise_std, scale
        # what each prior contributes at every step: P_j^{-1}, P_j^{-1} m_j, m_j^T P_j^{-1} m_j + log det P_j
        self._priors: list[tuple[np.ndarray, np.ndarray, float]] = []
        for centre, cov in components:
            prior_prec = np.linalg.inv(cov)
            shift = prior_prec @ centre
            self._priors.append((prior_prec, shift, float(centre @ shift) + np.linalg.slogdet(cov)[1]))
        self.gram, self.moment, self.square = np.zeros((0, 0, 0)), np.zeros((0, 0)), np.zeros(0)

    def _reset(self, w_star: np.ndarray | None) -> None:
        b, d = self.batch_size, self.dim
        self.gram, self.moment, self.square = np.zeros((b, d, d)), np.zeros((b, d)), np.zeros(b)

    def _posteriors(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per component j: the posterior mean mu_j (B, d), covariance Lambda_j^{-1} (B, d, d) and log evidence (B,)."""
        prec = self.noise_std**-2
        out = []
        for prior_prec, shift, constant in self._priors:
            lam = self.gram * prec + prior_prec
            post_cov = np.linalg.inv(lam)
            rhs = self.moment * prec + shift
            mu = np.einsum("bij,bj->bi", post_cov, rhs)
            quad = self.square * prec - np.einsum("bi,bi->b", mu, rhs)
            out.append((mu, post_cov, -0.5 * (quad + constant + np.linalg.slogdet(lam)[1])))
        return out

    @staticmethod
    def _weights(posteriors: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> np.ndarray:
        logs = np.stack([log_ev for _, _, log_ev in posteriors], 1)
        weights = np.exp(logs - logs.max(1, keepdims=True))
        return weights / weights.sum(1, keepdims=True)

    def weights(self) -> np.ndarray:
        """The components' posterior weights (B, J), proportional to their evidence (equal prior weights)."""
        return self._weights(self._posteriors())

    def index(self, action_sets: np.ndarray) -> np.ndarray:
        """u_k (B, A) at the action sets (B, A, d)."""
        posteriors = self._posteriors()
        weights = self._weights(posteriors)
        m = np.stack([np.einsum("bad,bd->ba", action_sets, mu) for mu, _, _ in posteriors], 1)
        v = np.stack([np.einsum("bad,bde,bae->ba", action_sets, cov, action_sets) for _, cov, _ in posteriors], 1)
        mean = np.einsum("bj,bja->ba", weights, m)
        var = np.einsum("bj,bja->ba", weights, v + (m - mean[:, None]) ** 2)
        z = max(float(norm.ppf(1.0 - 1.0 / (self.t + 1))), 0.0)
        return mean + self.scale * z * np.sqrt(var)

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        x = action_sets[np.arange(self.batch_size), actions]
        self.gram += np.einsum("bi,bj->bij", x, x)
        self.moment += x * rewards[:, None]
        self.square += rewards**2

    def config(self) -> dict[str, Any]:
        """The components, sigma and c."""
        return {
            **super().config(),
            "components": [(c.tolist(), p.tolist()) for c, p in self.components],
            "noise_std": self.noise_std,
            "scale": self.scale,
        }


class SignMixture(BanditAgent):
    """Told everything but the sign: a policy trained on the told prior and its mirror image, by the sign's odds.

    Two copies of the checkpoint ``expert`` (trained on w* ~ U[0, 1]^d, e.g. the first linear generalist) play
    side by side: one sees the arms X, the other -X, which makes it the expert of the mirrored prior
    U[-1, 0]^d (the rewards of (X, w) are those of (-X, -w)).  The sign's posterior is that of the "told but the
    sign" mixture, N(+-1/2 1, I / 12) with sigma told (:meth:`MixtureBayesUCB.weights`); every step plays the
    expert of the more probable sign, an exact tie (no evidence yet) by a fair coin.  The policy is symmetric by
    construction, so its regret at the paper's cell is its Bayes regret under the even mixture of the two priors:
    what a learned policy told everything but the sign reaches, an upper bound on that mixture's Bayes-optimal
    regret.
    """

    name = "sign_mixture"

    def __init__(self, expert: str, seed: int | None = None) -> None:
        super().__init__(seed)
        self.expert = expert
        self.plus, self.minus = (as_bandit_agent(agents.pretrained(expert)) for _ in range(2))
        self.sign: MixtureBayesUCB | None = None

    def _reset(self, w_star: np.ndarray | None) -> None:
        info = {key: value for key, value in self.reset_info.items() if key != "w_star"}
        info["batch_size"] = self.batch_size
        # sigma as given to reset, else the environment's (only sigma is read: the prior is the mixture's own)
        told = GaussianModel.resolve(self.env_model, info.get("noise_std"), prior_mean=0.0, prior_var=1.0)
        self.plus.reset(info)
        self.minus.reset(info)
        self.sign = MixtureBayesUCB(priors(self.dim)["told but the sign"], float(told.noise_std))
        self.sign.reset(batch_size=self.batch_size, dim=self.dim, num_actions=self.num_actions)

    def plus_probability(self) -> np.ndarray:
        """P(the centre is +1/2 1 | history) for every run (B,)."""
        assert self.sign is not None, "reset first"
        return self.sign.weights()[:, 0]

    def _act(self, action_sets: np.ndarray) -> np.ndarray:
        p = self.plus_probability()
        plus = np.where(p == 0.5, self.rng.random(self.batch_size) < 0.5, p > 0.5)
        actions: np.ndarray = np.where(plus, self.plus.act_batch(action_sets), self.minus.act_batch(-action_sets))
        return actions

    def _update(self, action_sets: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        assert self.sign is not None, "reset first"
        self.plus.update_batch(action_sets, actions, rewards)
        self.minus.update_batch(-action_sets, actions, rewards)
        self.sign.update_batch(action_sets, actions, rewards)

    def config(self) -> dict[str, Any]:
        """The expert's name."""
        return {**super().config(), "expert": self.expert}


def priors(dim: int = DIM) -> dict[str, list[Component]]:
    """The study's rows (module docstring): each a list of Gaussian components of equal weight."""
    eye, ones = np.eye(dim), np.ones(dim)
    spread = eye / 12.0  # Var U[0, 1] = 1 / 12 per coordinate
    grid = [(np.zeros(dim), s**2 * eye + t**2 * np.outer(ones, ones)) for t in CENTRE_SCALES for s in PRIOR_SCALES]
    return {
        "told": [(0.5 * ones, spread)],
        "told but the sign": [(0.5 * ones, spread), (-0.5 * ones, spread)],
        "symmetric Gaussian": [(np.zeros(dim), spread + 0.25 * np.outer(ones, ones))],
        "grid": grid,
        "N(0, I)": [(np.zeros(dim), eye)],
    }


def main(argv: list[str] | None = None) -> None:
    """Play every row at every constant c on the paper's cell; print the table and write it as JSON."""
    parser = doc_parser(__doc__)
    parser.add_argument("--runs", type=int, default=2000, help="instances (the same for every row)")
    parser.add_argument("--seed", type=int, default=808_000, help="the instances' seed (not an acceptance seed)")
    parser.add_argument("--scales", default="0.3,0.4,0.5,0.7,1.0", help="the constants c, comma-separated")
    parser.add_argument("--model", action="append", default=[], help="a pretrained policy to play too (repeatable)")
    parser.add_argument(
        "--sign-mixture",
        action="append",
        default=[],
        help="a told-prior checkpoint, played as SignMixture (repeat)",
    )
    parser.add_argument("--out", default="", help="write the table here as JSON")
    args = parser.parse_args(argv)
    spec = linear_bandit_spec(DIM, ARMS, HORIZON, SIGMA)
    scales = [float(c) for c in args.scales.split(",")]
    table: dict[str, dict[str, list[float]]] = {}
    for name, components in priors().items():
        table[name] = {}
        for c in scales:
            start = time.perf_counter()
            agent = MixtureBayesUCB(components, SIGMA, c)
            total = evaluate_regret(spec, agent, args.runs, seed=args.seed, batch_size=args.runs).sum(1)
            mean, se = float(total.mean()), float(total.std(ddof=1) / np.sqrt(len(total)))
            table[name][f"{c:g}"] = [round(mean, 3), round(se, 3)]
            print(f"{name:20s} c={c:<4g} {mean:7.2f} +- {se:.2f}  ({time.perf_counter() - start:.0f} s)", flush=True)
    played = [(name, as_bandit_agent(agents.pretrained(name))) for name in args.model]
    played += [(f"sign mixture of {name}", SignMixture(name)) for name in args.sign_mixture]
    for label, policy in played:
        total = evaluate_regret(spec, policy, args.runs, seed=args.seed, batch_size=args.runs).sum(1)
        mean, se = float(total.mean()), float(total.std(ddof=1) / np.sqrt(len(total)))
        table[label] = {"greedy": [round(mean, 3), round(se, 3)]}
        print(f"{label:20s} {mean:7.2f} +- {se:.2f}", flush=True)
    if args.out:
        record = {"cell": "paper", "runs": args.runs, "seed": args.seed, "sigma": SIGMA, "table": table}
        atomic_write_bytes(args.out, json.dumps(record, indent=1).encode())


if __name__ == "__main__":
    main()
