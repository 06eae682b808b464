"""``python -m benchmarks.evaluations.mdp_deployment``: the MDP generalist's deployments, at the path the docs quote.

The experiment is the folder ``benchmarks/experiments/mdp_deployment/``; its flags and help: ``cli.py`` there.
"""

if __name__ == "__main__":  # imported here only: a spawned worker imports this module again and needs none of it
    from benchmarks.experiments.mdp_deployment.cli import main

    main()
