"""Training: supervised pretraining, online fine-tuning, the meta-RL baselines, DDP set-up."""
