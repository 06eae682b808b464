"""Test-suite settings: one torch thread (the tiny test models are fastest that way, and it keeps the
suite from fighting other processes for the two CI cores)."""

import torch

torch.set_num_threads(1)
