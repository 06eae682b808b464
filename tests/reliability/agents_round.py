"""Probes of the agents and the training set-up: repeated ``act``, impossible Bayes priors, fine-tuning
beyond the playable range, a stray ``WORLD_SIZE``.

Each probe tries one case a new user or an adversary would, and asserts a clear error naming the
problem or a case handled correctly.
"""

from __future__ import annotations
