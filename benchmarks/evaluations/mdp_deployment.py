"""``python -m benchmarks.evaluations.mdp_deployment``: the MDP generalist's deployments, at the path the docs quote.

The experiment is the folder ``benchmarks/experiments/mdp_deployment/``; its flags and help: ``cli.py`` there.
"""

from benchmarks.experiments.mdp_deployment.cli import main

if __name__ == "__main__":
    main()
