"""icrl-gym: in-context reinforcement learning environments, experts and pretrained transformers.

Importing the package registers its Gymnasium environments, so that
``gymnasium.make("ICRL-LinearBandit-v0")`` works.
"""

from icrl_gym.envs import ENV_IDS, register_envs

__version__ = "0.1.0"

register_envs()

__all__ = ["ENV_IDS", "register_envs", "__version__"]
