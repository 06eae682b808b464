"""Offline trajectories: collection with a context algorithm, expert labels, storage."""
