"""Supervised pretraining of the in-context transformer (Section 3, Eq. (3)).

    theta_hat = argmax_theta  sum_i sum_t log Alg_theta(a-bar_t^i | D_{t-1}^i, s_t^i)

Every step of every trajectory is a training target.  Options beyond the paper, all recorded
in the checkpoint:

- ``target="probs"``: cross-entropy against the expert's full action distribution instead of
  one sampled label (where it is known: soft LinUCB, Thompson sampling by Monte-Carlo); for MDP
  DPT, against the posterior P(a* = a | D_{t-1}) at (s_t, h_t) of the Bayesian ``posterior`` (PSRL's
  posterior by Monte-Carlo, DarkRoom's exactly), the Rao-Blackwellised optimal-action label (records
  from before the ``posterior`` field named it ``expert``: :func:`icrl_gym.data.labels.upgrade_label_fields`);
- ``value_loss_weight > 0``: an auxiliary mean-squared error between the model's value head and
  the expert's per-arm index (LinUCB's v_{t,k}, UCB's index), a richer signal than the argmax;
- ``trajectories_per_chunk``: the data are collected in chunks with their own seeds and a fresh
  chunk replaces the old one every ``passes_per_chunk`` passes (collection is cheap once batched).

Training is resumable (also with a larger ``steps``, to extend a finished run; the cosine
schedule then stretches to the new length): every ``eval_every`` steps ``out_dir`` receives the
training state (weights, optimiser, RNG states, step, configuration, history) as one verified unit
(:mod:`icrl_gym.training.state`: ``checkpoints/`` and the manifest ``resume.json``), and then a copy
of the weights as the checkpoint ``checkpoint.safetensors`` + ``checkpoint.json``; batches are drawn
from ``np.random.default_rng([seed, step])`` and chunk c from seed ``data_seed(c)``, so a resumed run
continues exactly where it stopped, bit for bit.  The folder may be moved between runs (``out_dir``
is not compared on resume).  Progress goes to ``out_dir/train.log``.  The device comes from the
``device`` argument (``"auto"``: CUDA when present), never from a global.

Under ``torchrun --nproc_per_node=N`` the same script and config train with
DistributedDataParallel: each rank takes 1/N of every global batch and only rank 0 validates
and writes (see :mod:`icrl_gym.training.distributed`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F

from icrl_gym.checkpoint import save_checkpoint
from icrl_gym.config import NONNEGATIVE, POSITIVE, POSITIVE_INT, Allowed, checked
from icrl_gym.data.collect import collect as collect_runs
from icrl_gym.data.labels import Labelling, LabelMode, Target
from icrl_gym.data.mdp_rollout import MDPRollouts
from icrl_gym.data.trajectories import TrajectoryData
from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.envs.mdp_core import MDPSpec
from icrl_gym.models.mdp_transformer import MDPTransformer, MDPTransformerConfig
from icrl_gym.models.transformer import BanditTransformer, TransformerConfig
from icrl_gym.registry import agent_names
from icrl_gym.training.loop import (
    ScheduleConfig,
    learning_rate,
    main_with_export,
    upgrade_config,
)
from icrl_gym.training.state import TrainingState
from icrl_gym.training.trainer import Trainer, TrainingTask

VALIDATION_SEED_OFFSET = 900_000
"""Validation data use seed ``10**6 * seed + VALIDATION_SEED_OFFSET``; chunks use smaller offsets."""


@dataclass
class PretrainConfig(ScheduleConfig):
    """Everything that defines a pretraining run (saved with every checkpoint).

    The shared fields (``out_dir``, ``seed``, ``lr``, ``grad_clip``, ``device``, ``threads``,
    ``steps``, ``warmup_steps``, ``min_lr_ratio``, ``weight_decay``) are
    :class:`~icrl_gym.training.loop.ScheduleConfig`'s.
    """

    name: str = "linear-bandit-ad-linucb"
    """Name of the model (the file name of the exported checkpoint)."""
    env: dict[str, Any] = field(default_factory=lambda: BanditSpec().to_dict())
    """The environment prior (a :class:`BanditSpec` as a dict)."""
    context: dict[str, Any] = field(default_factory=lambda: {"name": "linucb"})
    """Context algorithm Alg_0 that generates the trajectories (a ``make_agent`` specification)."""
    label: str = checked("ad", Allowed(choices=tuple(m.value for m in LabelMode if m is not LabelMode.NONE)))
    """Label mode: "ad", "dpt", "approx_dpt" or "expert" (a :class:`icrl_gym.data.labels.LabelMode`)."""
    expert: dict[str, Any] | None = None
    """Expert algorithm Alg_E of label mode "expert": its action on Alg_0's history is the label."""
    posterior: dict[str, Any] | None = None
    """Bayesian posterior (e.g. PSRL) of the Rao-Blackwellised DPT target P(a* = a | D): label "dpt", target "probs"."""
    target: str = checked("label", Allowed(choices=Target.values()))
    """"label": MLE on the label (Eq. (3)); "probs": the soft label (a :class:`icrl_gym.data.labels.Target`)."""
    value_loss_weight: float = checked(0.0, NONNEGATIVE)
    """Weight of the auxiliary regression of the expert's per-arm index values (0: off)."""
    model: dict[str, Any] = field(default_factory=lambda: TransformerConfig().to_dict())
    """The :class:`TransformerConfig` as a dict."""
    trajectories_per_chunk: int = checked(20_000, POSITIVE_INT)
    """Trajectories collected at once; a fresh chunk replaces the old one after passes_per_chunk passes."""
    passes_per_chunk: float = checked(1.0, POSITIVE)
    """Passes over a chunk before the next one is collected."""
    batch_size: int = checked(64, POSITIVE_INT)
    """Trajectories per optimizer step."""
    val_trajectories: int = checked(1000, POSITIVE_INT)
    """Held-out trajectories for the validation loss."""
    eval_every: int = checked(250, POSITIVE_INT)
    """Steps between validation losses (and checkpoints)."""
    out_dir: str = "runs/linear-bandit-ad-linucb"

    def __post_init__(self) -> None:
        labels = upgrade_config(
            {"label": self.label, "env": self.env, "expert": self.expert, "posterior": self.posterior}
        )
        self.expert, self.posterior = labels["expert"], labels["posterior"]
        super().__post_init__()

    def check(self) -> None:
        """A batch fits a chunk, the agents are registered, the environment and the labelling check themselves."""
        if self.trajectories_per_chunk < self.batch_size:
            raise ValueError(
                f"PretrainConfig.trajectories_per_chunk={self.trajectories_per_chunk} must be >= "
                f"batch_size={self.batch_size} (a batch is drawn from one chunk)"
            )
        for key in ("context", "expert", "posterior"):
            agent = getattr(self, key)
            if agent is not None and agent.get("name") not in agent_names():
                names = ", ".join(agent_names())
                raise ValueError(f"PretrainConfig.{key} must name a registered agent, got {agent!r}; names: {names}")
        _ = self.spec  # the environment prior checks itself (the model's sizes come from it at training)
        self.labelling.check_environment(mdp=self.is_mdp)  # label, target, expert and posterior checked together

    @property
    def labelling(self) -> Labelling:
        """How the pretraining data are labelled: the label mode, its algorithms, and what the target needs stored."""
        return Labelling(
            LabelMode.parse(self.label),
            expert=self.expert,
            posterior=self.posterior,
            store_probs=Target.parse(self.target) is Target.PROBS,
            store_values=self.value_loss_weight > 0,
        )

    @property
    def is_mdp(self) -> bool:
        """Whether the environment is a tabular MDP (its spec has a ``kind``) rather than a bandit."""
        return "kind" in self.env

    @property
    def spec(self) -> BanditSpec | MDPSpec:
        """The environment prior."""
        return MDPSpec.from_dict(self.env) if self.is_mdp else BanditSpec.from_dict(self.env)

    @property
    def model_config(self) -> TransformerConfig | MDPTransformerConfig:
        """The model configuration, with the sizes (d, A, T or S, A, H, K) taken from the environment."""
        spec = self.spec
        if isinstance(spec, MDPSpec):  # the same test as is_mdp (spec is built from it)
            sizes = {k: getattr(spec, k) for k in ("num_states", "num_actions", "horizon", "episodes")}
            return MDPTransformerConfig.from_dict({**self.model, **sizes})
        # the model's horizon is its capacity: at least the training T, more for longer deployment
        horizon = max(spec.horizon, int(self.model.get("horizon", 0)))
        return TransformerConfig.from_dict(
            {**self.model, "dim": spec.dim, "num_actions": spec.num_actions, "horizon": horizon}
        )

    def data_seed(self, chunk: int) -> int:
        """Seed of training chunk ``chunk`` (validation uses VALIDATION_SEED_OFFSET)."""
        return 10**6 * self.seed + chunk

    @property
    def steps_per_chunk(self) -> int:
        """Optimizer steps taken on one chunk."""
        return max(1, int(self.passes_per_chunk * self.trajectories_per_chunk / self.batch_size))


def build_model(config: TransformerConfig | MDPTransformerConfig) -> BanditTransformer | MDPTransformer:
    """The model class that goes with a configuration."""
    return MDPTransformer(config) if isinstance(config, MDPTransformerConfig) else BanditTransformer(config)


def pretraining_optimizer(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with betas (0.9, 0.98), decaying the weight matrices only (not embeddings, biases or norms)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98))


def collect(cfg: PretrainConfig, num: int, seed: int) -> TrajectoryData | MDPRollouts:
    """Collect ``num`` labelled trajectories for ``cfg`` with ``seed``."""
    return collect_runs(cfg.spec, cfg.context, num, cfg.labelling, seed=seed)


def to_tensors(data: TrajectoryData | MDPRollouts, index: np.ndarray, device: torch.device) -> dict[str, torch.Tensor]:
    """The model inputs and targets of the trajectories ``index`` as tensors on ``device``."""
    if isinstance(data, MDPRollouts):
        out = {"states": torch.from_numpy(data.states[index].astype(np.int64))}
    else:
        out = {"action_sets": torch.from_numpy(np.ascontiguousarray(data.step_action_sets(index), dtype=np.float32))}
    out["actions"] = torch.from_numpy(data.actions[index].astype(np.int64))
    out["rewards"] = torch.from_numpy(data.rewards[index].astype(np.float32))
    if data.labels is not None:
        out["labels"] = torch.from_numpy(data.labels[index].astype(np.int64))
    if data.label_probs is not None:
        out["probs"] = torch.from_numpy(data.label_probs[index].astype(np.float32))
    if not isinstance(data, MDPRollouts) and data.label_values is not None:
        out["values"] = torch.from_numpy(data.label_values[index].astype(np.float32))
    return {k: v.to(device) for k, v in out.items()}


def pretraining_loss(
    model: BanditTransformer | MDPTransformer | torch.nn.Module,
    batch: dict[str, torch.Tensor],
    target: str,
    value_weight: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean negative log-likelihood over all B*T steps (+ the auxiliary value loss)."""
    mdp = isinstance(getattr(model, "module", model), MDPTransformer)  # a DDP wrapper holds the model as .module
    logits, values = model(batch["states" if mdp else "action_sets"], batch["actions"], batch["rewards"])
    logp = F.log_softmax(logits, dim=-1)  # (B, T, A)
    nll = -logp.gather(-1, batch["labels"][..., None]).mean()
    loss = -(batch["probs"] * logp).sum(-1).mean() if target == "probs" else nll
    stats = {"nll": float(nll.detach()), "accuracy": float((logits.argmax(-1) == batch["labels"]).float().mean())}
    if value_weight > 0:
        if values is None:
            raise ValueError("an auxiliary value loss needs a model with a value head (the bandit transformer)")
        value_loss = F.mse_loss(values, batch["values"])
        loss = loss + value_weight * value_loss
        stats["value_mse"] = float(value_loss.detach())
    stats["loss"] = float(loss.detach())
    return loss, stats


@torch.no_grad()
def evaluate_loss(
    model: BanditTransformer | MDPTransformer,
    data: TrajectoryData | MDPRollouts,
    cfg: PretrainConfig,
    device: torch.device,
) -> dict:
    """Validation NLL, accuracy and loss over a whole dataset (in batches)."""
    model.eval()
    totals: dict[str, float] = {}
    n = data.num_trajectories
    for start in range(0, n, 256):
        index = np.arange(start, min(start + 256, n))
        _, stats = pretraining_loss(model, to_tensors(data, index, device), cfg.target, cfg.value_loss_weight)
        for k, v in stats.items():
            totals[k] = totals.get(k, 0.0) + v * index.size / n
    model.train()
    return totals


def _metadata(cfg: PretrainConfig, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": cfg.name,
        "env": cfg.spec.to_dict(),
        "model": cfg.model_config.to_dict(),
        "pretrain": cfg.to_dict(),
        "training": state,
    }


class PretrainTask(TrainingTask):
    """Pretraining as a :class:`~icrl_gym.training.trainer.TrainingTask`.

    A step's batch: labelled trajectories of the current chunk; its loss: the imitation loss; every
    ``eval_every`` steps the validation loss (each a commit).
    """

    label = "pretrain"
    resumable = ("steps",)

    def __init__(self, cfg: PretrainConfig, command: str | None, callback: Callable | None) -> None:
        self.cfg: PretrainConfig = cfg
        self.command, self.callback = command, callback
        # the bandit model's value head gets no gradient without the value loss
        self.ddp_unused = not cfg.is_mdp and cfg.value_loss_weight == 0
        self.chunks: dict[int, TrajectoryData | MDPRollouts] = {}  # the current chunk, collected when first used

    @property
    def publish(self) -> dict[str, str] | None:  # type: ignore[override]
        """The weights are copied to ``out_dir/checkpoint`` at every commit but step 0's."""
        return {"": "checkpoint"} if self.record["step"] > 0 else None

    def build(self) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """The model under ``torch.manual_seed(seed)``; AdamW without decay on biases, norms and embeddings."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        model = build_model(cfg.model_config).to(self.device)
        return model, pretraining_optimizer(model, cfg.lr, cfg.weight_decay)

    def new_record(self) -> dict[str, Any]:
        """Steps, history, wall time, trajectories seen, the commands and the process."""
        return {
            "step": 0,
            "history": [],
            "wall_seconds": 0.0,
            "trajectories_seen": 0,
            "command": self.command,
            "command_history": [self.command],
            "device": str(self.device),
            "threads": torch.get_num_threads(),
            "world_size": self.ctx.world_size,
        }

    def resumed(self, loaded: TrainingState, changes: list[str]) -> dict[str, Any]:
        """The saved record, with this command and world size (a run may change its ``steps``)."""
        planned = upgrade_config(loaded.config)["steps"]
        if planned != self.cfg.steps:  # extending (or shortening) a run is allowed
            self.log(f"run planned for {planned} steps continues to {self.cfg.steps}")
        state = loaded.record
        state["step"] = loaded.step
        state["command_history"] = [*state.get("command_history", [state.get("command")]), self.command]
        state["command"] = self.command
        state["world_size"] = self.ctx.world_size
        self.log(f"resumed from step {state['step']} ({loaded.source})")
        return state

    def ddp_line(self) -> str:
        """Each process takes its share of the trajectories."""
        size = self.ctx.world_size
        return f"{size} processes, {self.cfg.batch_size // size} trajectories each per step"

    def setup(self) -> None:
        """The validation trajectories (rank 0) and the clock."""
        cfg = self.cfg
        model = cast(BanditTransformer | MDPTransformer, self.model)
        self.log(f"model: {model.num_parameters():,} parameters, {cfg.model_config}")
        seed = 10**6 * cfg.seed + VALIDATION_SEED_OFFSET
        self.val = collect(cfg, cfg.val_trajectories, seed) if self.ctx.is_main else None
        self.start_time = time.perf_counter() - self.record["wall_seconds"]

    def keep_going(self, step: int) -> bool:
        """``steps`` steps."""
        return step < self.cfg.steps

    def learning_rate(self, step: int) -> float:
        """Warm-up then cosine (:func:`~icrl_gym.training.loop.learning_rate`)."""
        return learning_rate(self.cfg, step)

    def sample(self, step: int) -> dict[str, torch.Tensor]:
        """The rows of the step's batch for this rank: ``batch_size`` trajectories of the step's chunk."""
        cfg, chunks = self.cfg, self.chunks
        needed = step // cfg.steps_per_chunk
        if needed not in chunks:
            chunks.clear()
            t0 = time.perf_counter()
            chunks[needed] = collect(cfg, cfg.trajectories_per_chunk, cfg.data_seed(needed))
            self.log(f"chunk {needed}: {cfg.trajectories_per_chunk:,} trajectories in {time.perf_counter() - t0:.1f}s")
        chunk = chunks[needed]
        index = np.random.default_rng([cfg.seed, step]).integers(0, chunk.num_trajectories, size=cfg.batch_size)
        return to_tensors(chunk, self.ctx.shard(index), self.device)

    def loss(self, batch: dict[str, torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, float]]:
        """:func:`pretraining_loss` (DDP averages the equal shares' gradients)."""
        return pretraining_loss(self.net, batch, self.cfg.target, self.cfg.value_loss_weight)

    def after_step(self, step: int, metrics: dict[str, float], seconds: float) -> None:
        """Count the trajectories; a log line every 50 steps."""
        self.record["step"] = step
        self.record["trajectories_seen"] += self.cfg.batch_size
        if step % 50 == 0:
            self.log(f"step {step}/{self.cfg.steps} train " + " ".join(f"{k}={v:.4f}" for k, v in metrics.items()))

    def evaluate_now(self, step: int) -> bool:
        """Every ``eval_every`` steps and at the end."""
        return self.val is not None and (step % self.cfg.eval_every == 0 or step == self.cfg.steps)

    def evaluate(self, step: int, metrics: dict[str, float]) -> dict[str, Any]:
        """The validation loss; the record's history, ``val`` and ``distinct_trajectories``."""
        assert self.val is not None
        state, cfg = self.record, self.cfg
        val_stats = evaluate_loss(cast(BanditTransformer | MDPTransformer, self.model), self.val, cfg, self.device)
        state["wall_seconds"] = time.perf_counter() - self.start_time
        entry = {"step": step, "wall_seconds": state["wall_seconds"], **val_stats}
        state["history"].append(entry)
        state["val"] = val_stats
        chunk_index = next(iter(self.chunks))
        state["distinct_trajectories"] = min(state["trajectories_seen"], (chunk_index + 1) * cfg.trajectories_per_chunk)
        return entry

    def curve_point(self, step: int, metrics: dict[str, float], entry: dict[str, Any]) -> tuple[float, float, float]:
        """The step's loss, the validation loss, the learning rate."""
        return metrics["loss"], entry["loss"], self.optimizer.param_groups[0]["lr"]

    def evaluated(self, step: int, entry: dict[str, Any]) -> None:
        """The log line, then the callback (which may read the committed checkpoint)."""
        val = {k: v for k, v in entry.items() if k not in ("step", "wall_seconds")}
        self.log(
            f"step {step} val "
            + " ".join(f"{k}={v:.4f}" for k, v in val.items())
            + f" ({self.record['wall_seconds'] / 60:.1f} min)"
        )
        if self.callback is not None:
            self.callback(self.model, self.record)

    def meta(self) -> dict[str, Any]:
        """Name, env, model, pretrain (the configuration) and training (the record)."""
        return _metadata(self.cfg, self.record)

    def finish(self) -> tuple[BanditTransformer | MDPTransformer, dict[str, Any]]:
        """The model and its metadata."""
        return cast(BanditTransformer | MDPTransformer, self.model), _metadata(self.cfg, self.record)


def pretrain(
    cfg: PretrainConfig, command: str | None = None, echo: bool = True, callback: Callable | None = None
) -> tuple[BanditTransformer | MDPTransformer, dict[str, Any]]:
    """Train (or resume) the model of ``cfg``; returns the model and its metadata."""
    return Trainer(cfg, PretrainTask(cfg, command, callback), echo).run()


def export(model: BanditTransformer | MDPTransformer, meta: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write the final model as ``<path>.safetensors`` + ``<path>.json`` (a shippable checkpoint)."""
    return save_checkpoint(Path(path), model, meta)


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m icrl_gym.training.pretrain [CONFIG.json] [--set key=value ...] [--export PATH]``."""
    main_with_export(argv, __doc__, PretrainConfig, pretrain, export)


if __name__ == "__main__":
    main()
