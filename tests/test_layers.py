"""Import direction (docs/architecture.md "Layers"): a module imports only from its own layer or below;
``specs``, ``catalog``, ``errors`` and ``units`` are imported by everyone; ``cli`` imports everything.
Function-level (lazy) imports count too. Also: no source file over ``MAX_LINES`` (``train/``:
``TRAIN_MAX_LINES``), no function over ``MAX_FUNCTION_LINES`` unless ``LONG_FUNCTIONS`` says why, no import of
another module's private names, no module-level import cycle inside a package (``KNOWN_CYCLES`` apart), and
the training specs do no catalog I/O. The last test runs each check on a small package that breaks it."""

from __future__ import annotations

import ast
import functools
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
    yield from _sources(SRC)


def _imports(path: Path):
    for node in ast.walk(_tree(path)):
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


@pytest.mark.parametrize("name", ["parallelism", "model"])
def test_training_specs_do_no_catalog_io(name):
    targets = {t for _, t in _imports(SRC / "specs" / f"{name}.py")}
    assert "catalog" not in targets


MAX_LINES = 400
"""No source file over this many lines (``train/``: ``TRAIN_MAX_LINES``): a file that grows splits by mechanism."""
MAX_FUNCTION_LINES = 80
"""No function or method longer than this (``def`` line to last line, docstring included)."""

#: functions allowed over ``MAX_FUNCTION_LINES``, each with why; an entry that no longer exceeds it fails too
LONG_FUNCTIONS: dict[str, str] = {
    "clustertwin.cli.infer_fleet_cmd.simulate_command":
        "one typer command signature: 47 of its lines are option declarations, the body is 51",
    "clustertwin.cli.sched_cmd.simulate_command":
        "one typer command signature: 44 lines of option declarations; the body (82) dispatches trace, "
        "workload and federation runs and could move the trace path into a function",
    "clustertwin.cli.node_cmd.bench_command":
        "one typer command: 18 lines of options, then the four benchmark parts (GEMM, memory, collectives, "
        "storage) in sequence, each a few lines over ops.bench; splitting per part is open",
    "clustertwin.infer.estimator.estimate":
        "input checks plus the three serving modes (fixed batch, offline, concurrency/request rate), each "
        "building its InferEstimate; one function per mode is the split, not done yet",
    "clustertwin.infer.fleet_metrics.summarize":
        "fleet result from the simulated arrays: latency percentiles, SLO attainment, GPU-hours, then the "
        "per-window table; the window table could become its own function",
    "clustertwin.infer.simulate._run_replica":
        "the iteration loop of one replica (admit, prefill chunk, decode, retire) with its state held in local "
        "lists for speed; splitting it would pass that state through every call of the hot loop",
    "clustertwin.infer.sizing_trace.size_for_trace":
        "input checks, the grid over (tp, precision, node), the fixed-fleet bisection and the autoscaled run "
        "in one function; the per-candidate search could move out",
    "clustertwin.ops.health.check.check_node":
        "one branch per saved-or-live source (nvidia-smi, topology, kernel log, IB, DCGM, install, containers); "
        "a sequence of independent checks, long but flat",
    "clustertwin.ops.health.gpu_health.gpu_findings":
        "one flat block per GPU check (catalog, memory, PCIe, ECC, remapped rows, throttling, temperature, "
        "NVLink), each adding its findings; could split per check",
    "clustertwin.ops.health.nvml.NvmlBackend.gpu":
        "one NVML query per GpuInfo field (each may be missing on a driver) and the record built from them; "
        "flat and declarative",
    "clustertwin.plan_rows.plan_rows":
        "the label -> value rows of every plan section (compute, memory, network, storage, facility): a "
        "table written as code; could split per section",
    "clustertwin.reliability.model.estimate":
        "23 lines of keyword parameters and a 16-line docstring; the body resolves the failure model, the "
        "checkpoint costs and the interval, then runs the Monte Carlo; the resolution step could move out",
    "clustertwin.reliability.montecarlo.simulate":
        "the vectorised trial loop over all trials at once (finish, window end, interruption by policy) whose "
        "arrays are updated in place; splitting it means passing a dozen arrays per step",
    "clustertwin.sched.backfill.BackfillMixin._backfill":
        "EASY backfill pass with its pruning (unchanged-pass skip, dead and refused shapes) kept in one loop "
        "over the window; the pruning rules are commented where they apply",
    "clustertwin.sched.engine.Simulator.__init__":
        "sets up every per-job array of the simulator (shapes, limits, runtimes, quotas, failure events) in "
        "one place; a builder of the job arrays is the split, not done yet",
    "clustertwin.topology.dragonfly.dragonfly_plus":
        "Dragonfly+ sizing (leaf split, groups, global links), hops and bandwidth in sequence; could split as "
        "fat_tree did into sizing and assembly",
    "clustertwin.topology.fattree.fat_tree":
        "fat-tree sizing: tier choice, leaf port split and rail grouping, each with its SpecError; it hands "
        "the chosen configuration to _assemble",
    "clustertwin.topology.fattree._assemble":
        "switch and link counts, hops and bandwidth of a chosen fat-tree configuration (1, 2 or 3 tiers, ToR "
        "or rail-optimised); hops and bandwidth could each become a function",
}

#: import cycles between modules of one package allowed, sorted module names -> why (none today)
KNOWN_CYCLES: dict[tuple[str, ...], str] = {}


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _sources(root: Path):
    for path in sorted(root.rglob("*.py")):
        yield ".".join(path.relative_to(root).with_suffix("").parts), path


def oversized_files(root: Path) -> dict[str, int]:
    """Files over ``MAX_LINES`` (``train/`` over ``TRAIN_MAX_LINES``), relative path -> lines."""
    big = {}
    for module, path in _sources(root):
        limit = TRAIN_MAX_LINES if module.startswith("train.") else MAX_LINES
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > limit:
            big[str(path.relative_to(root))] = n
    return big


def function_lengths(root: Path, package: str = "clustertwin") -> dict[str, int]:
    """Qualified name (``package.module.Class.func``) -> lines of every function and method."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                out[prefix + child.name] = child.end_lineno - child.lineno + 1
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    for module, path in _sources(root):
        visit(_tree(path), f"{package}.{module}.")
    return out


def long_function_problems(lengths: dict[str, int], allowed: dict[str, str]) -> list[str]:
    """Functions over ``MAX_FUNCTION_LINES`` not in ``allowed``, and ``allowed`` entries that are not (any more)."""
    bad = [f"{name}: {n} lines > {MAX_FUNCTION_LINES}" for name, n in sorted(lengths.items())
           if n > MAX_FUNCTION_LINES and name not in allowed]
    bad += [f"{name} is listed in LONG_FUNCTIONS but is "
            + (f"{lengths[name]} lines now" if name in lengths else "gone") for name in sorted(allowed)
            if lengths.get(name, 0) <= MAX_FUNCTION_LINES]
    return bad


def private_imports(root: Path, package: str = "clustertwin") -> list[str]:
    """``from package.x import _name`` anywhere (lazy imports too): module:line and the name."""
    return [f"{module}:{node.lineno} imports {node.module}.{a.name}"
            for module, path in _sources(root) for node in ast.walk(_tree(path))
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
            and (node.module == package or node.module.startswith(package + "."))
            for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]


def _package_of(module: str) -> str:
    return module.rpartition(".")[0]


def module_graph(root: Path, package: str = "clustertwin") -> dict[str, set[str]]:
    """Edges ``a -> b`` between modules of one package (top-level modules form one package), module-level
    imports only; a package's ``__init__`` is not a node."""
    mods = {m for m, _ in _sources(root)}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in _sources(root):
        for node in _tree(path).body:
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.startswith(package + "."):
                base = node.module.removeprefix(package + ".")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name.removeprefix(package + ".") for a in node.names if a.name.startswith(package + ".")]
            graph[m] |= {t for t in targets if t in mods and t != m and _package_of(t) == _package_of(m)
                         and not t.endswith("__init__")}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Every cycle a depth-first search meets (one per back edge), as sorted module names, deduplicated."""
    state: dict[str, int] = {}  # 1 = on the DFS stack, 2 = done
    stack: list[str] = []
    found: set[tuple[str, ...]] = set()

    def dfs(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                found.add(tuple(sorted(stack[stack.index(t):])))
            elif t not in state:
                dfs(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            dfs(m)
    return sorted(found)


def test_no_source_file_over_the_size_target():
    big = oversized_files(SRC)
    assert not big, big


def test_no_function_over_the_size_target_unless_listed():
    bad = long_function_problems(function_lengths(SRC), LONG_FUNCTIONS)
    assert not bad, bad


def test_long_function_reasons_are_written():
    assert all(len(reason) > 40 for reason in LONG_FUNCTIONS.values())


def test_no_import_cycle_inside_a_package():
    """One module owns what two share (comm/candidate.py, cli/sched_common.py, ...), so no pair of modules of a
    package imports each other at module level, directly or around a loop."""
    cycles = import_cycles(module_graph(SRC))
    assert [c for c in cycles if c not in KNOWN_CYCLES] == [], cycles
    assert [c for c in KNOWN_CYCLES if c not in cycles] == [], "KNOWN_CYCLES lists a cycle that is gone"


def test_no_import_of_another_modules_private_names():
    """A name another module needs is public in its owner; ``from x import _name`` is not allowed."""
    bad = private_imports(SRC)
    assert not bad, bad


def test_the_checks_catch_what_they_forbid(tmp_path):
    """The checks above on a small package that breaks each rule once."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "a.py").write_text("from pkg.sub import b\nfrom pkg.c import _hidden\n")
    (pkg / "sub" / "b.py").write_text("from pkg.sub.c import x\n\n\ndef f():\n    from pkg.sub import a\n")
    (pkg / "sub" / "c.py").write_text("import pkg.sub.a\n\nx = 1\n")
    long_body = "".join(f"        v{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (pkg / "c.py").write_text("class K:\n    def m(self):\n" + long_body + "\n\ndef short():\n    pass\n"
                              + "x = 1\n" * MAX_LINES)
    (pkg / "train").mkdir()
    (pkg / "train" / "t.py").write_text("y = 1\n" * (TRAIN_MAX_LINES + 1))
    assert oversized_files(pkg) == {"c.py": MAX_LINES + MAX_FUNCTION_LINES + 6, "train/t.py": TRAIN_MAX_LINES + 1}
    lengths = function_lengths(pkg, "pkg")
    assert lengths["pkg.c.K.m"] == MAX_FUNCTION_LINES + 1
    assert long_function_problems(lengths, {}) == [f"pkg.c.K.m: {MAX_FUNCTION_LINES + 1} lines > 80"]
    assert long_function_problems(lengths, {"pkg.c.K.m": "r", "pkg.c.short": "r"}) == [
        "pkg.c.short is listed in LONG_FUNCTIONS but is 2 lines now"]
    assert private_imports(pkg, "pkg") == ["sub.a:2 imports pkg.c._hidden"]
    # a -> b -> c -> a at module level; b's lazy import of a is not an edge
    graph = module_graph(pkg, "pkg")
    assert graph["sub.b"] == {"sub.c"}
    assert import_cycles(graph) == [("sub.a", "sub.b", "sub.c")]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
