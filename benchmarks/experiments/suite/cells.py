"""The curve experiments of ``python -m benchmarks`` as plain data (Section 5 and Appendix B).

Shared row specifications live in :mod:`benchmarks.experiments.rows`.

Each experiment names an environment prior and the algorithms it compares, each an
``agents.make_agent`` specification (Bayesian algorithms read the noise level and prior from the
environment they run on, so an experiment only names them); transformers are
``{"name": "transformer", "checkpoint": ...}`` with a shipped model name.  ``paper`` holds the
regret at T=200 read from the paper's figures, for the results page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents import ts_uniform_mixture
from benchmarks.experiments.rows import (
    BERNOULLI_BASELINES,
    LINEAR_BASELINES,
    PAPER_TS,
    SOFT_UCBVI,
    bayes_dpt,
    generalist,
    linear_generalist,
    mdp_generalist,
    mdp_transformer,
    meta_rl,
    transformer,
)
from icrl_gym.envs import BanditReward, BanditSpec, MDPSpec, bernoulli_bandit_spec, dark_room_spec, linear_bandit_spec

TABULAR_EXPERTS: dict[str, dict[str, Any]] = {
    "PSRL": {"name": "psrl"},
    "soft UCB-VI (tau=0.1, bonus x0.01)": SOFT_UCBVI,
    "UCB-VI (bonus x0.01)": {"name": "ucbvi", "bonus_scale": 0.01},
    "greedy VI (bonus 0)": {"name": "ucbvi", "bonus_scale": 0.0},
}


MDP_GENERALIST_ROW = "MDP generalist (any size)"
"""Row label of the MDP generalist in the tabular-MDP experiments."""


def dpt_rows(model: str, posterior: str) -> dict[str, dict[str, Any]]:
    """The DPT rows of an MDP experiment (after its AD rows, before its references).

    The shipped DPT model ``model`` (sampled and greedy), the MDP generalist, and the Bayes DPT policy on
    the posterior of the ``agents`` name ``posterior`` (sampled and greedy).
    """
    return {
        "TF (DPT, PSRL/uniform context)": mdp_transformer(model),
        "TF (DPT, greedy)": mdp_transformer(model, greedy=True),
        MDP_GENERALIST_ROW: mdp_generalist(),
        "Bayes DPT policy (posterior of a*, sampled)": bayes_dpt(posterior, greedy=False),
        "Bayes DPT policy (greedy)": bayes_dpt(posterior, greedy=True),
    }


MDP_BOUNDS = {
    "Uniform": {"name": "mdp_uniform"},
    "Optimal": {"name": "mdp_optimal"},
}
"""The last rows of every MDP experiment: uniform play and the optimal policy (the regret's two ends)."""

TABULAR_REFERENCES: dict[str, dict[str, Any]] = {
    **TABULAR_EXPERTS,
    "UCB-VI (paper bonus)": {"name": "ucbvi"},
    **MDP_BOUNDS,
}
"""The algorithm rows of both tabular-MDP experiments (the rows after the transformers)."""

BERNOULLI_STRONG = {
    "KL-UCB": {"name": "kl_ucb"},
    "Bayes-UCB": {"name": "bayes_ucb"},
    "Gittins (finite horizon)": {"name": "gittins"},
}


@dataclass(frozen=True)
class Experiment:
    """One regret comparison on one prior."""

    name: str
    title: str
    spec: BanditSpec | MDPSpec
    algorithms: dict[str, dict[str, Any]]
    paper: dict[str, float] = field(default_factory=dict)
    difference: tuple[str, ...] = ()
    """Algorithms whose regret minus the regret of ``reference`` is also plotted."""
    reference: str = ""
    default: bool = True
    """Part of the default suite (the paper's experiments and the generalists); others run when named or with 'all'."""
    note: str = ""
    """A sentence printed under the experiment's title in the summary (what a row is and is not trained for)."""


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            name="linear-ad-linucb",
            title="Linear bandit (d=5, A=10, sigma=1.5), AD on LinUCB (paper Fig. 1 left)",
            spec=linear_bandit_spec(),
            algorithms={
                "TF (AD LinUCB)": transformer("linear-bandit-ad-linucb"),
                "TF (AD LinUCB, greedy)": transformer("linear-bandit-ad-linucb", greedy=True),
                "PPO meta-RL (ridge statistics)": meta_rl("linear-bandit-ppo-statistics"),
                **LINEAR_BASELINES,
                "TS (matched prior)": {"name": "linear_ts"},
            },
            paper={"TF (AD LinUCB)": 39.5, "LinUCB": 32.8, "TS": 51.5, "Emp": 57.0},
        ),
        Experiment(
            name="bernoulli-dpt",
            title="Bernoulli bandit (5 arms), DPT with context (Unif + TS)/2 (paper Fig. 1 right)",
            spec=bernoulli_bandit_spec(),
            algorithms={
                "TF (DPT, Rao-Blackwellised labels)": transformer("bernoulli-dpt-rb-ts-uniform"),
                "TF (DPT, hard labels)": transformer("bernoulli-dpt-ts-uniform"),
                **BERNOULLI_BASELINES,
                **BERNOULLI_STRONG,
            },
            paper={"TF (DPT, hard labels)": 11.1, "TS": 10.7, "UCB": 6.5, "Emp": 11.6},
        ),
        Experiment(
            name="bernoulli-ad-ucb",
            title="Bernoulli bandit (5 arms), AD on UCB (paper appendix figure)",
            spec=bernoulli_bandit_spec(),
            algorithms={
                "TF (AD UCB)": transformer("bernoulli-ad-ucb"),
                "TF (AD UCB, greedy)": transformer("bernoulli-ad-ucb", greedy=True),
                "TF (AD UCB, fine-tuned online)": transformer("bernoulli-ad-ucb-finetuned"),
                "PPO meta-RL (counts)": meta_rl("bernoulli-ppo-statistics"),
                "RL2 (RecurrentPPO)": meta_rl("bernoulli-rl2-recurrent-ppo"),
                **BERNOULLI_BASELINES,
                **BERNOULLI_STRONG,
            },
        ),
        Experiment(
            name="distribution-ratio",
            title="Bernoulli DPT, context alpha*TS + (1-alpha)*Unif (paper distribution-ratio figure)",
            spec=bernoulli_bandit_spec(),
            algorithms={
                **{f"TF (alpha={a})": transformer(f"bernoulli-dpt-alpha{a}") for a in ("0", "0.1", "0.5", "1")},
                "TS": {"name": "bernoulli_ts"},
            },
            paper={"TF (alpha=0)": 24.5, "TF (alpha=0.1)": 13.0, "TF (alpha=0.5)": 11.1, "TF (alpha=1)": 11.0},
            difference=tuple(f"TF (alpha={a})" for a in ("0", "0.1", "0.5", "1")),
            reference="TS",
        ),
    )
}

GENERALIST_ROWS: dict[str, tuple[str, dict[str, Any], str]] = {
    "bernoulli": (
        "Generalist (bernoulli-generalist, greedy)",
        generalist(),
        "One model for every Bernoulli bandit: bernoulli-generalist imitates finite-horizon Gittins on arm means "
        "~ U[0, 1] (sizes it was trained on: the training budget table). It was not trained on other priors, "
        "non-binary rewards or linear bandits (it refuses those).",
    ),
    "linear": (
        "Generalist (linear-generalist-v1, greedy)",
        linear_generalist(),
        "One model for every linear bandit with d <= 8: linear-generalist-v1 imitates a Gaussian-posterior index "
        "policy with the prior matched to w* ~ U[0, 1]^d, Gaussian rewards (sizes: the training budget table). "
        "It was not trained on d > 8 (it refuses it), other priors of w* (under N(0, I) it is 5x worse than "
        "LinUCB) or non-Gaussian rewards.",
    ),
}
"""Per family: the generalist's row label, its specification and what it is and is not trained for."""


def generalist_experiment(
    spec: BanditSpec, paper_size: bool = False, paper: dict[str, float] | None = None
) -> Experiment:
    """The generalist of ``spec``'s family against the references of its size.

    Bernoulli: finite-horizon Gittins for T = ``spec.horizon`` (the policy it imitates), TS and UCB;
    linear: Bayes-UCB with the prior matched to the environment's, LinUCB and TS with the matched prior.
    """
    if spec.reward is BanditReward.BERNOULLI:
        family, size = "bernoulli", f"Bernoulli bandit K={spec.num_actions}, T={spec.horizon}"
        name = f"generalist-bernoulli-k{spec.num_actions}-t{spec.horizon}"
        references: dict[str, dict[str, Any]] = {
            "Gittins (finite horizon)": {"name": "gittins", "horizon": spec.horizon},
            "TS": {"name": "bernoulli_ts"},
            "UCB": {"name": "ucb"},
        }
    else:
        family = "linear"
        size = f"linear bandit d={spec.dim}, A={spec.num_actions}, T={spec.horizon}, sigma={spec.noise_std:g}"
        name = f"generalist-linear-d{spec.dim}-a{spec.num_actions}"
        references = {
            "Bayes-UCB (matched prior)": {"name": "linear_bayes_ucb"},
            "LinUCB": {"name": "linucb"},
            "TS (matched prior)": {"name": "linear_ts"},
        }
    label, model, note = GENERALIST_ROWS[family]
    where = "the paper's size" if paper_size else "a size the paper's models cannot play"
    return Experiment(
        name=name,
        title=f"Generalist, {size} ({where})",
        spec=spec,
        algorithms={label: model, **references},
        paper=paper or {},
        note=note,
    )


GENERALIST_EXPERIMENTS = (
    generalist_experiment(bernoulli_bandit_spec(5, 200), paper_size=True, paper={"TS": 10.7}),
    generalist_experiment(bernoulli_bandit_spec(10, 100)),
    generalist_experiment(linear_bandit_spec(5, 10), paper_size=True, paper={"LinUCB": 32.8}),
    generalist_experiment(linear_bandit_spec(3, 5)),
)
"""The generalists in the default suite: the paper's sizes and one other size per family."""
EXPERIMENTS.update({e.name: e for e in GENERALIST_EXPERIMENTS})

BERNOULLI_OOD = {
    "TF (DPT)": transformer("bernoulli-dpt-ts-uniform"),
    "TF (AD UCB)": transformer("bernoulli-ad-ucb"),
    **BERNOULLI_BASELINES,
}

OOD = (
    Experiment(
        name="ood-linear-noise",
        title="OOD: linear bandit with noise sigma=3 (models trained at sigma=1.5)",
        spec=linear_bandit_spec(noise_std=3.0),
        algorithms={
            "TF (AD LinUCB)": transformer("linear-bandit-ad-linucb", greedy=True),
            "LinUCB": {"name": "linucb"},
            "TS (sigma=3)": PAPER_TS,
            "Emp": {"name": "emp"},
        },
        default=False,
    ),
    Experiment(
        name="ood-linear-prior",
        title="OOD: linear bandit with w* ~ Unif([-1,1]^d) (models trained on Unif([0,1]^d))",
        spec=linear_bandit_spec(prior_low=-1.0),
        algorithms={
            "TF (AD LinUCB)": transformer("linear-bandit-ad-linucb", greedy=True),
            **LINEAR_BASELINES,
        },
        default=False,
    ),
    Experiment(
        name="ood-bernoulli-prior",
        title="OOD: Bernoulli means ~ Unif([0, 0.5]) (models trained on Unif([0,1]))",
        spec=bernoulli_bandit_spec(prior_high=0.5),
        algorithms=BERNOULLI_OOD,
        default=False,
    ),
    Experiment(
        name="ood-bernoulli-narrow",
        title="OOD: Bernoulli means ~ Unif([0.4, 0.6]) (hard, nearly equal arms)",
        spec=bernoulli_bandit_spec(prior_low=0.4, prior_high=0.6),
        algorithms=BERNOULLI_OOD,
        default=False,
    ),
    Experiment(
        name="ood-horizon",
        title="OOD: Bernoulli bandit run for T=400 steps (models trained with T=200)",
        spec=bernoulli_bandit_spec(horizon=400),
        algorithms={
            "TF (AD UCB, no positions)": transformer("bernoulli-ad-ucb-nopos"),
            "TF (AD UCB, no positions, greedy)": transformer("bernoulli-ad-ucb-nopos", greedy=True),
            **BERNOULLI_BASELINES,
        },
        default=False,
    ),
)
EXPERIMENTS.update({e.name: e for e in OOD})

MDP_EXPERIMENTS = (
    Experiment(
        name="tabular-mdp",
        title="Tabular MDP (S=5, A=3, H=10, K=20, stationary Dirichlet prior): regret per episode",
        spec=MDPSpec(),
        algorithms={
            "TF (AD soft UCB-VI)": mdp_transformer("tabular-mdp-ad-soft-ucbvi"),
            **dpt_rows("tabular-mdp-dpt-psrl-uniform", "psrl"),
            **TABULAR_REFERENCES,
        },
        default=False,
    ),
    Experiment(
        name="tabular-mdp-nonstationary",
        title="Tabular MDP with P_h, R_h per step (S=5, A=3, H=10, K=20): 150 unknowns for 200 steps",
        spec=MDPSpec(stationary=False),
        algorithms={
            MDP_GENERALIST_ROW: mdp_generalist(),
            **TABULAR_REFERENCES,
        },
        default=False,
    ),
    Experiment(
        name="dark-room",
        title="DarkRoom (10x10, H=100, K=4): regret per episode (V* - return)",
        spec=dark_room_spec(episodes=4),
        algorithms={
            **dpt_rows("dark-room-dpt-psrl-uniform", "dark_room_psrl"),
            "PSRL (DarkRoom prior)": {"name": "dark_room_psrl"},
            "PSRL (Dirichlet-Beta)": {"name": "psrl"},
            "UCB-VI": {"name": "ucbvi"},
            **MDP_BOUNDS,
        },
        default=False,
    ),
)
EXPERIMENTS.update({e.name: e for e in MDP_EXPERIMENTS})

CONTEXTS = {f"alpha={a}": ts_uniform_mixture(float(a)) for a in ("0", "0.1", "0.5", "1")}
"""The context algorithms of the distribution-ratio models (for reference and retraining)."""

CURVE_KEYS = tuple(f"{q}_{s}" for q in ("cumulative_regret", "suboptimality") for s in ("mean", "std", "se"))
"""The curves of every algorithm, in the order of the CSV columns."""


def steps(exp: Experiment) -> int:
    """Length of the experiment's curves: steps T for a bandit, episodes K for an MDP."""
    return exp.spec.episodes if isinstance(exp.spec, MDPSpec) else exp.spec.horizon
