"""One entry point for collecting labelled trajectories on any prior: bandit or tabular MDP.

The environment's spec picks its recorder (:class:`~icrl_gym.data.trajectories.BanditRecorder`,
:class:`~icrl_gym.data.mdp_rollout.MDPRecorder`); the loop, the labelling and the seeding are the
same for both (:mod:`icrl_gym.data.pipeline`, :mod:`icrl_gym.data.labels`, :mod:`icrl_gym.data.crn`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icrl_gym.data.labels import AgentSpec, Labelling
from icrl_gym.data.mdp_rollout import MDPRecorder, MDPRollouts
from icrl_gym.data.pipeline import CollectionOptions, run_collection
from icrl_gym.data.trajectories import BanditRecorder, TrajectoryData
from icrl_gym.envs.bandit_core import BanditSpec
from icrl_gym.envs.mdp_core import MDPSpec

if TYPE_CHECKING:  # Python 3.10 has it in typing_extensions only (torch depends on it); the annotation is a string
    from typing_extensions import Unpack


def collect(
    spec: BanditSpec | MDPSpec,
    context: AgentSpec,
    num_runs: int,
    labelling: Labelling | None = None,
    **options: Unpack[CollectionOptions],
) -> TrajectoryData | MDPRollouts:
    """Run Alg_0 ``context`` on ``num_runs`` instances of ``spec``, labelled by ``labelling`` (options: ``seed``, ...).

    Bandits give :class:`TrajectoryData`, MDPs :class:`MDPRollouts`; the options are
    :func:`~icrl_gym.data.pipeline.run_collection`'s (``seed`` 0; ``batch_size`` defaults to 10,000 runs
    for bandits and 1,000 for MDPs: the instances a seed draws depend on it).
    """
    labelling = labelling or Labelling()
    labelling.check_environment(mdp=isinstance(spec, MDPSpec))
    if isinstance(spec, MDPSpec):
        return run_collection(MDPRecorder(spec, num_runs), context, num_runs, labelling, **options)
    return run_collection(BanditRecorder(spec, num_runs), context, num_runs, labelling, **options)
