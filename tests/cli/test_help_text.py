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
