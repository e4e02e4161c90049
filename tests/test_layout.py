"""The package's shape (the layers of docs/design.md section 6): the layers are the folders. Every subpackage of
gencc is one layer, read from the tree; the top level holds only the face (`__init__.py`), `errors.py` and the
private helpers (`_util`). Checked here: no import cycle (imports inside functions count), no import running
back up, the math layers standing alone, no private name imported across packages, no public class name
defined twice, no module over SMELL_CAP (600) lines."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import gencc

SRC = Path(gencc.__file__).resolve().parent.parent
PKG = SRC / "gencc"

#: what may stand at the top of the package besides the layers' folders
TOP_FILES = {"__init__.py", "errors.py", "py.typed"}
#: the layers, bottom to top: a layer imports only layers before it (and itself). This is the order of the
#: architecture, not a list of modules: each module's layer is the folder it sits in.
ORDER = ("_util", "errors", "rkhs", "model", "codes", "faults", "engine", "runtime", "loadgen", "workloads",
         "serving", "training", "experiments", "testing", "cli", "face")
#: the math layers, and what they must never import (docs/design.md section 6)
MATH = ("rkhs", "codes", "faults")
ABOVE = ("engine", "runtime", "serving", "training", "loadgen", "workloads", "experiments", "cli", "testing")
#: the engine knows nothing of codes (nor the RKHS math under them)
ENGINE_BLIND = ("rkhs", "codes")
#: a module past this many lines is read as holding two responsibilities
SMELL_CAP = 600


def layer(module: str) -> str:
    """The layer of `module`: the top-level folder it sits in ("face" for gencc itself, "errors" for
    gencc.errors)."""
    parts = module.split(".")
    return "face" if len(parts) == 1 else parts[1]


def _modules() -> dict[str, Path]:
    mods = {}
    for p in sorted((SRC / "gencc").rglob("*.py")):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


MODULES = _modules()


def _from(module: str, node: ast.ImportFrom) -> str:
    """The absolute module name a `from ... import` reads from."""
    if not node.level:
        return node.module or ""
    base = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    parts = base.split(".")
    base = ".".join(parts[: len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        target = _from(module, node)
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
    node = ast.parse("def f():\n    from ..codes import base\n").body[0].body[0]
    assert _targets("gencc.runtime.simulate", node) == ["gencc.codes.base"]


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
    files = {p for p in PKG.rglob("*.py")}
    assert set(MODULES.values()) == files and len(MODULES) > 100
    for name in ("gencc.faults.stragglers", "gencc.faults.injection", "gencc.faults.adversaries.base",
                 "gencc.model.core", "gencc.testing.code_checks", "gencc.engine.ray.namespace", "gencc.errors"):
        assert name in MODULES


def test_the_top_level_holds_only_the_face_errors_and_the_private_helpers() -> None:
    files = {p.name for p in PKG.iterdir() if p.is_file()}
    loose = files - TOP_FILES
    assert not loose, f"loose modules at the top of gencc (move each into its layer's folder): {loose}"
    folders = {p.name for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert all((PKG / f / "__init__.py").exists() for f in folders)
    assert folders == set(ORDER) - {"errors", "face"}, "every folder is a layer of ORDER, and every layer a folder"


def test_the_layers_come_from_the_folders() -> None:
    assert layer("gencc.codes.gcc") == "codes" and layer("gencc") == "face" and layer("gencc.cli") == "cli"
    assert layer("gencc.engine.ray.backend") == "engine" and layer("gencc._util.arrays") == "_util"
    assert {layer(m) for m in MODULES} == set(ORDER)


def _crossings() -> dict[str, list[str]]:
    graph = _graph()
    rank = {name: i for i, name in enumerate(ORDER)}
    return {m: sorted(t for t in graph[m] if rank[layer(t)] > rank[layer(m)]) for m in MODULES}


def test_no_import_runs_back_up() -> None:
    """A layer imports only the layers below it in ORDER (so the CLI imports the library and never the
    reverse, and no module imports the package face `gencc` itself)."""
    bad = {m: ts for m, ts in _crossings().items() if ts}
    assert not bad, f"imports running back up the layers: {bad}"


def test_the_checker_sees_an_import_running_back_up() -> None:
    global MODULES
    saved = MODULES
    try:
        MODULES = {**saved, "gencc.rkhs.bad": Path("bad.py")}
        graph = defaultdict(set, {"gencc.rkhs.bad": {"gencc.engine.workers"}})
        rank = {name: i for i, name in enumerate(ORDER)}
        assert [t for t in graph["gencc.rkhs.bad"] if rank[layer(t)] > rank["rkhs"]] == ["gencc.engine.workers"]
    finally:
        MODULES = saved


def test_the_math_layers_import_nothing_above_them() -> None:
    """rkhs, codes and faults import nothing from the engine, runtime, serving, training, loadgen, workloads,
    experiments, cli or testing."""
    graph = _graph()
    bad = {m: sorted(t for t in graph[m] if layer(t) in ABOVE) for m in MODULES if layer(m) in MATH}
    bad = {m: ts for m, ts in bad.items() if ts}
    assert not bad, f"math modules importing higher layers: {bad}"


def test_the_engine_knows_nothing_of_codes() -> None:
    graph = _graph()
    bad = {m: sorted(t for t in graph[m] if layer(t) in ENGINE_BLIND) for m in MODULES if layer(m) == "engine"}
    bad = {m: ts for m, ts in bad.items() if ts}
    assert not bad, f"engine modules importing the codes or the RKHS math: {bad}"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_imports() -> dict[str, list[str]]:
    """Private names (a leading `_`: a module, a folder or a name) that a module imports from another layer;
    gencc._util, the private helpers every layer shares, is the one exception."""
    out: dict[str, list[str]] = defaultdict(list)
    for m, p in MODULES.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if not isinstance(node, ast.ImportFrom) or not (target := _from(m, node)).startswith("gencc"):
                continue
            if layer(target) in (layer(m), "_util"):
                continue
            private = [s for s in target.split(".")[1:] if _private(s)]
            private += [a.name for a in node.names if _private(a.name)]
            if private:
                out[m].append(f"{target}: {', '.join(private)}")
    return dict(out)


def test_no_private_name_is_imported_across_packages() -> None:
    bad = _private_imports()
    assert not bad, f"private names imported from another package (make them public there, or move them): {bad}"


def _testing_importers() -> dict[str, list[str]]:
    graph = _graph()
    return {m: sorted(t for t in graph[m] if layer(t) == "testing") for m in MODULES
            if layer(m) != "testing" and any(layer(t) == "testing" for t in graph[m])}


def test_no_production_module_imports_gencc_testing() -> None:
    bad = _testing_importers()
    assert not bad, f"production modules importing gencc.testing (test tooling): {bad}"


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
