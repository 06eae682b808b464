"""The layers: the core <- agents (algorithms) <- training and benchmarks; no import cycle anywhere.

The core is ``icrl_gym`` without ``icrl_gym.training`` (environments, data, models, checkpoints, the
algorithm contract, the registry machinery): it imports no algorithm.  ``agents`` imports no
training code.  ``icrl_gym.training`` sits above ``agents`` and imports the algorithms it uses.  The
import graph is read with ``ast``: every ``import`` (at the top of a module or inside a function)
and every ``"package.module:attribute"`` string (the kind table's and the registry's entry points,
imported on first use), so that hiding an import behind a string still counts.
"""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import icrl_gym
from icrl_gym.algorithm import BanditAgent, MDPAgent
from icrl_gym.kinds import KINDS
from icrl_gym.registry import ENTRY_POINT_GROUP, agent_class, agent_names, entry_points, make_agent, register_agent
from icrl_gym.utils.device import device_name, resolve_device

ROOT = Path(icrl_gym.__file__).resolve().parent.parent
PACKAGES = ("icrl_gym", "agents", "benchmarks")
TARGET = re.compile(r"^((?:icrl_gym|agents|benchmarks)(?:\.\w+)*):\w+$")
"""A ``"module:attribute"`` string naming one of our modules (an entry point imported on first use)."""


def _modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, source: str, modules: dict[str, Path], is_package: bool) -> set[str]:
    """The modules of ``modules`` that ``source`` (the module ``name``) imports or names by entry point."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            found += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (match := TARGET.match(node.value)):
            found.append(match.group(1))
    edges = set()
    for target in found:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            edges.add(target)
    return edges


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules it imports (ours only), for every module of ``PACKAGES``."""
    modules = _modules(root)
    return {
        name: _imports(name, path.read_text(), modules, path.name == "__init__.py") for name, path in modules.items()
    }


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


GRAPH = import_graph()


def _is_core(module: str) -> bool:
    return module.split(".")[0] == "icrl_gym" and not module.startswith("icrl_gym.training")


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_import_cycle():
    assert import_cycles(GRAPH) == []


def test_the_core_imports_no_algorithm():
    offenders = {m: sorted(t for t in GRAPH[m] if _in(t, "agents")) for m in GRAPH if _is_core(m)}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_agents_import_no_training_code():
    offenders = {m: sorted(t for t in GRAPH[m] if _in(t, "icrl_gym.training")) for m in GRAPH if _in(m, "agents")}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_training_imports_its_algorithms_and_looks_none_up_by_name():
    """The trainers import the algorithms they use; the registry is left to user specifications (a config's
    ``context``/``expert``, which the data collection builds), so no trainer calls it itself."""
    training = {m: path for m, path in _modules().items() if _in(m, "icrl_gym.training")}
    assert any(_in(t, "agents") for m in training for t in GRAPH[m])
    for module, path in training.items():
        text = path.read_text()
        assert "agent_class(" not in text and "make_agent(" not in text, module


def test_the_graph_sees_imports_in_functions_relative_imports_and_entry_points():
    modules = {"a": Path(), "a.b": Path(), "a.c": Path(), "icrl_gym.x": Path()}
    source = "def f():\n    from .b import thing\n    import a.c\nTABLE = {'k': 'icrl_gym.x:Thing'}\n"
    assert _imports("a", source, modules, is_package=True) == {"a.b", "a.c", "icrl_gym.x"}
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_the_registry_and_the_kind_table_name_no_algorithm_module():
    for module in ("icrl_gym.registry", "icrl_gym.kinds"):
        assert not any(_in(t, "agents") for t in GRAPH[module]), module


def test_core_code_finds_algorithms_by_name_in_a_fresh_process():
    """The core names an algorithm without importing ``agents``: the registry loads the entry-point group."""
    code = (
        "import sys\n"
        "from icrl_gym.registry import make_agent\n"
        "assert 'agents' not in sys.modules\n"
        "agent = make_agent('linucb')\n"
        "print(type(agent).__module__, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT.parent)
    assert out.stdout.split() == ["agents.bandit.linucb", "False"]


def test_agents_are_declared_in_the_entry_point_group():
    import importlib.metadata

    assert "agents" in {ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert 'ENTRY_POINT_GROUP = "icrl_gym.agents"' in (ROOT / "icrl_gym" / "registry.py").read_text()
    assert '"icrl_gym.agents": ["agents = agents"]' in (ROOT / "setup.py").read_text()


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
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
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
    assert {entry.agent for entry in KINDS.values()} <= set(agent_names())


def test_importing_the_agents_package_imports_no_torch():
    code = "import sys, agents; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
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
    assert device_name("cpu") == "cpu" and device_name("auto") == str(resolve_device("auto"))
    with pytest.raises(ValueError, match="device must be"):
        device_name("gpu")


def test_a_sweeps_driver_loads_no_torch():
    """The command line, the task lists and a checkpoint's record need no torch: workers import it, the driver does not.

    A driver with torch holds about 160 MB more (its PSS) and starts 2-3 s later, next to every worker.
    """
    code = (
        "import sys\n"
        "import benchmarks.harness.cli, benchmarks.experiments.mdp_generalization.cli\n"
        "from benchmarks.executor.tasks import experiment_tasks\n"
        "from benchmarks.experiments.suite.cells import EXPERIMENTS\n"
        "from benchmarks.experiments.models import model_record\n"
        "from icrl_gym.utils.device import device_name\n"
        "[experiment_tasks(e, 4, 0, 'auto') for e in EXPERIMENTS.values()]\n"
        "model_record('bernoulli-generalist'), device_name('cpu')\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)
