"""The bandit experts: UCB, KL-UCB, Bayes-UCB, Gittins, LinUCB, Thompson sampling, Bayes-optimal references."""
