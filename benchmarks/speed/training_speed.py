"""Pretraining and rollout speed of the in-context transformers, new kernels against a reference revision.

In one process, for each thread count in ``--threads``:

- ``matmul``: the machine's own fp32 GEMM rate (``--gemm`` square), the yardstick;
- ``train``: forward + backward (cross-entropy on random labels) of full-length sequences, batch
  ``batch``, for the paper model (L=8, D=32, ReLU, two tokens per step, T=200) and the model of
  every shipped transformer checkpoint (``icrl_gym/pretrained/*.json``, bandit and MDP), in
  sequences/s and tokens/s, and as GFLOP/s (FLOPs counted by ``torch.utils.flop_counter`` on the
  reference code, full T x T attention) next to the GEMM rate;
- ``rollout``: greedy cached rollout (``model.step``) of the paper model over ``instances`` random
  linear-bandit action sets for ``steps`` steps, in env-steps/s: the reference, the new model on
  its PyTorch decode path (a token-major ``KVCache``) and on the compiled kernel (``icrl_gym.models.native``).

The reference is the same file at ``reference`` (default: the revision before the new kernels),
imported from ``git show``, with the new model's weights copied in.  Old and new run interleaved
over ``repeats`` rounds (after one warm-up round) and medians are reported, so that the load of a
shared machine falls on both alike; the printed ratios are measured in the same run.

``device=auto`` takes CUDA when present; ``autocast=bf16`` and ``tf32=true`` are for GPUs (the
ReLU kernel falls back to the plain ops under autocast).  Untested on CUDA so far.

    python -m benchmarks.speed.training_speed [CONFIG.json] [--set threads=[1,2] repeats=3 batch=64 rollout=false]
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.speed.timing import RolloutSize, interleaved, parse_config, threads, timed, train_step
from icrl_gym.config import DEVICE, POSITIVE_INT, Allowed, check_fields, checked
from icrl_gym.models import mdp_transformer, transformer
from icrl_gym.models.kv_cache import KVCache
from icrl_gym.models.native import native_kernels
from icrl_gym.utils.device import resolve_device

REFERENCE = "a1af953663edeba7a8a6ad492b619a27654f02c2"
"""The commit before the blocked ReLU kernel and the rollout clean-up."""
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class TrainingSpeedConfig(RolloutSize):
    """What :func:`main` measures: the rollout's size (:class:`~benchmarks.speed.timing.RolloutSize`) and the below."""

    threads: list[int] = field(default_factory=lambda: [1, 2])
    """torch CPU thread counts, measured one after the other."""
    repeats: int = checked(3, POSITIVE_INT)
    """Timed rounds after one warm-up round."""
    batch: int = checked(64, POSITIVE_INT)
    """Sequences per training step."""
    gemm: int = checked(1024, POSITIVE_INT)
    """Size of the yardstick matmul (square)."""
    paper: bool = True
    """Time the training step of the paper model (L=8, D=32, ReLU, two tokens per step)."""
    shipped: bool = True
    """Time the training step of every distinct shipped transformer configuration."""
    train: bool = True
    """Measure training steps."""
    rollout: bool = True
    """Measure the cached rollout."""
    reference: str = REFERENCE
    """Git revision of the reference code."""
    device: str = checked("auto", DEVICE)
    """'auto' (CUDA when present), 'cpu' or 'cuda'."""
    autocast: str = checked("none", Allowed(choices=("none", "bf16")))
    """Mixed precision of the forward pass: 'none' or 'bf16' (GPU)."""
    tf32: bool = False
    """Allow TF32 matmuls (GPU)."""

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.threads or not all(POSITIVE_INT.admits(n) for n in self.threads):
            raise ValueError(
                f"TrainingSpeedConfig.threads must be a non-empty list of integers >= 1, got {self.threads}"
            )


def load_reference(rev: str) -> tuple[ModuleType, ModuleType]:
    """Import ``transformer.py`` and ``mdp_transformer.py`` as they were at ``rev`` (the MDP one on the old blocks)."""
    modules = []
    for name in ("transformer", "mdp_transformer"):
        source = subprocess.run(
            ["git", "show", f"{rev}:icrl_gym/models/{name}.py"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
        source = source.replace("from icrl_gym.models.transformer import", "from _reference_transformer import")
        # the read-out type moved from policy_output.py to policy.py (the learned-policy contract)
        source = source.replace("from icrl_gym.models.policy_output import", "from icrl_gym.models.policy import")
        spec = importlib.util.spec_from_loader(f"_reference_{name}", loader=None)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        exec(compile(source, f"{rev}:{name}.py", "exec"), module.__dict__)  # noqa: S102 - our own file at rev
        modules.append(module)
    return modules[0], modules[1]


def shipped_models() -> dict[str, tuple[str, dict[str, Any]]]:
    """Distinct transformer configurations of the shipped checkpoints: name -> (class name, config dict)."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for path in sorted((ROOT / "icrl_gym" / "pretrained").glob("*.json")):
        record = json.loads(path.read_text())
        cls = record.get("model_class", "BanditTransformer")
        if cls not in ("BanditTransformer", "MDPTransformer") or not isinstance(record.get("model"), dict):
            continue
        if all(record["model"] != cfg for c, cfg in found.values() if c == cls):
            found[path.stem] = (cls, record["model"])
    return found


def build(module: ModuleType, cls: str, config: dict[str, Any]) -> torch.nn.Module:
    """A model of class ``cls`` from ``module`` (the new or the reference code) with ``config``."""
    if cls == "MDPTransformer":
        return module.MDPTransformer(module.MDPTransformerConfig.from_dict(config))
    return module.BanditTransformer(module.TransformerConfig.from_dict(config))


def random_batch(model: torch.nn.Module, batch: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Full-length random inputs and labels for ``model``."""
    cfg: Any = model.config
    g = torch.Generator().manual_seed(0)
    if hasattr(cfg, "num_states"):
        T = cfg.horizon * cfg.episodes
        xs = (
            torch.randint(0, cfg.num_states, (batch, T), generator=g),
            torch.randint(0, cfg.num_actions, (batch, T), generator=g),
            torch.rand(batch, T, generator=g),
        )
    else:
        T = cfg.horizon
        xs = (
            torch.rand(batch, T, cfg.num_actions, cfg.dim, generator=g) * 2 - 1,
            torch.randint(0, cfg.num_actions, (batch, T), generator=g),
            torch.randn(batch, T, generator=g),
        )
    labels = torch.randint(0, cfg.num_actions, (batch, T), generator=g)
    return tuple(x.to(device) for x in (*xs, labels))


def rollout(model: Any, sets: torch.Tensor, steps: int, torch_path: bool = False) -> None:
    """Greedy cached rollout: ``sets`` (steps, B, A, d), rewards a fixed function of the action.

    ``model`` is the new transformer or the reference one (different classes, same methods).
    ``torch_path`` takes the PyTorch decode path of the new model (a token-major ``KVCache``; the
    reference has no other path).
    """
    B = sets.shape[1]
    if torch_path:
        cache = KVCache.allocate(B, model.config, model.config.max_tokens, sets.device, sets.dtype)
    else:
        cache = model.new_cache(B, model.env_info(), sets.device)
    prev_a = prev_r = None
    rows = torch.arange(B, device=sets.device)
    contract = next(iter(inspect.signature(model.step).parameters)) == "cache"  # the reference: cache last
    with torch.inference_mode():
        for t in range(steps):
            args = (cache, sets[t], prev_a, prev_r) if contract else (sets[t], prev_a, prev_r, cache)
            logits = model.step(*args)[0]
            prev_a = logits.argmax(-1)
            prev_r = sets[t, rows, prev_a, 0]


def gemm_gflops(n: int, device: torch.device) -> float:
    """fp32 n x n matmul rate, median of 5."""
    a = torch.randn(n, n, device=device)
    times = [timed(lambda: a @ a, device) for _ in range(6)]
    return 2 * n**3 / float(np.median(times[1:])) / 1e9


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure and print the table."""
    args = parse_config(TrainingSpeedConfig, argv)
    device = resolve_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    ref_tf, ref_mdp = load_reference(args.reference)
    configs: dict[str, tuple[str, dict[str, Any]]] = {}
    if args.paper and args.train:
        configs["paper (L=8, D=32, relu, 2 tokens/step)"] = (
            "BanditTransformer",
            transformer.TransformerConfig().to_dict(),
        )
    if args.shipped and args.train:
        configs.update(shipped_models())

    torch.manual_seed(0)
    pairs: dict[str, tuple[torch.nn.Module, torch.nn.Module, tuple[torch.Tensor, ...], float, int]] = {}
    for name, (cls, cfg) in configs.items():
        new = build(mdp_transformer if cls == "MDPTransformer" else transformer, cls, cfg).to(device).train()
        old = build(ref_mdp if cls == "MDPTransformer" else ref_tf, cls, cfg).to(device).train()
        old.load_state_dict(new.state_dict())
        data = random_batch(new, args.batch, device)
        with FlopCounterMode(display=False) as counter:
            train_step(old, data)
        tokens = (data[0].shape[1] * 2 - 1) if getattr(new.config, "layout", "") == "paper" else data[0].shape[1]
        if cls == "MDPTransformer":
            tokens = cast(Any, new.config).state_token(data[0].shape[1] - 1) + 1
        pairs[name] = (old, new, data, counter.get_total_flops() / args.batch, tokens)
    paper = transformer.BanditTransformer(transformer.TransformerConfig()).to(device).eval()
    paper_old = ref_tf.BanditTransformer(ref_tf.TransformerConfig()).to(device).eval()
    paper_old.load_state_dict(paper.state_dict())
    g = torch.Generator().manual_seed(1)
    sets = (torch.rand(args.steps, args.instances, 10, 5, generator=g) * 2 - 1).to(device)

    result: dict[str, Any] = {"device": str(device), "batch": args.batch, "reference": args.reference, "runs": []}
    for n in args.threads:
        with threads(n):
            gflops = gemm_gflops(args.gemm, device)
            tasks: dict[tuple[str, str], Callable[[], None]] = {}
            for name, (old, new, data, _, _) in pairs.items():
                for label, model in (("old", old), ("new", new)):
                    tasks[name, label] = functools.partial(train_step, model, data, autocast=args.autocast)
            if args.rollout:
                tasks["rollout", "old"] = functools.partial(rollout, paper_old, sets, args.steps)
                tasks["rollout", "torch"] = functools.partial(rollout, paper, sets, args.steps, torch_path=True)
                tasks["rollout", "new"] = functools.partial(rollout, paper, sets, args.steps)
            times = interleaved(tasks, args.repeats, device)
            gflops_after = gemm_gflops(args.gemm, device)
        run: dict[str, Any] = {"threads": n, "gemm_gflops": [gflops, gflops_after], "train": {}, "rollout": {}}
        yardstick = (gflops + gflops_after) / 2
        print(
            f"\n{n} thread(s), {device}: fp32 {args.gemm}^3 matmul {gflops:.1f} / {gflops_after:.1f} GFLOP/s "
            f"(before / after); medians of {args.repeats}\n"
        )
        print(
            "| model | tokens | GFLOP/seq | old seq/s | new seq/s | new tokens/s | new GFLOP/s | of matmul | speed-up |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for name, (_, _, _, flops, tokens) in pairs.items():
            rate = {lab: args.batch / float(np.median(times[(name, lab)])) for lab in ("old", "new")}
            achieved = rate["new"] * flops / 1e9
            run["train"][name] = {
                "seq_per_s": rate,
                "tokens": tokens,
                "gflop_per_seq": flops / 1e9,
                "gflops": achieved,
                "fraction_of_matmul": achieved / yardstick,
            }
            print(
                f"| {name} | {tokens} | {flops / 1e9:.3f} | {rate['old']:.1f} | {rate['new']:.1f} | "
                f"{rate['new'] * tokens:,.0f} | {achieved:.1f} | {achieved / yardstick:.1%} | "
                f"{rate['new'] / rate['old']:.2f}x |"
            )
        if args.rollout:
            env_steps = args.instances * args.steps
            roll = {lab: env_steps / float(np.median(times["rollout", lab])) for lab in ("old", "torch", "new")}
            run["rollout"] = roll
            native = "compiled kernel" if native_kernels() is not None else "kernel unavailable: PyTorch path"
            print(
                f"\nrollout, paper model, {args.instances} instances x {args.steps} steps: old {roll['old']:,.0f}, "
                f"new {roll['new']:,.0f} env-steps/s ({native}), speed-up {roll['new'] / roll['old']:.2f}x; "
                f"new with the PyTorch path {roll['torch']:,.0f} ({roll['torch'] / roll['old']:.2f}x)"
            )
        result["runs"].append(run)
    print("\n" + json.dumps(result))
    return result


if __name__ == "__main__":
    main()
