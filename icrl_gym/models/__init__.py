"""Sequence models: the GPT-style bandit and MDP transformers and the explicit-weight constructions."""
