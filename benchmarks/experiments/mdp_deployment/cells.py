"""The deployments' settings: the agent keywords of each deployment, the cells the schedule was chosen on, the seed."""

from __future__ import annotations

from typing import Any

DEPLOYMENTS: dict[str, dict[str, Any]] = {
    "argmax": {"greedy": True},
    "T 0.2": {"wide_temperature": 0.2, "wide_visits": 0.0},
    "T 0.3": {"wide_temperature": 0.3, "wide_visits": 0.0},
    "T 0.5": {"wide_temperature": 0.5, "wide_visits": 0.0},
    "T 0.7": {"wide_temperature": 0.7, "wide_visits": 0.0},
    "T 1": {"greedy": False},
    "0.3 then argmax": {"wide_temperature": 0.3},
    "schedule (default)": {},
}
"""The agent's keywords of each deployment (``wide_visits`` 0: the whole run draws at ``wide_temperature``;
"0.3 then argmax" is the default without its long-run phase)."""


CELLS = (
    "3,2,5,50 3,2,10,50 3,2,20,50 5,2,20,50 5,3,10,20 10,2,10,20 20,2,5,5 10,4,5,5 20,4,5,5 "
    "5,4,10,50 20,2,20,50 3,4,20,20 10,2,5,50"
).split()
"""S,A,H,K of the cells the default schedule was chosen on (the command line's form)."""


SEED = 50_000_000


OUTPUTS = ("deployment.csv", "config.json")
"""The files a run writes to ``--out`` (a second run into the same folder needs ``--overwrite``)."""
