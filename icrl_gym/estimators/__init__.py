"""Sufficient statistics and index tables that both the experts (agents/) and the trainers use, written once."""
