"""``python -m benchmarks.evaluations.bernoulli_frontier``: the exact Bernoulli frontier, at the path the docs quote.

The experiment is the folder ``benchmarks/experiments/bernoulli_frontier/``; its flags and help: ``cli.py`` there.
"""

if __name__ == "__main__":  # imported here only: a spawned worker imports this module again and needs none of it
    from benchmarks.experiments.bernoulli_frontier.cli import main

    main()
