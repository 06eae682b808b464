"""What the deployments' command checks before the first cell is played: every cell an MDP size within memory."""

from __future__ import annotations

from icrl_gym.envs import MDPSpec
from icrl_gym.envs.validation import check_memory


def check_cells(cells: tuple[tuple[int, int, int, int], ...], runs: int) -> None:
    """Refuse a cell that is no MDP size, or whose ``runs`` instances exceed the memory limit (``ValueError``).

    The same checks the rollout of the cell would make, made for every cell before the first is
    played, so that a bad last cell does not cost the time of the others.
    """
    for S, A, H, K in cells:
        try:
            spec = MDPSpec(num_states=S, num_actions=A, horizon=H, episodes=K)
        except ValueError as err:
            raise ValueError(f"--cells {S},{A},{H},{K} is no MDP size: {err}") from None
        check_memory(spec.memory_bytes(runs), f"--runs {runs:,} in the cell --cells {S},{A},{H},{K}")
