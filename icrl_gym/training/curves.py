"""Training curves: a plain CSV of the metrics beside every checkpoint, TensorBoard when installed.

Each training loop (pretraining, fine-tuning, meta-RL) calls :meth:`TrainingCurves.record` at
its evaluations with the step, the training loss, the validation metric, the learning rate and
the wall time.  ``metrics.csv`` is always written (appended to on resume, a header once; rows
past the step a run resumes from are dropped first, so a run killed between writing a row and
saving its state does not repeat that row);
TensorBoard event files go to ``tensorboard/`` only when the optional ``tensorboard`` package is
installed (``pip install -e .[tensorboard]``), which ``torch.utils.tensorboard`` needs.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from icrl_gym.utils.fileio import atomic_write_bytes

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

    def __init__(self, folder: str | os.PathLike, tensorboard: bool = True, start_step: int | None = None) -> None:
        """Open the curves of ``folder`` for a run that starts (or resumes) at ``start_step``.

        Rows with a step after ``start_step`` were written after the last state the run resumes
        from and will be written again: they are dropped (the file is rewritten atomically), as is
        an unreadable last line left by a kill during an append.  ``None`` keeps every row.
        """
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.folder / "metrics.csv"
        if start_step is not None:
            self._drop_rows_after(start_step)
        self.writer: Any = None
        if tensorboard and tensorboard_available():
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.folder / "tensorboard"))

    def _drop_rows_after(self, start_step: int) -> None:
        """Rewrite ``metrics.csv`` without the rows after ``start_step`` and without unreadable rows."""
        if not self.csv_path.exists():
            return
        lines = self.csv_path.read_text().splitlines()
        kept = [lines[0]] if lines and lines[0] == ",".join(COLUMNS) else [",".join(COLUMNS)]
        for line in lines[1:]:
            fields = line.split(",")
            try:
                values = [float(v) for v in fields]
            except ValueError:
                continue
            if len(values) == len(COLUMNS) and values[0] <= start_step:
                kept.append(line)
        if kept != lines:
            # csv.writer ends its rows with \r\n
            atomic_write_bytes(self.csv_path, "".join(line + "\r\n" for line in kept).encode())

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
