"""The benchmark's experiments as plain data (Section 5 and Appendix B).

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
from agents.bandit.linear_posterior import PAPER_TS_PRIOR
from icrl_gym.envs import (
    ActionSet,
    BanditArms,
    BanditPrior,
    BanditReward,
    BanditSpec,
    MDPSpec,
    bernoulli_bandit_spec,
    dark_room_spec,
    linear_bandit_spec,
)

PAPER_TS = {"name": "linear_ts", **PAPER_TS_PRIOR}
"""The paper's linear TS: its N(0, I_d) prior on w* ~ Unif([0,1]^d) (misspecified); the noise level is the env's.
``{"name": "linear_ts"}`` alone is TS with the prior matched to the environment's."""

BERNOULLI_BASELINES = {"UCB": {"name": "ucb"}, "TS": {"name": "bernoulli_ts"}, "Emp": {"name": "emp"}}
"""The paper's comparison algorithms on Bernoulli bandits: UCB, Thompson sampling, the empirical mean."""

LINEAR_BASELINES = {"LinUCB": {"name": "linucb"}, "TS": PAPER_TS, "Emp": {"name": "emp"}}
"""The paper's comparison algorithms on linear bandits: LinUCB, its TS (:data:`PAPER_TS`), the empirical mean."""

GENERALISTS = ("generalist", "linear_generalist", "mdp_generalist")
"""Agent names of the generalist transformers (one model for every size of their family)."""

LEARNED = ("transformer", "mdp_transformer", "meta_rl", *GENERALISTS)
"""Agent names whose specification carries a ``checkpoint`` (shipped in icrl_gym/pretrained)."""


def meta_rl(name: str, greedy: bool = False) -> dict[str, Any]:
    """Specification of a shipped online meta-RL policy (PPO across the prior)."""
    return {"name": "meta_rl", "checkpoint": name, "greedy": greedy}


def transformer(name: str, greedy: bool = False) -> dict[str, Any]:
    """Specification of a shipped transformer (sampled from its policy unless ``greedy``)."""
    return {"name": "transformer", "checkpoint": name, "greedy": greedy}


def mdp_transformer(name: str, greedy: bool = False) -> dict[str, Any]:
    """Specification of a shipped tabular-MDP transformer."""
    return {"name": "mdp_transformer", "checkpoint": name, "greedy": greedy}


SOFT_UCBVI = {"name": "ucbvi", "temperature": 0.1, "bonus_scale": 0.01}
"""The AD expert for tabular MDPs: soft UCB-VI(tau=0.1) with the paper's bonus scaled by 0.01.

With the paper's constant the bonus 2H sqrt(log(SAT/delta)/N) exceeds H until N ~ 6,000, so every
Q clips at H and UCB-VI acts uniformly within K=20 episodes (measured: 51.8 vs uniform 51.8)."""

TABULAR_EXPERTS = {
    "PSRL": {"name": "psrl"},
    "soft UCB-VI (tau=0.1, bonus x0.01)": SOFT_UCBVI,
    "UCB-VI (bonus x0.01)": {"name": "ucbvi", "bonus_scale": 0.01},
    "greedy VI (bonus 0)": {"name": "ucbvi", "bonus_scale": 0.0},
}


def generalist(name: str = "bernoulli-generalist") -> dict[str, Any]:
    """Specification of the shipped Bernoulli generalist (greedy: it imitates the deterministic Gittins policy)."""
    return {"name": "generalist", "checkpoint": name, "greedy": True}


def linear_generalist(name: str = "linear-generalist") -> dict[str, Any]:
    """Specification of the shipped linear generalist (greedy: it imitates a deterministic index policy)."""
    return {"name": "linear_generalist", "checkpoint": name, "greedy": True}


def mdp_generalist(name: str = "tabular-mdp-generalist") -> dict[str, Any]:
    """The shipped MDP generalist, as its agent's default deploys it (exploring, then greedy; sampled in rooms)."""
    return {"name": "mdp_generalist", "checkpoint": name}


MDP_GENERALIST_ROW = "MDP generalist (any size)"
"""Row label of the MDP generalist in the tabular-MDP experiments."""


def bayes_dpt(posterior: str, greedy: bool) -> dict[str, Any]:
    """The Bayes-optimal DPT policy on ``posterior``'s P(a* = a | D): what a perfectly pretrained DPT model does."""
    return {"name": "posterior_optimal_action", "posterior": {"name": posterior}, "greedy": greedy}


TABULAR_REFERENCES = {
    **TABULAR_EXPERTS,
    "UCB-VI (paper bonus)": {"name": "ucbvi"},
    "Uniform": {"name": "mdp_uniform"},
    "Optimal": {"name": "mdp_optimal"},
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
        "Generalist (linear-generalist, greedy)",
        linear_generalist(),
        "One model for every linear bandit with d <= 8: linear-generalist imitates a Gaussian-posterior index "
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
        references = {
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
            "TF (DPT, PSRL/uniform context)": mdp_transformer("tabular-mdp-dpt-psrl-uniform"),
            "TF (DPT, greedy)": mdp_transformer("tabular-mdp-dpt-psrl-uniform", greedy=True),
            MDP_GENERALIST_ROW: mdp_generalist(),
            "Bayes DPT policy (posterior of a*, sampled)": bayes_dpt("psrl", greedy=False),
            "Bayes DPT policy (greedy)": bayes_dpt("psrl", greedy=True),
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
            "TF (DPT, PSRL/uniform context)": mdp_transformer("dark-room-dpt-psrl-uniform"),
            "TF (DPT, greedy)": mdp_transformer("dark-room-dpt-psrl-uniform", greedy=True),
            MDP_GENERALIST_ROW: mdp_generalist(),
            "Bayes DPT policy (posterior of a*, sampled)": bayes_dpt("dark_room_psrl", greedy=False),
            "Bayes DPT policy (greedy)": bayes_dpt("dark_room_psrl", greedy=True),
            "PSRL (DarkRoom prior)": {"name": "dark_room_psrl"},
            "PSRL (Dirichlet-Beta)": {"name": "psrl"},
            "UCB-VI": {"name": "ucbvi"},
            "Uniform": {"name": "mdp_uniform"},
            "Optimal": {"name": "mdp_optimal"},
        },
        default=False,
    ),
)
EXPERIMENTS.update({e.name: e for e in MDP_EXPERIMENTS})

CONTEXTS = {f"alpha={a}": ts_uniform_mixture(float(a)) for a in ("0", "0.1", "0.5", "1")}
"""The context algorithms of the distribution-ratio models (for reference and retraining)."""


@dataclass(frozen=True)
class GridExperiment:
    """A regret comparison over a grid of environment sizes (``benchmarks/evaluations/generalization.py`` runs it).

    Every cell is one environment; in every cell all rows play the same instances (common random
    numbers) and the learned rows are compared with the best reference of the cell.
    """

    name: str
    title: str
    arms: tuple[int, ...]
    """Bernoulli K of the trained range (2..20)."""
    horizons: tuple[int, ...]
    """Bernoulli T of the trained range (up to 500)."""
    ood_arms: tuple[int, ...]
    """Bernoulli K beyond the trained range (cells marked out of range)."""
    ood_horizons: tuple[int, ...]
    """Bernoulli T beyond the trained range (cells marked out of range)."""
    prior_shifts: tuple[tuple[float, float], ...]
    """Beta(a, b) priors of the arm means (instead of U[0, 1]), at T=``shift_horizon`` for every in-range K."""
    shift_horizon: int
    bernoulli_references: dict[str, dict[str, Any]]
    """Reference rows; Gittins gets horizon=T and the cell's Beta prior, the DP rows only at K in ``dp_arms``."""
    dp_arms: tuple[int, ...]
    bernoulli_model: dict[str, Any]
    """The Bernoulli generalist row (its checkpoint is an option of the harness)."""
    linear_dims: tuple[int, ...]
    linear_actions: tuple[int, ...]
    linear_horizon: int
    linear_noise: float
    linear_variants: dict[str, dict[str, Any]]
    """Changes of one or two settings at d=5, A=10 (``linear_bandit_spec`` keywords)."""
    linear_references: dict[str, dict[str, Any]]
    linear_model: dict[str, Any]
    """The linear generalist row: an agent registered under this name with a shipped checkpoint of this name."""
    mab_arms: tuple[int, ...]
    """K of the Gaussian multi-armed bandits (opt-in family 'gaussian-mab'): one-hot arms, A = d = K."""
    mab_horizons: tuple[int, ...]
    mab_noise: float
    mab_priors: dict[str, dict[str, Any]]
    """Priors of the arm means, one heatmap panel each (``linear_bandit_spec`` keywords)."""
    mab_references: dict[str, dict[str, Any]]
    mab_compared: tuple[str, ...]
    """The references a Gaussian multi-armed cell's best reference is chosen from (those told the prior)."""
    held_out_size: tuple[int, int, int, float]
    """(d, A, T, sigma) of the held-out priors (opt-in family 'held-out'): the paper's linear size."""
    held_out_priors: dict[str, dict[str, Any]]
    """Priors of w* never used in training (``linear_bandit_spec`` keywords), one cell each."""
    held_out_references: dict[str, dict[str, Any]]
    held_out_compared: tuple[str, ...]
    """The references a held-out cell's best reference is chosen from (LinUCB and the matched Bayes-UCB)."""
    family_dims: tuple[int, ...]
    """d of the in-family cells (opt-in family 'in-family'): w* from the prior family, hyperparameters per instance."""
    family_actions: tuple[int, ...]
    family_horizons: tuple[int, ...]
    family_noise: float
    """sigma of the d x A x T cells (fixed per cell, told to every row)."""
    family_noise_variants: tuple[float, ...]
    """Other sigma, each at every T of ``family_horizons``, at d, A = ``family_variant_size``."""
    family_variant_size: tuple[int, int]
    family_prior: dict[str, Any]
    """The prior of w* (``linear_bandit_spec`` keywords): the whole family, one member per instance."""
    family_references: dict[str, dict[str, Any]]
    family_compared: tuple[str, ...]
    """The references an in-family cell's best reference is chosen from (those told the instance's prior)."""
    family_range: dict[str, tuple[float, float]]
    """The range the in-family cells count as in range for (``BanditSpec`` field: lowest, highest)."""
    beta_params: tuple[float, ...]
    """a and b of the Beta(a, b) priors of the opt-in family 'bernoulli-beta' (every pair: len^2 priors)."""
    beta_arms: tuple[int, ...]
    """K of the 'bernoulli-beta' cells (each Beta prior and each skewed prior at every K)."""
    beta_horizon: int
    skewed_priors: dict[str, dict[str, Any]]
    """The skewed priors of 'bernoulli-beta' (``bernoulli_bandit_spec`` keywords), one heatmap row each."""
    beta_references: dict[str, dict[str, Any]]
    """Reference rows of 'bernoulli-beta'; the Beta-Bernoulli agents among them are told the cell's Beta prior
    (Beta(1, 1) on the skewed cells), Gittins also T; the DP rows only at K in ``dp_arms`` with a Beta prior."""
    beta_compared: tuple[str, ...]
    """The references a 'bernoulli-beta' cell's best reference is chosen from: the matched-prior Gittins."""
    trained_arms: tuple[int, int] = (2, 20)
    trained_horizon: int = 500
    seed_offset: int = 30_000_000
    """Evaluation seeds start here, disjoint from every training seed."""
    default: bool = False


MATCHED_AND_LINUCB = {
    "Bayes-UCB (matched)": {"name": "linear_bayes_ucb"},
    "TS (matched)": {"name": "linear_ts"},
    "LinUCB (alpha=1)": {"name": "linucb", "alpha": 1.0},
    "LinUCB (alpha=2)": {"name": "linucb", "alpha": 2.0},
}
"""Bayes-UCB and TS told the instance's (moment-matched) prior and sigma, and the prior-free LinUCB (lambda=1)."""

BETA_PARAMS = (0.5, 1.0, 2.0, 5.0)
"""The a and b of the bernoulli-beta cells' Beta(a, b) priors (16 pairs)."""

GENERALIZATION = GridExperiment(
    name="generalization",
    title="Generalist in-context agents across sizes",
    arms=(2, 3, 5, 10, 20),
    horizons=(50, 200, 500),
    ood_arms=(30, 50),
    ood_horizons=(1000,),
    prior_shifts=((2.0, 2.0), (0.5, 0.5)),
    shift_horizon=200,
    bernoulli_references={
        "Gittins (finite horizon)": {"name": "gittins"},
        "TS": {"name": "bernoulli_ts"},
        "UCB": {"name": "ucb"},
        "UCB (Fig. 1, n0=1)": {"name": "ucb", "count_offset": 1.0},
        "Bayes-optimal DP": {"name": "bernoulli_bayes_optimal"},
    },
    dp_arms=(2, 3),
    bernoulli_model={"name": "generalist", "checkpoint": "bernoulli-generalist", "greedy": True},
    linear_dims=(2, 5, 8),
    linear_actions=(5, 10, 20),
    linear_horizon=200,
    linear_noise=1.5,
    linear_variants={
        "T=100": {"horizon": 100},
        "T=500": {"horizon": 500},
        "sigma=0.5": {"noise_std": 0.5},
        "sigma=1": {"noise_std": 1.0},
        "sigma=2": {"noise_std": 2.0},
        "per-step action sets": {"action_set": ActionSet.PER_STEP},
        "Gaussian arms": {"arms": BanditArms.GAUSSIAN},
        "w* ~ N(0, I)": {"prior": BanditPrior.GAUSSIAN, "prior_var": 1.0},
    },
    linear_references={
        "Bayes-UCB (matched)": {"name": "linear_bayes_ucb"},
        "TS (matched)": {"name": "linear_ts"},
        "LinUCB": {"name": "linucb"},
    },
    linear_model={"name": "linear_generalist", "checkpoint": "linear-generalist", "greedy": True},
    mab_arms=(2, 5, 20, 50),
    mab_horizons=(200, 1000),
    mab_noise=0.5,
    mab_priors={
        "means ~ U[0, 1]": {"prior": BanditPrior.UNIFORM},
        "means ~ N(0, 1)": {"prior": BanditPrior.GAUSSIAN, "prior_var": 1.0},
    },
    mab_references={**MATCHED_AND_LINUCB, "UCB": {"name": "ucb"}},
    mab_compared=("Bayes-UCB (matched)", "TS (matched)"),
    held_out_size=(5, 10, 200, 1.5),
    held_out_priors={
        "N(0, I)": {"prior": BanditPrior.GAUSSIAN, "prior_var": 1.0},
        "unit sphere": {"prior": BanditPrior.SPHERE},
        "s e_i, s ~ N(0, 1)": {"prior": BanditPrior.ONE_COORDINATE, "prior_var": 1.0},
    },
    held_out_references=MATCHED_AND_LINUCB,
    held_out_compared=("Bayes-UCB (matched)", "LinUCB (alpha=1)", "LinUCB (alpha=2)"),
    family_dims=(2, 5, 8, 16),
    family_actions=(2, 10, 50),
    family_horizons=(50, 200, 1000),
    family_noise=0.5,
    family_noise_variants=(0.1, 2.0),
    family_variant_size=(5, 10),
    family_prior={"prior": BanditPrior.FAMILY},
    family_references=MATCHED_AND_LINUCB,
    family_compared=("Bayes-UCB (matched)", "TS (matched)"),
    # the second version's target range (the shipped first version plays d <= 8: its rows beyond are n/a)
    family_range={"dim": (2, 16), "num_actions": (2, 50), "horizon": (1, 1000), "noise_std": (0.05, 3.0)},
    beta_params=BETA_PARAMS,
    beta_arms=(2, 5, 10, 20),
    beta_horizon=200,
    skewed_priors={
        "high half first": {"prior": BanditPrior.SKEWED},
        "low half first": {"prior": BanditPrior.SKEWED_REVERSED},
    },
    beta_references={
        "Gittins (matched prior)": {"name": "gittins"},
        "TS (matched prior)": {"name": "bernoulli_ts"},
        "Bayes-UCB (matched prior)": {"name": "bayes_ucb"},
        "UCB": {"name": "ucb"},
        "Bayes-optimal DP (matched prior)": {"name": "bernoulli_bayes_optimal"},
        # not told the prior: Bayes-optimal for an unknown member of the grid's 16 Beta priors, the
        # best any in-context learner of this family can do (benchmarks/evaluations/bernoulli_frontier.py)
        "Bayes-optimal DP (family prior, not told)": {
            "name": "bernoulli_bayes_optimal",
            "hyperprior": [[a, b] for a in BETA_PARAMS for b in BETA_PARAMS],
        },
    },
    beta_compared=("Gittins (matched prior)",),
)

GRID_EXPERIMENTS: dict[str, GridExperiment] = {GENERALIZATION.name: GENERALIZATION}
"""Grid experiments (opt-in: they evaluate every row on tens of environments)."""


@dataclass(frozen=True)
class MDPGridExperiment:
    """The MDP generalist against PSRL and the Bayes DPT policy over sizes (run by ``mdp_generalization.py``).

    Every cell is one MDP prior; all rows of a cell play the same instances with the same noise
    (common random numbers).  Cell groups: ``in-range`` (random MDPs, S x A x H x K with K H <=
    ``max_steps``), ``fixed`` (today's fixed size, ``fixed_runs_factor`` times the runs), ``dark``
    (dark rooms at their documented H and K) and ``beyond`` (S beyond the trained range).
    """

    name: str
    title: str
    states: tuple[int, ...]
    actions: tuple[int, ...]
    horizons: tuple[int, ...]
    episodes: tuple[int, ...]
    max_steps: int
    """In-range cells keep T = K H <= max_steps."""
    fixed: tuple[int, int, int, int]
    """(S, A, H, K) of the fixed-size MDP transformers."""
    fixed_runs_factor: int
    rooms: tuple[tuple[int, int, int], ...]
    """(size, H, K) of the dark rooms."""
    beyond_states: tuple[int, ...]
    beyond: tuple[int, int, int]
    """(A, H, K) of the cells beyond the trained range."""
    references: dict[str, dict[str, Any]]
    """Rows of the random-MDP cells (the Bayes DPT rows are left out beyond the range: see ``beyond_references``)."""
    fixed_references: dict[str, dict[str, Any]]
    """Rows added at the fixed size."""
    beyond_references: tuple[str, ...]
    """The ``references`` played beyond the range (the Bayes DPT policy solves 32 posterior MDPs per step)."""
    room_references: dict[str, dict[str, Any]]
    compared: tuple[str, ...]
    """Rows that compete for a cell's best reference (not uniform or optimal play)."""
    psrl: tuple[str, str]
    """Row names of PSRL in random MDPs and in dark rooms (the acceptance ratios' denominators)."""
    bayes_dpt: str
    """Row name of the greedy Bayes DPT policy (random MDPs and dark rooms)."""
    model: dict[str, Any]
    """The MDP generalist row (its checkpoint is an option of the harness)."""
    groups: tuple[str, ...] = ("in-range", "fixed", "dark", "beyond")
    seed_offset: int = 40_000_000
    """Evaluation seeds start here, disjoint from every training seed."""
    default: bool = False


MDP_GENERALIZATION = MDPGridExperiment(
    name="mdp-generalization",
    title="One MDP generalist across tabular MDP sizes and dark rooms",
    states=(3, 5, 10, 20),
    actions=(2, 4, 6),
    horizons=(5, 10, 20),
    episodes=(5, 20, 50),
    max_steps=1000,
    fixed=(5, 3, 10, 20),
    fixed_runs_factor=2,
    rooms=((5, 20, 10), (8, 50, 4), (10, 100, 4), (12, 100, 4)),
    beyond_states=(30, 50),
    beyond=(3, 50, 100),
    references={
        "PSRL": {"name": "psrl"},
        "Bayes DPT policy (greedy)": bayes_dpt("psrl", greedy=True),
        "UCB-VI (bonus x0.01)": {"name": "ucbvi", "bonus_scale": 0.01},
        "soft UCB-VI (tau=0.1, bonus x0.01)": SOFT_UCBVI,
        "Uniform": {"name": "mdp_uniform"},
        "Optimal": {"name": "mdp_optimal"},
    },
    fixed_references={"Bayes DPT policy (sampled)": bayes_dpt("psrl", greedy=False)},
    beyond_references=("PSRL", "UCB-VI (bonus x0.01)", "soft UCB-VI (tau=0.1, bonus x0.01)", "Uniform", "Optimal"),
    room_references={
        "PSRL (DarkRoom prior)": {"name": "dark_room_psrl"},
        "Bayes DPT policy (greedy)": bayes_dpt("dark_room_psrl", greedy=True),
        "Bayes DPT policy (sampled)": bayes_dpt("dark_room_psrl", greedy=False),
        "UCB-VI (bonus x0.01)": {"name": "ucbvi", "bonus_scale": 0.01},
        "Uniform": {"name": "mdp_uniform"},
        "Optimal": {"name": "mdp_optimal"},
    },
    compared=(
        "PSRL",
        "PSRL (DarkRoom prior)",
        "Bayes DPT policy (greedy)",
        "Bayes DPT policy (sampled)",
        "UCB-VI (bonus x0.01)",
        "soft UCB-VI (tau=0.1, bonus x0.01)",
    ),
    psrl=("PSRL", "PSRL (DarkRoom prior)"),
    bayes_dpt="Bayes DPT policy (greedy)",
    model=mdp_generalist(),
)

MDP_GRID_EXPERIMENTS: dict[str, MDPGridExperiment] = {MDP_GENERALIZATION.name: MDP_GENERALIZATION}
"""MDP grid experiments (opt-in: hundreds of runs in each of ~40 MDPs)."""
