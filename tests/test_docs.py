"""The README and the docs site: links resolve, the site builds (`mkdocs build --strict`), and every code block runs.

Code blocks (fenced, with a language):
- ```python blocks run as scripts, each in its own temporary folder, with a timeout;
- ```bash blocks: each command line (a `\\` continues it) must be a `gencc` or `python` command, and runs in a
  temporary folder, unless the block is preceded by `<!-- not-run: reason -->` (installs, a server that runs
  until it is stopped, the test suite itself);
- ```text blocks are output, never run.
A block preceded by `<!-- slow: reason -->` runs only without `-m "not slow"`. Generated pages (results.md and
docs/generated/, written by `gencc reproduce`) are outputs: `gencc reproduce --check` keeps them current, so their
blocks are not run here, but their links are checked.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS_DIR = ROOT / "docs"
DOCS = [ROOT / "README.md", *sorted(DOCS_DIR.rglob("*.md"))]
GENERATED = [DOCS_DIR / "results.md", *sorted((DOCS_DIR / "generated").rglob("*.md"))]
WRITTEN = [p for p in DOCS if p not in GENERATED]  # written by hand: their code blocks run
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
OUTSIDE = "../" + "shared"  # spelled in two parts so this file does not match itself
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!--\s*(not-run|slow):\s*(\S.*?)\s*-->\s*$")
SHELL = {"bash", "sh", "shell", "console"}
LANGS = {"python", "text", *SHELL}
BLOCK_TIMEOUT = 300  # seconds per block or command; generous for a loaded 2-core machine


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def _strip_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)  # links in code blocks are not links


def _links(md: Path) -> list[str]:
    return [t for t in LINK.findall(_strip_code(md.read_text())) if not re.match(r"[a-z]+:", t)
            and not t.startswith("#")]


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension (mkdocs) gives a heading."""
    from markdown.extensions.toc import slugify

    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    return slugify(text, "-")


def _anchors(md: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", _strip_code(md.read_text()), flags=re.M)}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    body: str
    mark: str  # "", "not-run" or "slow"
    reason: str
    after: str = ""  # the paragraph right after the block (the figures it names in backticks must be drawn)

    @property
    def id(self) -> str:
        return f"{_rel(self.path)}:{self.line}"


def _blocks(md: Path) -> list[Block]:
    text = md.read_text()
    out = []
    for m in FENCE.finditer(text):
        before = [ln for ln in text[:m.start()].splitlines() if ln.strip()]
        mark = MARK.match(before[-1].strip()) if before else None
        out.append(Block(md, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2),
                         mark.group(1) if mark else "", mark.group(2) if mark else "",
                         text[m.end():].lstrip("\n").split("\n\n")[0]))
    return out


ALL_BLOCKS = [b for md in WRITTEN for b in _blocks(md)]
_seen: set[tuple[str, str]] = set()
RUN_BLOCKS = []  # blocks to run: identical ones (the ten-line API in the README and the quickstart) once
for _b in ALL_BLOCKS:
    if _b.lang != "text" and _b.mark != "not-run" and (_b.lang, _b.body) not in _seen:
        _seen.add((_b.lang, _b.body))
        RUN_BLOCKS.append(_b)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env.update(MPLBACKEND="Agg", NO_COLOR="1", COLUMNS="120")
    return env


def _commands(body: str) -> list[str]:
    """The command lines of a shell block: `\\`-continued lines joined, comments and blank lines dropped."""
    lines, cur = [], ""
    for raw in body.splitlines():
        cur += raw.rstrip()
        if cur.endswith("\\"):
            cur = cur[:-1] + " "
            continue
        if shlex.split(cur, comments=True):
            lines.append(cur.strip())
        cur = ""
    return lines


def _argv(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    bad = [w for w in words if w in {"&&", "||", "|", ";", ">", ">>", "<", "&"}]
    assert not bad, f"{command!r}: one command per line, without shell operators {bad}"
    assert words[0] in ("gencc", "python"), (
        f"{command!r} is not a gencc or python command: precede its block with <!-- not-run: reason --> "
        "or, if it is output, use a text fence")
    return [sys.executable, "-m", "gencc.cli", *words[1:]] if words[0] == "gencc" else [sys.executable, *words[1:]]


def _run(argv: list[str], cwd: Path, what: str) -> None:
    p = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
    assert p.returncode == 0, (f"{what} exited {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n"
                               f"--- stderr\n{p.stderr[-3000:]}")


def _param(b: Block):
    return pytest.param(b, id=b.id, marks=[pytest.mark.slow] if b.mark == "slow" else [])


@pytest.mark.parametrize("block", [_param(b) for b in RUN_BLOCKS])
def test_code_block_runs(block: Block, tmp_path: Path) -> None:
    if block.lang == "python":
        script = tmp_path / "block.py"
        script.write_text(block.body)
        _run([sys.executable, str(script)], tmp_path, f"the python block at {block.id}")
    else:
        commands = _commands(block.body)
        assert commands, f"the shell block at {block.id} has no command"
        for c in commands:
            _run(_argv(c), tmp_path, f"{c!r} (the block at {block.id})")
    for figure in re.findall(r"`([^`\s]+\.png)`", block.after):  # a figure the text says the block draws
        assert (tmp_path / figure).is_file(), f"the block at {block.id} did not draw {figure}, which its text names"


def test_every_block_has_a_language_and_not_run_blocks_say_why() -> None:
    unknown = [b.id for b in ALL_BLOCKS if b.lang not in LANGS]
    assert not unknown, f"code blocks without a known language ({sorted(LANGS)}): {unknown}"
    assert not [b.id for b in ALL_BLOCKS if b.mark and not b.reason]
    not_run = [b for b in ALL_BLOCKS if b.mark == "not-run"]
    assert len(not_run) <= len(ALL_BLOCKS) // 3, f"too many blocks are not run: {[b.id for b in not_run]}"
    # a block that runs must be runnable: shell blocks hold only gencc and python commands
    for b in RUN_BLOCKS:
        if b.lang in SHELL:
            for c in _commands(b.body):
                _argv(c)


def test_the_block_finder(tmp_path: Path) -> None:
    md = tmp_path / "x.md"
    md.write_text("a\n\n<!-- not-run: a server -->\n```bash\ngencc serve \\\n  --port 1  # comment\n```\n"
                  "```python\nprint(1)\n```\n<!-- slow: trains -->\n\n```text\nout\n```\n")
    blocks = _blocks(md)
    assert [(b.lang, b.mark, b.reason, b.line) for b in blocks] == [
        ("bash", "not-run", "a server", 4), ("python", "", "", 8), ("text", "slow", "trains", 13)]
    assert _commands(blocks[0].body) == ["gencc serve    --port 1  # comment"]
    assert _argv(_commands(blocks[0].body)[0])[1:] == ["-m", "gencc.cli", "serve", "--port", "1"]
    with pytest.raises(AssertionError, match="not a gencc or python command"):
        _argv("pip install gencc")
    with pytest.raises(AssertionError, match="shell operators"):
        _argv("gencc info && gencc demo")


@pytest.mark.parametrize("md", DOCS, ids=[_rel(p) for p in DOCS])
def test_every_relative_link_resolves(md: Path) -> None:
    links = _links(md)
    missing = [t for t in links if not (md.parent / t.split("#")[0]).exists()]
    assert not missing, f"{_rel(md)} links to missing files: {missing}"
    outside = [t for t in links if not (md.parent / t.split("#")[0]).resolve().is_relative_to(ROOT)]
    assert not outside, f"{_rel(md)} links outside the repository: {outside}"
    bad = [t for t in links if "#" in t and t.split("#")[0].endswith(".md")
           and t.split("#", 1)[1] not in _anchors((md.parent / t.split("#")[0]).resolve())]
    assert not bad, f"{_rel(md)} links to anchors that do not exist: {bad}"


def test_readme_is_a_front_door() -> None:
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) <= 200
    links = set(_links(readme))
    assert {"docs/design.md", "docs/results.md", "docs/quickstart.md", "LICENSE", "CHANGELOG.md"} <= links
    assert {f"docs/guides/{g}.md" for g in ("codes", "runtime", "serving", "robust", "experiments")} <= links
    text = readme.read_text()
    for command in ('pip install -e ".[torch,cli]" && gencc demo', 'pip install -e ".[all]" && python -m pytest -q',
                    'python -m pytest -q -m "not slow"'):
        assert command in text, command


def test_the_landing_page_starts_a_user_before_the_math() -> None:
    """docs/index.md: the install line (the README's) and `gencc demo` come before the first formula; the three
    uses link to their guides; its picture is drawn by the script it names; no issue numbers."""
    text = (DOCS_DIR / "index.md").read_text()
    install = 'pip install -e ".[torch,cli]" && gencc demo'
    assert install in text and install in (ROOT / "README.md").read_text()
    first_formula = min(text.index(f) for f in ("u_enc", "alpha_k", "beta_n", "D_F"))
    assert text.index(install) < first_formula and text.index("```bash\ngencc demo\n```") < first_formula
    assert text.index("## The math") < first_formula
    links = set(_links(DOCS_DIR / "index.md"))
    assert {"guides/runtime.md", "guides/your_model.md", "guides/upstreams.md", "guides/training.md",
            "figures/overview.png"} <= links
    for use in ("gencc.run", "gencc run", "gencc serve --model", "gencc serve --upstream", "gencc train"):
        assert text.index(use) < first_formula, use
    assert "`python docs/figures/overview.py`" in text and (DOCS_DIR / "figures" / "overview.py").is_file()
    assert not re.search(r"#\d|\bbar\b", _strip_code(text))


def test_docs_site_pages_are_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [_rel(p).removeprefix("docs/") for p in DOCS_DIR.rglob("*.md") if p not in GENERATED[1:]]
    assert "exclude_docs: generated/" in nav  # generated includes are read by pymdownx.snippets, not pages
    assert [p for p in pages if f" {p}" not in nav] == []


def test_benchmarks_and_presets_the_docs_name_exist() -> None:
    """A command printed in the docs names a benchmark script that exists, a suite that benchmarks/run.py runs and
    a preset whose section the generated results (or docs/generated/<preset>.md) hold, so a renamed script, suite
    or preset fails here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("benchmarks_run", ROOT / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    results = "".join(p.read_text() for p in GENERATED)
    for md in WRITTEN:
        text = md.read_text()
        scripts = set(re.findall(r"benchmarks/((?:investigations/)?[\w-]+\.py)", text))
        assert not [s for s in scripts if not (ROOT / "benchmarks" / s).exists()], (md, scripts)
        suites = set(re.findall(r"benchmarks/run\.py ([\w-]+)", text)) - {"SUITE"}
        assert suites <= {*run.SUITES, "all"}, (md, suites)
        presets = set(re.findall(r"--preset ([\w-]+)", text)) - {"all", "P"}
        assert not [p for p in presets if f"--preset {p} " not in results], (md, presets)


NUMBER = re.compile(r"(?<![\w.^/=-])\d[\d,]*(?:\.\d+)?(?:e-?\d+)?(?:%|x\b)?(?![\w.]?\d)")


def _measured_looking(text: str) -> list[str]:
    """Decimals, exponents, percentages and ratios ("1.5x") in `text`: what a measurement looks like."""
    return [n for n in NUMBER.findall(text) if "." in n or "e-" in n or n.endswith(("%", "x"))]


def _prose(md: Path) -> str:
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)  # commands and code: their numbers are inputs
    return re.sub(r"\]\([^)]*\)|<!--.*?-->", "]", text, flags=re.S)


def test_no_measured_number_is_typed_into_the_docs() -> None:
    """Measured numbers live in generated files only (results.md, tables/, figures/, generated/). A guard: every
    decimal, percentage or ratio ("1.5x") in the prose of a page written by hand must be an input or a default,
    i.e. appear in the library's source, tests or pyproject, where inputs are defined."""
    corpus = "".join(p.read_text() for p in [ROOT / "pyproject.toml", *ROOT.glob("src/**/*.py"),
                                             *ROOT.glob("tests/**/*.py")] if p.name != Path(__file__).name)
    typed = {_rel(md): sorted(n for n in set(_measured_looking(_prose(md)))
                              if n.replace(",", "") not in corpus and n not in corpus) for md in WRITTEN}
    assert not {k: v for k, v in typed.items() if v}, f"numbers typed into the docs: {typed}"
    assert _measured_looking(_strip_code("rel_mse 0.0123, 1.5x, 12%, 3e-05, K = 10 and N = 40, `--opt x=0.5`")) == [
        "0.0123", "1.5x", "12%", "3e-05"]


def _resolves(dotted: str) -> bool:
    import importlib

    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, name in enumerate(parts[1:], 1):
        if hasattr(obj, name):
            obj = getattr(obj, name)
            continue
        try:
            obj = importlib.import_module(".".join(parts[:i + 1]))
        except ImportError:
            return False
    return True


def test_every_gencc_name_the_docs_print_exists() -> None:
    """`gencc.x.y` in a page written by hand names a module or attribute that exists, so a rename fails here."""
    names = {n for md in WRITTEN for n in re.findall(r"(?<![\w/.])gencc(?:\.[A-Za-z_]\w*)+", md.read_text())}
    assert "gencc.GCC" in names
    missing = sorted(n for n in names if not _resolves(n))
    assert not missing, f"the docs name what gencc does not have: {missing}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built once (`mkdocs build --strict`) into a temporary folder."""
    out = tmp_path_factory.mktemp("mkdocs") / "site"
    env = _env()
    env["NO_MKDOCS_2_WARNING"] = "1"
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    return out


def test_mkdocs_build_strict(site: Path) -> None:
    assert (site / "reference" / "codes" / "index.html").exists()
    assert "gencc.GCC" in (site / "reference" / "gencc" / "index.html").read_text()


#: href and src attributes of the built HTML (the part before any #fragment or ?query)
HREF = re.compile(r"""(?:href|src)=["']([^"'#?]*)""")


def site_dead_links(site: Path) -> list[str]:
    """'page -> target' for every relative href / src of the built site's HTML whose file does not exist (a
    folder counts when it holds index.html): mkdocs --strict misses links into pages it excludes."""
    from urllib.parse import unquote

    dead = []
    for page in sorted(site.rglob("*.html")):
        for target in HREF.findall(page.read_text(errors="replace")):
            if not target or re.match(r"[a-zA-Z][\w+.-]*:", target) or target.startswith("/"):
                continue  # a fragment or query alone, another scheme (https:, mailto:, data:), site-absolute
            path = page.parent / unquote(target)
            if not (path.is_file() or (path / "index.html").is_file()):
                dead.append(f"{page.relative_to(site)} -> {target}")
    return dead


def test_every_relative_link_of_the_built_site_resolves(site: Path) -> None:
    dead = site_dead_links(site)
    assert not dead, f"{len(dead)} dead relative links in the built site: {dead[:20]}"


def test_the_dead_link_finder(tmp_path: Path) -> None:
    (tmp_path / "guides").mkdir()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "index.html").write_text("ok")
    (tmp_path / "guides" / "index.html").write_text(
        '<a href="../benchmarks/">b</a> <a href="../generated/benchmarks/#x">g</a> <img src="f%20g.png"> '
        '<a href="https://x.org/a">w</a> <a href="#top">t</a> <a href="index.html?q=1">s</a>')
    assert site_dead_links(tmp_path) == ["guides/index.html -> ../generated/benchmarks/",
                                         "guides/index.html -> f%20g.png"]


def test_nothing_points_outside_the_repository() -> None:
    files = [*DOCS, ROOT / "pyproject.toml", ROOT / "mkdocs.yml", *ROOT.glob("src/**/*.py"),
             *ROOT.glob("benchmarks/*.py"), *ROOT.glob("examples/*.py"),
             *(p for p in ROOT.glob("tests/**/*.py") if p.name != Path(__file__).name)]
    hits = [_rel(p) for p in files if OUTSIDE in p.read_text() or "shared/DESIGN" in p.read_text()]
    assert not hits, f"references to files outside the repository in: {hits}"


def test_the_link_finder_sees_links_and_images(tmp_path: Path) -> None:
    md = tmp_path / "x.md"
    md.write_text("see [a](a.md), ![fig](figures/f.png \"t\"), [web](https://x.org), [s](#sec)\n"
                  "```\n[not](code.md)\n```\n")
    assert _links(md) == ["a.md", "figures/f.png"]
    md.write_text("# Wrong results (`--check-results`)\n## How GCC's defaults were chosen\n")
    assert _anchors(md) == {"wrong-results-check-results", "how-gccs-defaults-were-chosen"}
