"""Environments of icrl-gym and their Gymnasium registrations (all in one place)."""

from gymnasium.envs.registration import register, registry

from icrl_gym.envs.bandit_core import ActionSet, BanditArms, BanditBatch, BanditPrior, BanditReward, BanditSpec
from icrl_gym.envs.bandit_env import BanditEnv, BanditVectorEnv
from icrl_gym.envs.bernoulli_bandit import BernoulliBanditEnv, BernoulliBanditVectorEnv, bernoulli_bandit_spec
from icrl_gym.envs.dark_room import dark_room_spec
from icrl_gym.envs.linear_bandit import LinearBanditEnv, LinearBanditVectorEnv, linear_bandit_spec
from icrl_gym.envs.mdp_core import MDPBatch, MDPKind, MDPSpec
from icrl_gym.envs.mdp_instances import backward_induction

ENV_IDS = ("ICRL-LinearBandit-v0", "ICRL-BernoulliBandit-v0", "ICRL-TabularMDP-v0", "ICRL-DarkRoom-v0")

_ENTRY_POINTS = {
    "ICRL-LinearBandit-v0": ("icrl_gym.envs.linear_bandit:LinearBanditEnv", "LinearBanditVectorEnv"),
    "ICRL-BernoulliBandit-v0": ("icrl_gym.envs.bernoulli_bandit:BernoulliBanditEnv", "BernoulliBanditVectorEnv"),
    "ICRL-TabularMDP-v0": ("icrl_gym.envs.tabular_mdp:RandomMDPEnv", "RandomMDPVectorEnv"),
    "ICRL-DarkRoom-v0": ("icrl_gym.envs.dark_room:DarkRoomEnv", "DarkRoomVectorEnv"),
}


def register_envs() -> None:
    """Register every icrl-gym environment with Gymnasium (idempotent)."""
    for env_id, (entry, vector_cls) in _ENTRY_POINTS.items():
        if env_id in registry:
            continue
        module = entry.split(":")[0]
        register(id=env_id, entry_point=entry, vector_entry_point=f"{module}:{vector_cls}")


__all__ = [
    "ENV_IDS",
    "ActionSet",
    "BanditArms",
    "BanditPrior",
    "BanditReward",
    "MDPKind",
    "BanditBatch",
    "BanditEnv",
    "BanditSpec",
    "BanditVectorEnv",
    "BernoulliBanditEnv",
    "BernoulliBanditVectorEnv",
    "LinearBanditEnv",
    "LinearBanditVectorEnv",
    "MDPBatch",
    "MDPSpec",
    "backward_induction",
    "dark_room_spec",
    "bernoulli_bandit_spec",
    "linear_bandit_spec",
    "register_envs",
]
