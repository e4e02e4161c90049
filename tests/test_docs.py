"""README.md and docs/*.md reference only files inside the repository, and every relative link resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
OUTSIDE = "../" + "shared"  # spelled in two parts so this file does not match itself


def _links(md: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)  # links in code blocks are not links
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


@pytest.mark.parametrize("md", DOCS, ids=[p.name for p in DOCS])
def test_every_relative_link_resolves(md: Path) -> None:
    links = _links(md)
    missing = [t for t in links if not (md.parent / t.split("#")[0]).exists()]
    assert not missing, f"{md.relative_to(ROOT)} links to missing files: {missing}"
    outside = [t for t in links if not (md.parent / t.split("#")[0]).resolve().is_relative_to(ROOT)]
    assert not outside, f"{md.relative_to(ROOT)} links outside the repository: {outside}"


def test_readme_links_the_design_and_results() -> None:
    assert {"docs/design.md", "docs/results.md"} <= set(_links(ROOT / "README.md"))


def test_nothing_points_outside_the_repository() -> None:
    files = [*DOCS, ROOT / "pyproject.toml", *ROOT.glob("src/**/*.py"), *ROOT.glob("benchmarks/*.py"),
             *(p for p in ROOT.glob("tests/**/*.py") if p.name != Path(__file__).name)]
    hits = [str(p.relative_to(ROOT)) for p in files if OUTSIDE in p.read_text() or "shared/DESIGN" in p.read_text()]
    assert not hits, f"references to files outside the repository in: {hits}"


def test_the_link_finder_sees_links_and_images(tmp_path: Path) -> None:
    md = tmp_path / "x.md"
    md.write_text("see [a](a.md), ![fig](figures/f.png \"t\"), [web](https://x.org), [s](#sec)\n"
                  "```\n[not](code.md)\n```\n")
    assert _links(md) == ["a.md", "figures/f.png"]
