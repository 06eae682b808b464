"""``--retrain``: every learned model the experiments play, trained again from its shipped config."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.experiments.rows import GENERALISTS, LEARNED
from benchmarks.experiments.suite.cells import Experiment
from icrl_gym.checkpoint import PRETRAINED_DIR, save_checkpoint
from icrl_gym.utils.progress import log


def retrain_models(out: Path, experiments: list[Experiment], device: str, steps: int = 0) -> dict[str, str]:
    """Retrain every learned model the experiments use from its shipped config; returns name -> path.

    The config's fields tell the kind: ``algo`` an online meta-RL policy, ``base`` an online
    fine-tuning of another model, otherwise supervised pretraining.
    """
    # the training code is imported only when retraining: evaluating shipped models never loads it
    from icrl_gym.training.pretrain import PretrainConfig, export, pretrain

    config_dir = PRETRAINED_DIR / "configs"
    learned = {s["checkpoint"]: s["name"] for e in experiments for s in e.algorithms.values() if s["name"] in LEARNED}
    kept = sorted(name for name, agent in learned.items() if agent in GENERALISTS)
    if kept:  # hours each, resumable runs of their own trainers (README: Generalist agents)
        trainers = "icrl_gym.training.generalist, linear_generalist or mdp_generalist"
        log(f"--retrain keeps the shipped {', '.join(kept)}: retrain them with {trainers}")
    names = sorted(name for name in learned if name not in kept)
    paths = {}
    for name in names:
        data = json.loads((config_dir / f"{name}.json").read_text())
        command = f"icrl-bench --retrain ({name})"
        if "algo" in data:  # an online meta-RL policy: steps cap its environment steps
            from icrl_gym.training.meta_rl import MetaRLConfig, export_policy, train

            data["device"] = device
            if steps > 0:  # a quick pipeline check: `steps` rollouts of 8 runs
                rollout = 8 * data.get("n_steps", 200)
                data.update(num_envs=8, batch_size=min(data.get("batch_size", rollout), rollout))
                data["max_env_steps"] = steps * rollout
            algo, meta = train(MetaRLConfig.from_dict(data), command=command)
            paths[name] = str(export_policy(algo, meta, out / "models" / name))
            continue
        if "base" in data:  # online fine-tuning of another model (retrained first when it is listed)
            from icrl_gym.training.finetune import FinetuneConfig, finetune

            data.update(out_dir=str(out / "training" / name), device=device, base=paths.get(data["base"], data["base"]))
            if steps > 0:  # a quick pipeline check
                data.update(iterations=steps, eval_every=steps, runs_per_iteration=32, val_runs=64)
            model, meta = finetune(FinetuneConfig.from_dict(data), command=command)
            paths[name] = str(save_checkpoint(out / "models" / name, model, meta))
            continue
        data.update(out_dir=str(out / "training" / name), device=device)
        if steps > 0:
            data.update(steps=steps, warmup_steps=min(data["warmup_steps"], steps), eval_every=steps)
        model, meta = pretrain(PretrainConfig.from_dict(data), command=command)
        paths[name] = str(export(model, meta, out / "models" / name))
    return paths
