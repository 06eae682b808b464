"""What the two grids (``generalization``, ``mdp_generalization``) share.

Cells and their rows' statistics (``cells.py``), the row store (``run.py``), thresholds, tables and heatmaps.
"""
