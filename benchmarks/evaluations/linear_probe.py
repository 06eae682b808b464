"""A quick probe of a linear-bandit policy: its ratio to the best uninformed reference on 17 small cells.

The cells are the fine-tuning's 9 validation cells (T = 200 and one low-noise cell at T = 1,000;
:data:`icrl_gym.training.finetune_linear.VALIDATION_CELLS`, seeds 777,000 + cell) and :data:`LONG_CELLS`,
where the second version's index was weakest
(many arms at T = 200, T = 1,000, and T = 50 or two arms, where its horizon-aware width explored too much;
seeds 555,000 + cell).  Every row of a cell plays the same instances and
noise (common random numbers); the best uninformed reference is the lowest mean of
:data:`~agents.bandit.model_average.UNINFORMED_REFERENCES` on them.  ``--runs`` per cell at T <= 200, half as
many at T = 1,000.  None of these seeds is an acceptance seed (3.1e7, 3.2e7), so a setting chosen here is judged
there on instances it was not chosen on.  The policy is a linear generalist checkpoint (``--model``, greedy),
with configuration fields set by ``--set`` and its learned width dropped by ``--no-width``, or any agent
specification (``--agent`` as JSON)::

    python -m benchmarks.evaluations.linear_probe --model linear-generalist-v3 --set skip_schedule=moss skip_scale=1
    python -m benchmarks.evaluations.linear_probe --agent '{"name": "model_averaged_moss", "scale": 0.8}'

``--cache DIR`` keeps the references' means per cell (they do not depend on the policy), so a search over
settings plays them once; ``--cells`` plays some cells only (names separated by semicolons).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, cast

import numpy as np

from agents import make_agent
from agents.bandit.model_average import UNINFORMED_REFERENCES
from icrl_gym.algorithm import BanditAgent
from icrl_gym.data.trajectories import evaluate_regret, failure_limit
from icrl_gym.envs import BanditSpec, linear_bandit_spec
from icrl_gym.utils.cli import doc_parser
from icrl_gym.utils.fileio import atomic_write_bytes

LONG_CELLS: dict[str, BanditSpec] = {
    "MAB N(0, 1), K=50, T=1000": linear_bandit_spec(50, 50, 1000, 0.5, arms="one_hot", prior="gaussian", prior_var=1.0),
    "family d=5, A=10, T=1000, sigma=0.1": linear_bandit_spec(5, 10, 1000, 0.1, prior="family"),
    "family d=16, A=50, T=1000": linear_bandit_spec(16, 50, 1000, 0.5, prior="family"),
    "MAB U[0, 1], K=50, T=200": linear_bandit_spec(50, 50, 200, 0.5, arms="one_hot"),
    "MAB N(0, 1), K=50, T=200": linear_bandit_spec(50, 50, 200, 0.5, arms="one_hot", prior="gaussian", prior_var=1.0),
    "family d=5, A=2, T=1000": linear_bandit_spec(5, 2, 1000, 0.5, prior="family"),
    "family d=2, A=10, T=50": linear_bandit_spec(2, 10, 50, 0.5, prior="family"),
    "family d=5, A=2, T=50": linear_bandit_spec(5, 2, 50, 0.5, prior="family"),
    "MAB U[0, 1], K=2, T=200": linear_bandit_spec(2, 2, 200, 0.5, arms="one_hot"),
}
"""The cells beyond the validation's (seeds ``LONG_SEED`` + position)."""
LONG_SEED = 555_000


def probe_cells() -> list[tuple[str, BanditSpec, int]]:
    """(name, spec, seed) of the 17 cells: the validation's, then the rest of :data:`LONG_CELLS`."""
    from icrl_gym.training.finetune_linear import VALIDATION_CELLS, VALIDATION_SEED

    return [(name, spec, VALIDATION_SEED + i) for i, (name, spec) in enumerate(VALIDATION_CELLS.items())] + [
        (name, spec, LONG_SEED + i)
        for i, (name, spec) in enumerate(LONG_CELLS.items())
        if name not in VALIDATION_CELLS  # the long low-noise cell is a validation cell too: played once
    ]


def model_agent(name: str, fields: dict[str, Any], no_width: bool) -> BanditAgent:
    """A greedy agent of the checkpoint ``name`` with configuration ``fields`` set (and its learned width dropped)."""
    from agents.learned.linear_generalist import LinearGeneralistAgent
    from icrl_gym.checkpoint import load_checkpoint, resolve_checkpoint
    from icrl_gym.models.linear_generalist import LinearGeneralistTransformer
    from icrl_gym.training.finetune import widened

    model, meta = load_checkpoint(resolve_checkpoint(name))
    widen = {**fields, **({"index_width": False} if no_width else {})}
    model, meta = widened(model, meta, widen, drop=("posterior.width.",) if no_width else ())
    return LinearGeneralistAgent.from_model(cast(LinearGeneralistTransformer, model), meta, greedy=True)


def reference_means(spec: BanditSpec, runs: int, seed: int, cache: Path | None) -> dict[str, float]:
    """Every uninformed reference's mean regret on the cell's ``runs`` instances of ``seed``.

    With ``cache`` a folder, the means are read from (or written to) one JSON file per cell, runs and seed,
    which records the spec: the references are deterministic under the seed, so a probe of many settings plays
    them once.
    """
    path = None
    if cache is not None:
        key = hashlib.sha256(json.dumps([repr(spec), runs, seed, sorted(UNINFORMED_REFERENCES)]).encode())
        path = cache / f"{key.hexdigest()[:20]}.json"
        if path.exists():
            return dict(json.loads(path.read_text())["means"])
    means = {
        k: float(evaluate_regret(spec, row, runs, seed=seed, batch_size=runs).sum(1).mean())
        for k, row in UNINFORMED_REFERENCES.items()
    }
    if path is not None:
        record = {"spec": repr(spec), "runs": runs, "seed": seed, "means": means}
        atomic_write_bytes(path, json.dumps(record, indent=1).encode())
    return means


def probe(
    agent: BanditAgent, runs: int, names: tuple[str, ...] = (), cache: Path | None = None
) -> dict[str, dict[str, Any]]:
    """Per cell: the policy's mean, the best uninformed reference and its mean, the ratio and the failures.

    Only the cells named in ``names`` are played (all when empty); ``cache`` as in :func:`reference_means`.
    """
    out = {}
    for name, spec, seed in probe_cells():
        if names and name not in names:
            continue
        n = runs if spec.horizon <= 200 else max(runs // 2, 2)
        regret = evaluate_regret(spec, agent, n, seed=seed, batch_size=n).sum(1)
        refs = reference_means(spec, n, seed, cache)
        best = min(refs, key=refs.__getitem__)
        out[name] = {
            "mean": float(regret.mean()),
            "best": best,
            "best mean": float(refs[best]),
            "ratio": float(regret.mean() / refs[best]),
            "failures": float(np.mean(regret > failure_limit(refs[best]))),
        }
    return out


def main(argv: list[str] | None = None) -> None:
    """Print every cell's ratio, then the mean, geometric mean and largest ratio."""
    parser = doc_parser(__doc__)
    parser.add_argument("--model", help="a linear generalist checkpoint (a shipped name or a path)")
    parser.add_argument("--set", nargs="*", default=[], help="model configuration fields KEY=VALUE (JSON values)")
    parser.add_argument("--no-width", action="store_true", help="drop the model's learned width")
    parser.add_argument("--agent", help="an agent specification as JSON, instead of --model")
    parser.add_argument("--runs", type=int, default=200, help="runs per cell at T <= 200 (half at T = 1,000)")
    parser.add_argument("--cells", default="", help="semicolon-separated cell names to play (default all)")
    parser.add_argument("--cache", type=Path, help="a folder keeping the references' means between probes")
    args = parser.parse_args(argv)
    if (args.model is None) == (args.agent is None):
        parser.error("give exactly one of --model and --agent")
    if args.model is not None:
        fields = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
        agent = model_agent(args.model, fields, args.no_width)
    else:
        built = make_agent(json.loads(args.agent))
        assert isinstance(built, BanditAgent)
        agent = built
    start = time.time()
    names = tuple(n for n in args.cells.split(";") if n)
    unknown = set(names) - {name for name, _, _ in probe_cells()}
    if unknown:
        parser.error(f"no probe cell named {sorted(unknown)}")
    cells = probe(agent, args.runs, names, args.cache)
    for name, row in cells.items():
        print(f"{name:40s} {row['ratio']:.3f}  failures {row['failures']:.3f}  ({row['best']} {row['best mean']:.2f})")
    ratios = [row["ratio"] for row in cells.values()]
    print(
        f"mean {np.mean(ratios):.4f}  geometric mean {np.exp(np.mean(np.log(ratios))):.4f}  "
        f"largest {max(ratios):.3f}  ({time.time() - start:.0f} s)"
    )


if __name__ == "__main__":
    main()
