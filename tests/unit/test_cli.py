"""Every `adserve` subcommand explains itself with --help."""
import pytest

from adserve.cli import build_parser

COMMANDS = ["up", "down", "status", "fetch", "jobs", "jobs deploy", "jobs upgrade", "jobs list", "jobs cancel", "demo", "bench",
            "bench platform", "bench decision", "bench serve", "bench freshness", "auction", "serve", "serve ads", "serve tracker",
            "users", "users delete", "users apply-deletions", "serve advertiser-api", "advertisers",
            "advertisers create", "campaigns",
            "campaigns create", "campaigns pause", "campaigns resume", "campaigns set-budget", "campaigns set-bid",
            "campaigns bulk-load", "snapshots", "snapshots write", "simulate", "pacing", "pacing show", "billing", "billing absorbed",
            "bench pacing",
            "model", "model train", "model evaluate", "bench model", "explain", "learning-day",
            "serve prediction", "model canary-report", "advertisers keys", "advertisers revoke-key",
            "advertisers rotate-key", "ads", "ads review", "ads review list", "ads review approve",
            "ads review reject", "reserves", "reserves list", "reserves set", "reserves unset",
            "topics", "topics create", "cdc", "cdc register", "advertisers migrate"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_of_every_subcommand(command, capsys):
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([*command.split(), "--help"])
    assert done.value.code == 0
    assert "usage: adserve" in capsys.readouterr().out


def test_every_subcommand_is_listed_here():
    parser = build_parser()
    top = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - the parser's own registry
    assert set(top) == {c.split()[0] for c in COMMANDS}
