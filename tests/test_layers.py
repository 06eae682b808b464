"""The dependencies point one way: icrl_gym (contracts) <- agents (algorithms) <- benchmarks."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import icrl_gym
from icrl_gym.algorithm import BanditAgent, MDPAgent
from icrl_gym.kinds import KINDS
from icrl_gym.registry import agent_class, agent_names, entry_points, make_agent, register_agent
from icrl_gym.utils.device import resolve_device

PACKAGE = Path(icrl_gym.__file__).resolve().parent
IMPORTS_AGENTS = re.compile(r"^\s*(import agents\b|from agents[. ])", re.MULTILINE)


def test_icrl_gym_never_imports_agents():
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if IMPORTS_AGENTS.search(path.read_text())
    ]
    assert offenders == []


def test_the_scan_would_see_an_import():
    assert IMPORTS_AGENTS.search("x = 1\n    from agents import make_agent\n")
    assert IMPORTS_AGENTS.search("import agents.bandit.linucb\n")
    assert not IMPORTS_AGENTS.search('ENTRY = "agents.bandit.linucb:LinUCB"\n')


_PROBE = """
import json, sys
{baseline}
def loaded(prefix):
    return sorted(k for k in sys.modules if k == prefix or k.startswith(prefix + "."))
before = loaded("torch.distributed")
import {module}
new = sorted(set(loaded("torch.distributed")) - set(before))
print(json.dumps({{"training": loaded("icrl_gym.training"), "new_distributed": new}}))
"""


@pytest.mark.parametrize(
    "module, baseline",
    [
        ("agents.learned.transformer", "import torch"),
        ("agents.learned.mdp_transformer", "import torch"),
        ("agents.learned.generalist", "import torch"),
        ("agents.learned.linear_generalist", "import torch"),
        # the meta-RL policies are Stable-Baselines3 policies: SB3 is theirs to import
        ("agents.learned.meta_rl", "import torch, stable_baselines3"),
    ],
)
def test_playing_a_learned_agent_imports_no_training_code(module, baseline):
    """A fresh interpreter: the agent pulls in no icrl_gym.training module and no torch.distributed beyond torch's own.

    ``import torch`` already loads ``torch.distributed`` itself, so the check is against that baseline.
    """
    code = _PROBE.format(baseline=baseline, module=module)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == {"training": [], "new_distributed": []}


@pytest.mark.parametrize("name", agent_names())
def test_every_registered_name_resolves_to_its_class(name):
    cls = agent_class(name)
    assert issubclass(cls, BanditAgent | MDPAgent)
    assert cls.name == name


def test_agents_package_exports_registered_classes():
    import agents

    algorithm = BanditAgent | MDPAgent
    exported = {cls for cls in vars(agents).values() if isinstance(cls, type) and issubclass(cls, algorithm)}
    registered = {agent_class(name) for name in agent_names()}
    # learned algorithms import torch: not re-exported, so `import agents` stays torch-free (registry docstring)
    learned = {agent_class(entry.agent) for entry in KINDS.values()}  # every kind's agent (the kind table)
    abstract = {cls for cls in exported if cls.name in ("agent", "mdp_agent")}
    mdp_mixture = {agents.MDPMixture}  # built by make_agent for a mixture of MDP algorithms
    assert exported - abstract - mdp_mixture <= registered
    assert registered - learned <= exported


def test_importing_the_agents_package_imports_no_torch():
    code = "import sys, agents; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    assert out.stdout.strip() == "False"


def test_registry_errors_and_registration():
    with pytest.raises(ValueError, match="known agents: .*linucb"):
        agent_class("no_such_agent")
    with pytest.raises(ValueError, match="bad parameters for agent 'linucb'"):
        make_agent("linucb", no_such_parameter=1)
    with pytest.raises(ValueError, match="package.module:Class"):
        register_agent("x", "agents.bandit.linucb.LinUCB")
    with pytest.raises(ValueError, match="already registered"):
        register_agent("linucb", "agents.bandit.ucb:UCB")
    assert make_agent("soft_linucb").temperature == 0.1
    assert make_agent("soft_linucb", temperature=0.5).temperature == 0.5
    components = [{"name": "mdp_uniform"}, {"name": "psrl"}]
    mixture = make_agent({"name": "mixture", "components": components, "weights": [0.5, 0.5]})
    assert isinstance(mixture, MDPAgent) and mixture.config()["components"][1]["name"] == "psrl"
    table = entry_points()
    table["linucb"] = "changed:Nothing"
    assert entry_points()["linucb"] == "agents.bandit.linucb:LinUCB"


def test_resolve_device():
    import torch

    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match=r"device must be 'auto', 'cpu', 'mps', 'cuda' or 'cuda:N', got 'gpu'"):
        resolve_device("gpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
