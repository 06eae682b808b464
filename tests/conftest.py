"""Test-suite settings: one torch thread (the tiny test models are fastest that way, and it keeps the
suite from fighting other processes for the two CI cores).  ``python -m pytest -n auto`` (pytest-xdist)
runs one test process per core, each with this one thread, so the cores are used without oversubscribing."""

import torch

torch.set_num_threads(1)
