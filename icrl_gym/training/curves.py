"""Training curves: a plain CSV of the metrics beside every checkpoint, TensorBoard when installed.

Each training loop (pretraining, fine-tuning, meta-RL) calls :meth:`TrainingCurves.record` at
its evaluations with the step, the training loss, the validation metric, the learning rate and
the wall time.  ``metrics.csv`` is always written (appended to on resume, a header once);
TensorBoard event files go to ``tensorboard/`` only when the optional ``tensorboard`` package is
installed (``pip install -e .[tensorboard]``), which ``torch.utils.tensorboard`` needs.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

COLUMNS = ("step", "loss", "val", "lr", "wall_seconds")


def tensorboard_available() -> bool:
    """Whether ``torch.utils.tensorboard`` can write event files (the ``tensorboard`` package is installed)."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401  (probe only)
    except ImportError:
        return False
    return True


class TrainingCurves:
    """Appends one row per evaluation to ``<folder>/metrics.csv`` and, if available, TensorBoard scalars."""

    def __init__(self, folder: str | os.PathLike, tensorboard: bool = True) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.folder / "metrics.csv"
        self.writer: Any = None
        if tensorboard and tensorboard_available():
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.folder / "tensorboard"))

    def record(self, step: int, loss: float, val: float, lr: float, wall_seconds: float) -> None:
        """Write one row (and the TensorBoard scalars ``loss``, ``val``, ``lr`` at ``step``)."""
        new = not self.csv_path.exists()
        with open(self.csv_path, "a", newline="") as fh:
            writer = csv.writer(fh)
            if new:
                writer.writerow(COLUMNS)
            writer.writerow([step, f"{loss:.6g}", f"{val:.6g}", f"{lr:.6g}", f"{wall_seconds:.3f}"])
        if self.writer is not None:
            for name, value in (("loss", loss), ("val", val), ("lr", lr)):
                self.writer.add_scalar(name, value, step, walltime=None)
            self.writer.flush()

    def close(self) -> None:
        """Close the TensorBoard writer (the CSV is closed after every row)."""
        if self.writer is not None:
            self.writer.close()


def read_curves(path: str | os.PathLike) -> list[dict[str, float]]:
    """The rows of a ``metrics.csv`` as numbers."""
    with open(path) as fh:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(fh)]
