"""--help in a user's words, laid out at the terminal's width: no project bookkeeping ("the bar", "issue 33"), no
Python type where a value's form belongs, and no sentence cut in the middle of a line (Typer's rich help keeps a
docstring's hard line breaks unless `gencc.cli.unwrapped` joins them)."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from gencc.cli import app, unwrapped

#: the helps a new user reads first, and the ones whose docstrings broke mid-line
HELPS = ([], ["serve"], ["parity"], ["parity", "train"], ["run"], ["sweep"])
BOX = re.compile("[\u2500-\u257f]")


def _help(argv: list[str], width: int) -> str:
    res = CliRunner().invoke(app, [*argv, "--help"], terminal_width=width, env={"COLUMNS": str(width)})
    assert res.exit_code == 0, res.output
    return res.output


def _flat(text: str) -> str:
    return " ".join(BOX.sub(" ", text).split())


@pytest.mark.parametrize("argv", HELPS, ids=lambda a: " ".join(a) or "gencc")
def test_help_has_no_bookkeeping_words(argv: list[str]) -> None:
    text = _flat(_help(argv, 80))
    assert not re.search(r"(?<!progress )\bbars?\b", text, re.I), text
    assert not re.search(r"\bissues? ?#?\d", text, re.I), text


@pytest.mark.parametrize(("argv", "option", "form"), [(["sweep"], "--opt", "CODE.KEY=VALUE"),
                                                     (["run"], "--opt", "CODE.KEY=VALUE"),
                                                     (["serve"], "--opt", "CODE.KEY=VALUE"),
                                                     (["plot"], "--kind", "KIND"),
                                                     (["reproduce"], "--set", "KEY=VALUE")])
def test_repeatable_options_show_the_form_of_their_value_not_a_python_type(argv: list[str], option: str,
                                                                           form: str) -> None:
    line = next(x for x in _help(argv, 200).splitlines() if re.search(rf"\s{option}\s", x))
    assert form in line and "list[" not in line, line


def _every_command() -> list[list[str]]:
    root = typer.main.get_command(app)
    return [[name, *([sub] if sub else [])] for name, cmd in root.commands.items()
            for sub in (getattr(cmd, "commands", None) or [None])]


@pytest.mark.parametrize("argv", _every_command(), ids=" ".join)
def test_no_help_shows_a_python_type(argv: list[str]) -> None:
    """An argument or option shows the form of its value (a metavar), never `<list[Path]>` or `<int>`."""
    out = _help(argv, 200)
    assert not re.search(r"<(list|tuple|dict)\[|<(int|float|str|Path|bool)>", out), out


def _blocks(out: str) -> list[list[str]]:
    """The runs of consecutive wrapped lines of one entry: the help text under Usage (one run per paragraph) and
    each command's summary in a Commands panel (its first line, then the lines whose name column is blank)."""
    blocks: list[list[str]] = []
    lines = out.splitlines()
    in_panel = panel = False
    start = None
    for line in lines:
        if line.lstrip().startswith("Usage:"):
            blocks.append([])
            continue
        if "\u256d" in line:  # a panel opens
            in_panel, panel = True, "Commands" in line
            blocks.append([])
            continue
        if "\u2570" in line:
            in_panel = False
            continue
        if not in_panel:
            text = line.strip()
            if blocks and text:
                blocks[-1].append(text)
            elif blocks:
                blocks.append([])
            continue
        if not panel:
            continue
        inner = line.strip().strip("\u2502").rstrip()
        m = re.match(r" (\S+)(\s+)(\S.*)$", inner)
        if m:  # a command's first line: where its summary column starts
            start = len(m.group(1)) + len(m.group(2)) + 1
            blocks.append([m.group(3)])
        elif start is not None and inner[:start].strip() == "":
            blocks[-1].append(inner[start:].strip())
    return [b for b in blocks if len(b) > 1]


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize("argv", [[], ["parity"], ["parity", "train"]], ids=lambda a: " ".join(a) or "gencc")
def test_help_is_filled_to_the_width_and_never_cut_mid_line(argv: list[str], width: int) -> None:
    """Greedy filling: a wrapped line is followed by a line whose first word did not fit on it. A hard line break
    kept from a docstring leaves a short line with room for the next word."""
    out = _help(argv, width)
    blocks = _blocks(out)
    assert blocks, out
    for block in blocks:
        room = max(len(line) for line in block)
        for line, nxt in zip(block, block[1:], strict=False):
            assert len(line) + 1 + len(nxt.split()[0]) > room, f"cut after {line!r} (next: {nxt!r}):\n{out}"


def test_every_command_help_is_unwrapped_paragraphs() -> None:
    root = typer.main.get_command(app)
    stack = [root]
    while stack:
        cmd = stack.pop()
        stack.extend(getattr(cmd, "commands", {}).values())
        for para in (cmd.help or "").split("\n\n"):
            assert para.startswith("\b") or "\n" not in para, (cmd.name, para)


def test_unwrapped_keeps_paragraphs_and_marked_blocks() -> None:
    assert unwrapped("One sentence\n    cut here.\n\n    Two\n    lines.") == "One sentence cut here.\n\nTwo lines."
    assert unwrapped("A.\n\n\b\nkeep\nlines") == "A.\n\n\b\nkeep\nlines"
    assert unwrapped(None) is None and unwrapped("") == ""


#: the commands whose options a user reads most: every option's help fits two lines (and its default) at 100 columns
LONG_HELPS = (["run"], ["serve"], ["train"], ["sweep"], ["loadtest"], ["parity", "train"])
#: what Typer writes after an option's help, on the help's last line or a line of its own
TRAILER = re.compile(r"\[(default|env var|required)\b")


def _option_rows(out: str, metavars: dict[str, str]) -> dict[str, list[str]]:
    """Each option of the help's panels: {its first name: the text of its rows, its names and metavar (`metavars`,
    by first name) cut off}. A row starts where the option column (after the box's left edge and a space, or
    Typer's `*` of a required option) holds an option's name; the lines below it continue it (a continued help
    line is indented far more)."""
    rows: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in out.splitlines():
        if not line.startswith("\u2502") or not line.rstrip().endswith("\u2502"):
            current = None
            continue
        inner = line.rstrip()[1:-1]
        m = re.match(r" \*?\s{0,3}(--?[\w-]+)(?:,--?[\w-]+)*(?:\s+--[\w-]+)?\s*", inner)
        if m:
            rest = inner[m.end():]
            metavar = metavars.get(m.group(1)) or ""
            if metavar and rest.startswith(metavar + " "):
                rest = rest[len(metavar):]
            current = rows.setdefault(m.group(1), [])
            current.append(rest.strip())
        elif current is not None:
            current.append(inner.strip())
    return rows


def _metavars(argv: list[str]) -> dict[str, str]:
    """{first name: the metavar --help shows} of the options of `gencc ARGV`."""
    cmd = typer.main.get_command(app)
    for name in argv:
        cmd = cmd.commands[name]
    ctx = cmd.context_class(cmd, info_name=argv[-1])
    return {p.opts[0]: p.metavar for p in cmd.get_params(ctx) if getattr(p, "param_type_name", "") == "option"}


def _help_lines(row: list[str]) -> int:
    """The lines of an option's help before what Typer appends ([default: ...], [env var: ...], [required])."""
    for i, text in enumerate(row):
        if TRAILER.match(text):
            return i
    return len(row)


@pytest.mark.parametrize("argv", LONG_HELPS, ids=" ".join)
def test_every_option_help_fits_two_lines_plus_its_default_at_100_columns(argv: list[str]) -> None:
    out = _help(argv, 100)
    metavars = _metavars(argv)
    rows = _option_rows(out, metavars)
    assert set(rows) == set(metavars), (sorted(set(rows) ^ set(metavars)), out)
    long = {name: row for name, row in rows.items() if _help_lines(row) > 2}
    assert not long, f"gencc {' '.join(argv)}: help over two lines at 100 columns: {long}\n{out}"
    trailers = {name: row for name, row in rows.items() if len(row) - _help_lines(row) > 2}
    assert not trailers, trailers


@pytest.mark.parametrize("argv", [*LONG_HELPS, ["plot"], ["reproduce"], ["demo"]], ids=" ".join)
def test_no_option_shows_a_python_type(argv: list[str]) -> None:
    out = _help(argv, 100)
    assert not re.search(r"<(int|float|str|path|bool|list\[[a-z]+\])>", out), out


@pytest.mark.parametrize("argv", [["run"], ["serve"], ["train"]], ids=" ".join)
def test_options_are_grouped_in_panels(argv: list[str]) -> None:
    out = _help(argv, 100)
    panels = re.findall(r"\u256d\u2500 ([^\u2500]+?) \u2500", out)
    assert "Options" not in panels and panels[-1] == "Output", panels
    assert {"Model", "Workers", "Injected slowness (experiments)"} <= set(panels), panels
    if argv != ["train"]:
        assert "Scheme" in panels, panels
