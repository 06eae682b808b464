"""The curve experiments of ``python -m benchmarks``: the paper's figures, the generalists, OOD shifts, MDPs."""
