"""``python -m benchmarks.evaluations.bernoulli_frontier``: the exact Bernoulli frontier, at the path the docs quote.

The experiment is the folder ``benchmarks/experiments/bernoulli_frontier/``; its flags and help: ``cli.py`` there.
"""

from benchmarks.experiments.bernoulli_frontier.cli import main

if __name__ == "__main__":
    main()
