"""The package's shape (issue 16's rules, and the layers of docs/design.md): no import cycle (imports inside
functions count), no public class name defined twice, no module over SMELL_CAP (600) lines, a small top level, and every
module, found by walking the package, in one layer that imports only what its layer may."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import gencc

SRC = Path(gencc.__file__).resolve().parent.parent

#: every module of gencc belongs to one layer (a module or package name and everything under it); a new module
#: that fits none fails `test_every_module_is_in_one_layer` until it is placed
LAYERS: dict[str, tuple[str, ...]] = {
    "base": ("gencc._arrays", "gencc._validate", "gencc._lru", "gencc.errors", "gencc.netns"),
    "math": ("gencc.points", "gencc.kernels", "gencc.smoothing", "gencc.matern_ssm", "gencc.ordering",
             "gencc.metrics", "gencc.codes", "gencc.stragglers", "gencc.adversaries"),
    "model": ("gencc.model",),
    "faults": ("gencc.faults",),
    "engine": ("gencc.engine",),
    "front": ("gencc.runtime", "gencc.serving", "gencc.training", "gencc.simulate", "gencc.loadgen"),
    "workloads": ("gencc.workloads",),
    "experiments": ("gencc.experiments",),
    "cli": ("gencc.cli",),
    "testing": ("gencc.testing",),
    "package": ("gencc",),  # the top level: re-exports of the layers below
}
#: a module past this many lines is read as holding two responsibilities
SMELL_CAP = 600
#: what the math layer (and everything it may import) must never import: docs/design.md section 6
ABOVE = ("engine", "front", "workloads", "experiments", "cli", "testing")


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer(module: str) -> str | None:
    """The layer of `module` (the most specific prefix wins: gencc.codes.gcc is math, gencc itself is package)."""
    best, length = None, -1
    for name, prefixes in LAYERS.items():
        for p in prefixes:
            if _under(module, (p,)) and len(p) > length:
                best, length = name, len(p)
    return best


def _modules() -> dict[str, Path]:
    mods = {}
    for p in sorted((SRC / "gencc").rglob("*.py")):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


MODULES = _modules()


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        if node.level:
            parts = base.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1])
            target = f"{base}.{node.module}" if node.module else base
        else:
            target = node.module or ""
        names = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names]
    out = []
    for t in names:
        while t and t not in MODULES:
            t = t.rpartition(".")[0]
        if t.startswith("gencc") and t != module:
            out.append(t)
    return out


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for m, p in MODULES.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[m].update(_targets(m, node))
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in MODULES:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_the_checker_sees_a_cycle_and_imports_inside_functions() -> None:
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert [sorted(c) for c in _cycles_of(graph)] == [["a", "b"]]
    node = ast.parse("def f():\n    from .codes import base\n").body[0].body[0]
    assert _targets("gencc.simulate", node) == ["gencc.codes.base"]


def _cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    global MODULES
    saved, MODULES = MODULES, dict.fromkeys(graph, Path("x.py"))
    try:
        return _cycles(defaultdict(set, graph))
    finally:
        MODULES = saved


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    cycles = _cycles(_graph())
    assert not cycles, f"import cycles: {cycles}"


def test_the_walk_finds_every_module_file() -> None:
    files = {p for p in (SRC / "gencc").rglob("*.py")}
    assert set(MODULES.values()) == files and len(MODULES) > 100
    for name in ("gencc.stragglers", "gencc.faults", "gencc.adversaries.base", "gencc.model.core",
                 "gencc.testing.code_checks", "gencc.netns", "gencc.errors"):
        assert name in MODULES


def test_every_module_is_in_one_layer() -> None:
    loose = [m for m in MODULES if layer(m) is None]
    assert not loose, f"modules in no layer of LAYERS (place them): {loose}"
    assert layer("gencc.codes.gcc") == "math" and layer("gencc") == "package" and layer("gencc.cli") == "cli"


def _imports_of(layers: tuple[str, ...]) -> dict[str, set[str]]:
    graph = _graph()
    return {m: {t for t in graph[m] if layer(t) in ABOVE} for m in MODULES if layer(m) in layers}


def test_the_math_layer_imports_nothing_above_it() -> None:
    """points, kernels, smoothing, ordering, metrics, codes, stragglers (and adversaries) import nothing from the
    engine, runtime, serving, training, workloads, experiments, cli or testing; nor do the modules they may import
    (base, model, faults)."""
    bad = {m: sorted(ts) for m, ts in _imports_of(("base", "math", "model", "faults")).items() if ts}
    assert not bad, f"math-side modules importing higher layers: {bad}"


def test_base_and_model_stand_on_base_alone() -> None:
    graph = _graph()
    allowed = {"base": {"base"}, "model": {"base", "model"}}
    bad = {m: sorted(t for t in graph[m] if layer(t) not in allowed[layer(m)])
           for m in MODULES if layer(m) in allowed}
    bad = {m: ts for m, ts in bad.items() if ts}
    assert not bad, f"base / model modules importing other layers: {bad}"


def test_the_engine_knows_nothing_of_codes_or_front_ends() -> None:
    graph = _graph()
    bad = {m: sorted(t for t in graph[m] if layer(t) in ("math", *ABOVE) and not _under(t, ("gencc.engine",)))
           for m in MODULES if layer(m) == "engine"}
    bad = {m: ts for m, ts in bad.items() if ts}
    assert not bad, f"engine modules importing codes or front ends: {bad}"


def _testing_importers() -> dict[str, list[str]]:
    graph = _graph()
    return {m: sorted(t for t in graph[m] if layer(t) == "testing") for m in MODULES
            if layer(m) != "testing" and any(layer(t) == "testing" for t in graph[m])}


def test_no_production_module_imports_gencc_testing() -> None:
    bad = _testing_importers()
    assert not bad, f"production modules importing gencc.testing (test tooling): {bad}"


def test_only_the_top_level_imports_the_command_line() -> None:
    """The CLI sits on top: a library module never imports gencc.cli (a command's helpers live in the cli)."""
    graph = _graph()
    bad = {m: sorted(t for t in graph[m] if layer(t) == "cli") for m in MODULES
           if layer(m) not in ("cli", "package") and any(layer(t) == "cli" for t in graph[m])}
    assert not bad, f"library modules importing gencc.cli: {bad}"


def test_no_public_class_name_is_defined_twice() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for m, p in MODULES.items():
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(m)
    twice = {name: ms for name, ms in where.items() if len(ms) > 1}
    assert not twice, f"public classes defined in more than one module: {twice}"


def test_no_module_over_the_smell_cap() -> None:
    """One responsibility per module; past SMELL_CAP lines a module almost always holds two (split it by what
    it holds, never into a facade that re-exports the halves)."""
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > SMELL_CAP}
    assert not long, f"modules over {SMELL_CAP} lines: {long}"


def test_the_top_level_is_small_and_complete() -> None:
    # 30, plus as_model and Model (the user's own model is the front door, issue 17), plus GenccError (issue 31)
    assert len(gencc.__all__) <= 33
    assert all(hasattr(gencc, name) for name in gencc.__all__)
    assert len(set(gencc.__all__)) == len(gencc.__all__)


def test_test_files_outside_packages_have_unique_names() -> None:
    """pytest imports a test file of a folder without __init__.py by its bare name: two such files with one name
    stop the whole run at collection."""
    tests = Path(__file__).resolve().parent
    bare: dict[str, list[str]] = defaultdict(list)
    for p in tests.rglob("*.py"):
        if p.name not in ("__init__.py", "conftest.py") and not (p.parent / "__init__.py").exists():
            bare[p.name].append(str(p.parent.relative_to(tests)))
    clashes = {name: dirs for name, dirs in bare.items() if len(dirs) > 1}
    assert not clashes, f"test modules sharing a name outside packages (add an __init__.py): {clashes}"
