"""Import direction (docs/architecture.md "Layers"): a module imports only from its own layer or below;
``specs``, ``catalog``, ``errors`` and ``units`` are imported by everyone; ``cli`` imports everything.
Function-level (lazy) imports count too. Also: no file in ``train/`` over the size target, and the
training specs do no catalog I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "clustertwin"

#: layer of every top-level package/module (data flows upward: specs -> hardware facts ->
#: topology/communication -> workload models -> cluster behaviour -> interfaces)
LAYERS: dict[str, int] = {
    "units": 0, "errors": 0, "labels": 0, "safety": 0, "inputs": 0, "yaml_load": 0,
    "specs": 1, "catalog": 1,
    "topology": 2, "facility": 2,
    "comm": 3,
    "train": 4, "infer": 4, "hpc": 4, "datapath": 4,
    "reliability": 5, "sched": 5, "plan": 5, "plan_rows": 5, "explain": 5,
    "ops": 6, "deploy": 6, "sweep": 6, "report": 6, "validate": 6, "profile": 6,
    "cli": 7, "__init__": 7, "__main__": 7, "web": 7,
}
#: modules that belong to another layer than their package: the validate runner's evaluators of the
#: training kinds (registered in validate.py) compose train and reliability
#: hpc's budget comparison prices whole designs, as plan does
MODULE_LAYERS: dict[str, int] = {"train.validation": LAYERS["validate"], "hpc.compare": LAYERS["plan"]}
TRAIN_MAX_LINES = 300


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).with_suffix("")
        yield ".".join(rel.parts), path


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for n in names:
            if n.startswith("clustertwin."):
                yield node.lineno, n.split(".")[1]


def _layer(module: str) -> int:
    for prefix, layer in MODULE_LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return layer
    top = module.split(".")[0]
    if top not in LAYERS:
        pytest.fail(f"module clustertwin.{module} has no layer: add '{top}' to LAYERS in {__file__}")
    return LAYERS[top]


def test_every_import_points_down_or_sideways():
    bad = []
    for module, path in _modules():
        own = _layer(module)
        for line, target in _imports(path):
            if target not in LAYERS:
                pytest.fail(f"clustertwin.{target} (imported by {module}:{line}) has no layer in LAYERS")
            if LAYERS[target] > own and LAYERS[target] > LAYERS["catalog"]:
                bad.append(f"{module}:{line} imports clustertwin.{target}")
    assert not bad, bad


def test_train_files_stay_small():
    big = {p.name: n for p in (SRC / "train").glob("*.py") if (n := len(p.read_text().splitlines())) > TRAIN_MAX_LINES}
    assert not big, big


@pytest.mark.parametrize("name", ["parallelism", "model"])
def test_training_specs_do_no_catalog_io(name):
    targets = {t for _, t in _imports(SRC / "specs" / f"{name}.py")}
    assert "catalog" not in targets


MAX_LINES = 400
"""No source file over this many lines: a file that grows splits by mechanism."""


def test_no_source_file_over_the_size_target():
    big = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, big


def _module_graph():
    """Edges ``a -> b`` between modules of one package (module-level and lazy imports alike)."""
    import networkx as nx

    mods = {m for m, _ in _modules()}
    g = nx.DiGraph()
    for m, path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                    node.module.startswith("clustertwin."):
                base = node.module.removeprefix("clustertwin.")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name.removeprefix("clustertwin.") for a in node.names if a.name.startswith("clustertwin.")]
            for t in targets:
                if t in mods and t != m and t.split(".")[0] == m.split(".")[0] and not t.endswith("__init__"):
                    g.add_edge(m, t)
    return g


def test_no_import_cycle_inside_a_package():
    """One module owns what two share (comm/candidate.py, cli/sched_common.py, ...), so no pair of modules of a
    package imports each other, directly or around a loop."""
    import networkx as nx

    cycles = [sorted(c) for c in nx.strongly_connected_components(_module_graph()) if len(c) > 1]
    assert not cycles, cycles


def test_no_import_of_another_modules_private_names():
    """A name another module needs is public in its owner; ``from x import _name`` is not allowed."""
    bad = [f"{module}:{node.lineno} imports {node.module}.{a.name}"
           for module, path in _modules() for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
           if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("clustertwin")
           for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, bad
