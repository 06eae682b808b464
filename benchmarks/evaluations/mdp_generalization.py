"""``python -m benchmarks.evaluations.mdp_generalization``: the MDP grid, at the path the docs quote.

The experiment is the folder ``benchmarks/experiments/mdp_generalization/``; its flags and help: ``cli.py`` there.
"""

if __name__ == "__main__":  # imported here only: a spawned worker imports this module again and needs none of it
    from benchmarks.experiments.mdp_generalization.cli import main

    main()
