"""Plumbing shared by every layer: atomic file writes, the command-line parser, progress bars, the torch device."""
