"""The tabular-MDP experts: UCB-VI, soft UCB-VI, PSRL, the Bayes-optimal DPT policy, optimal and uniform."""
