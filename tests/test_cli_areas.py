"""The command line imports only the area of the command it runs: the table that says which area registers which
command must match what the areas register."""

from __future__ import annotations

import argparse
import importlib

import pytest

from vaswani.cli import COMMANDS, build_parser


def _registered(area: str) -> set[str]:
    parser = argparse.ArgumentParser()
    importlib.import_module(area).register(parser.add_subparsers(dest="command"))
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(action.choices)


@pytest.mark.parametrize("area", list(COMMANDS))
def test_each_area_registers_exactly_the_commands_the_table_gives_it(area: str) -> None:
    assert _registered(area) == set(COMMANDS[area])


def test_a_command_builds_its_own_area_and_no_command_builds_them_all() -> None:
    def commands(parser: argparse.ArgumentParser) -> set[str]:
        return set(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)

    assert commands(build_parser("evaluate")) == {"evaluate", "compare", "average"}
    assert commands(build_parser(None)) == commands(build_parser("no-such-command")) == {
        name for names in COMMANDS.values() for name in names}


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every parser below it (commands, and subcommands such as each experiment or benchmark)."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _parsers(sub)
    return found


def test_the_help_of_every_command_and_subcommand_renders() -> None:
    """argparse formats a help text with %: a stray percent sign breaks `--help` of that command and its parents."""
    parsers = _parsers(build_parser(None))
    assert len(parsers) > len(COMMANDS) + 20  # the experiments, benchmarks and classify's subcommands are in
    for parser in parsers:
        assert parser.format_help().startswith("usage: "), parser.prog
