"""The CLI's one vocabulary: the table of docs/guides/cli.md, read here, against every command's own options (their
click parameters), so a command that names a shared concept another way, or takes a name it should not, fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gencc.cli import app

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "cli.md"
#: the commands the table speaks of, by the name a user types
COMMANDS = ("run", "serve", "train", "sweep", "reproduce", "demo", "parity train", "loadtest", "plot", "info")
#: names the vocabulary retired: no command may take them, not even as an alias
RETIRED = ("--ray-address", "--workloads", "--schemes", "--plots", "--packed", "--latency", "--parm_k", "--parm-k",
           "--partitions", "--k", "--N", "--sample-s", "--delay-s", "--deadline", "--hedge-delay", "--read-timeout",
           "--duration", "--timeout")


def _commands() -> dict[str, object]:
    root = typer.main.get_command(app)
    out = {}
    for name, cmd in root.commands.items():
        if hasattr(cmd, "commands"):
            out.update({f"{name} {sub}": c for sub, c in cmd.commands.items()})
        else:
            out[name] = cmd
    return out


def _table() -> list[dict]:
    """The rows of the vocabulary table: option, aliases (names starting with -), commands."""
    rows = []
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[1].startswith("`--"):
            continue
        option = re.findall(r"`([^`]+)`", cells[1])[0]
        aliases = [a for a in re.findall(r"`([^`]+)`", cells[2]) if a.startswith("-")]
        commands = [c.strip() for c in cells[3].split(",")]
        rows.append({"option": option, "aliases": aliases, "commands": commands})
    return rows


TABLE = _table()
CMDS = _commands()


def _options(cmd) -> list:
    return [p for p in cmd.params if getattr(p, "param_type_name", "") == "option"]


def test_the_table_is_read_and_every_command_exists() -> None:
    assert {r["option"] for r in TABLE} >= {"--backend", "--address", "--workers", "--K", "--workload", "--jobs",
                                            "--procs", "--packed-parity", "--slow-fraction", "--slow-factor", "--plot",
                                            "--slow-task-fraction", "--service-ms", "--progress", "--model"}
    assert set(COMMANDS) == set(CMDS), sorted(CMDS)
    assert all(c in CMDS for r in TABLE for c in r["commands"]), TABLE


@pytest.mark.parametrize("row", TABLE, ids=[r["option"] for r in TABLE])
def test_exactly_the_listed_commands_take_the_option_under_its_name(row: dict) -> None:
    """Each listed command takes the concept with the option as its first (canonical) name and no other alias than
    the table's; no command outside the list takes the option or one of its aliases."""
    names = {row["option"], *row["aliases"]}
    for name, cmd in CMDS.items():
        mine = [p for p in _options(cmd) if names & set(p.opts)]
        if name in row["commands"]:
            assert len(mine) == 1, f"gencc {name} should take {row['option']}; its options: " \
                                   f"{[p.opts for p in _options(cmd)]}"
            p = mine[0]
            assert p.opts[0] == row["option"], f"gencc {name}: {p.opts} should be named {row['option']} first"
            assert set(p.opts) <= names, f"gencc {name}: {p.opts} has a name the table does not list"
        else:
            assert not mine, f"gencc {name} takes {[p.opts for p in mine]}, which the table gives only to " \
                             f"{', '.join(row['commands'])}"


@pytest.mark.parametrize("name", COMMANDS)
def test_no_command_takes_a_retired_name(name: str) -> None:
    taken = {o for p in _options(CMDS[name]) for o in p.opts}
    assert not taken & set(RETIRED), f"gencc {name} still takes {sorted(taken & set(RETIRED))}"


@pytest.mark.parametrize("argv", [[], *([c] for c in ("parity",)), *(c.split() for c in COMMANDS)],
                         ids=lambda a: " ".join(a) or "gencc")
def test_help_has_no_bool_label_and_ranges_are_checked_by_the_shared_callbacks(argv: list[str]) -> None:
    res = CliRunner().invoke(app, [*argv, "--help"], terminal_width=200, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output and "--help" in res.output, res.output
    cmd = CMDS.get(" ".join(argv))
    for p in _options(cmd) if cmd is not None else []:  # Typer's min= / max= word a range error another way
        assert getattr(p, "min", None) is None and getattr(p, "max", None) is None, \
            f"gencc {' '.join(argv)} {p.opts}: a range belongs in a gencc.cli.options callback"


@pytest.mark.parametrize("name", COMMANDS)
def test_every_time_option_is_in_milliseconds_and_says_so_in_its_name(name: str) -> None:
    """One time unit across the command line: an option that takes a time takes milliseconds, and its name ends
    in -ms; no option's help speaks of seconds."""
    for p in _options(CMDS[name]):
        text = f"{p.help or ''} {p.metavar or ''}"
        assert not re.search(r"\bseconds\b|\bin s\b", text), (name, p.opts, text)
        if re.search(r"\bms\b|\bMS\b", text):
            assert all(o.endswith("-ms") for o in p.opts if o.startswith("--")), (name, p.opts, text)
