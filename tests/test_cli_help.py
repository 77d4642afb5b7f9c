"""Every command's --help: each option has help (taken from the argument's own comment, which a formatter can move
away from where docments reads it), an option that is on by default reads as written with its --no- form beside it."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from vtreetrm.cli import GROUPS, TOP_COMMANDS, _group_commands, _load, command_parser

ROOT = Path(__file__).resolve().parents[1]


def commands() -> dict:
    out = {f"vtreetrm {k}": _load(v) for k, v in TOP_COMMANDS.items()}
    for g in GROUPS:
        for name, f in _group_commands(g).items():
            out[f"vtreetrm {g} {name}"] = f if callable(f) else _load(f)
    return out


COMMANDS = commands()


def test_every_command_is_listed():
    assert len(COMMANDS) >= 35 and "vtreetrm release sft-export" in COMMANDS and "vtreetrm harness train" in COMMANDS


@pytest.mark.parametrize("prog", sorted(COMMANDS))
def test_every_option_has_help_that_reads_right(prog):
    p = command_parser(COMMANDS[prog], prog=prog)
    for a in p._actions:
        if a.dest == "help":
            continue
        assert (a.help or "").strip(), (
            f"{prog} {a.option_strings or a.dest}: no help (a comment on the argument's line)"
        )
        if any(s.startswith("--no-") for s in a.option_strings) and not a.dest.startswith("no_"):
            # a flag that turns off what is on by default has its positive form beside it, so its help reads as written;
            # a config's switch that is unset unless given (None: the config file's value stands) reads both ways too
            assert isinstance(a, argparse.BooleanOptionalAction) and a.default in (True, None), (prog, a.option_strings)
    text = p.format_help()
    assert "(default: None)" not in text and "(default: False)" not in text, prog
    nb = text.rstrip().rsplit("Defined in ", 1)[-1].rstrip(".")  # the last line names the notebook with the command
    assert text.rstrip().endswith(f"Defined in {nb}.") and (ROOT / nb).is_file() and nb.startswith("nbs/"), (prog, nb)
    assert f"def {getattr(COMMANDS[prog], '__name__', '?')}(" in (ROOT / nb).read_text(), (prog, nb)


def test_on_by_default_flags_parse_both_ways():
    p = command_parser(COMMANDS["vtreetrm release split"], prog="x")
    base = ["--canonical-dir", "run/canonical"]
    assert p.parse_args(base).progress is True
    assert (
        p.parse_args([*base, "--no-progress"]).progress is False
        and p.parse_args([*base, "--progress"]).progress is True
    )


def test_required_flags_are_required_in_help_and_parsing(capsys):
    "A flag a command cannot run without (vtreetrm.release.assets.requires) is required in its usage and by argparse."
    p = command_parser(COMMANDS["vtreetrm release sft-export"], prog="sft-export")
    usage = p.format_usage()
    assert "--canonical CANONICAL" in usage and "[--canonical" not in usage and "[--progress | --no-progress]" in usage
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--canonical", "x"])
    assert e.value.code == 2 and "--output-dir" in capsys.readouterr().err


def test_help_of_every_command_loads_no_model_library():
    """Listing and parsing every command (what `--help` and a mistaken flag need) imports no torch, transformers,
    accelerate or peft: a command that does not train or encode starts in well under a second, not ~6 s."""
    code = (
        "import sys\n"
        "from vtreetrm.cli import GROUPS, TOP_COMMANDS, _group_commands, _load, command_parser\n"
        "fs = [*TOP_COMMANDS.values(), *(f for g in GROUPS for f in _group_commands(g).values())]\n"
        "for f in fs:\n"
        "    command_parser(f if callable(f) else _load(f)).format_help()\n"
        "print(len(fs), sorted({'torch', 'transformers', 'accelerate', 'peft'} & set(sys.modules)))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.split(" ", 1)[1].strip() == "[]", r.stdout + r.stderr
    assert int(r.stdout.split()[0]) == len(COMMANDS), r.stdout
