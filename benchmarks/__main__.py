"""``python -m benchmarks``: the project's main job (the regret benchmark)."""

from __future__ import annotations

from benchmarks.expert_regret import main as expert_main


def main(argv: list[str] | None = None) -> None:
    """Run the default benchmark suite."""
    expert_main(argv)


if __name__ == "__main__":
    main()
