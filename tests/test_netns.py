"""`gencc.netns` is production code (the commands re-run themselves with it, the engine's Ray doc points to it):
no module of gencc outside `gencc.testing` imports the test tooling."""

from __future__ import annotations

import ast
from pathlib import Path

import gencc

SRC = Path(gencc.__file__).resolve().parent


def imports_testing(module: str, text: str) -> bool:
    """Whether the source `text` of the module named `module` imports gencc.testing (or anything in it)."""
    package = module if module.endswith("__init__") else module.rpartition(".")[0]
    package = package.removesuffix(".__init__")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            target = ".".join(filter(None, [base, node.module or ""]))
            names = [target, *(f"{target}.{a.name}" for a in node.names)]
        else:
            continue
        if any(n == "gencc.testing" or n.startswith("gencc.testing.") for n in names):
            return True
    return False


def test_no_production_module_imports_gencc_testing() -> None:
    offenders = [str(p.relative_to(SRC)) for p in sorted(SRC.rglob("*.py")) if "testing" not in p.relative_to(SRC).parts
                 and imports_testing(".".join(p.relative_to(SRC.parent).with_suffix("").parts), p.read_text())]
    assert not offenders, f"production modules importing gencc.testing: {offenders}"


def test_the_import_finder_sees_relative_and_absolute_imports() -> None:
    for text, hit in (("from ..testing.isolation import x\n", True), ("import gencc.testing\n", True),
                      ("from .. import testing\n", True), ("from ..netns import can_unshare\n", False),
                      ("def f():\n    from gencc.testing import check\n", True), ("import testing\n", False)):
        assert imports_testing("gencc.runtime.commands", text) is hit, text
    assert imports_testing("gencc.cli.__init__", "from ..testing import x\n")
    assert not imports_testing("gencc.cli.__init__", "from .testing import x\n")
