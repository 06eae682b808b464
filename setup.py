"""Package definition for icrl-gym (tool configuration lives in pyproject.toml)."""

from setuptools import find_packages, setup

setup(
    name="icrl-gym",
    version="0.1.0",
    description=(
        "In-context reinforcement learning toolkit: Gymnasium bandit and MDP environments, "
        "expert algorithms and supervised-pretrained transformers (Lin, Bai, Mei, ICLR 2024)."
    ),
    python_requires=">=3.10",
    packages=find_packages(include=["icrl_gym", "icrl_gym.*", "agents", "agents.*", "benchmarks", "benchmarks.*"]),
    package_data={
        "icrl_gym": [
            "pretrained/*.json",
            "pretrained/*.safetensors",
            "pretrained/configs/*.json",
            "pretrained/cards/*.md",
            "pretrained/cards/*.json",
            "models/*.c",
            "estimators/data/*.npz",
        ]
    },
    install_requires=[
        "gymnasium>=1.0,<2",
        "numpy>=1.24",
        "scipy>=1.10",
        "torch>=2.1",
        "stable-baselines3>=2.3",
        "sb3-contrib>=2.3",
        "safetensors>=0.4",
        "matplotlib>=3.7",
        "tqdm>=4.60",
    ],
    extras_require={
        "test": ["pytest>=7", "pytest-xdist>=3", "ruff>=0.4", "mypy>=1.10", "hypothesis>=6.80"],
        "tensorboard": ["tensorboard>=2.10"],
        # the benchmark harness's Ray executor (python -m benchmarks --ray ADDRESS)
        "ray": ["ray>=2.9"],
    },
    entry_points={
        "console_scripts": ["icrl-bench=benchmarks.harness.cli:main"],
        # the algorithms of agents/ register themselves when the package is imported (agents/__init__.py);
        # the registry loads this group on its first lookup, so core code finds them by name
        "icrl_gym.agents": ["agents = agents"],
    },
)
