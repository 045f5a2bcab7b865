"""Every subcommand group beyond up/down/status/fetch, registered in one place; `adserve auction` and the
main demo (`adserve demo`) are wired here, the other groups in their own *_cli modules."""
from __future__ import annotations

import argparse
import sys

from adserve import (auction_cli, bench_cli, billing_cli, campaigns_cli, jobs_cli, learning_cli, model_cli,
                     operators_cli, pacing_cli, provision_cli, serve_cli, users_cli)
from infra.platform import PlatformSettings


def register(sub) -> None:
    """Every subcommand group, in the order `adserve --help` lists them."""
    jobs_cli.register(sub)
    _register_demo(sub)
    bench_cli.register(sub)
    _register_auction(sub)
    serve_cli.register(sub)
    users_cli.register(sub)
    campaigns_cli.register(sub)
    campaigns_cli.register_snapshots(sub)
    operators_cli.register(sub)
    pacing_cli.register(sub)
    billing_cli.register(sub)
    model_cli.register(sub)
    learning_cli.register(sub)
    provision_cli.register(sub)


# auction ------------------------------------------------------------------------

def _register_auction(sub) -> None:
    p = sub.add_parser("auction", help="run the auction alone on candidates given as JSON",
                       description=auction_cli.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, help="a JSON file, or - for standard input")
    p.set_defaults(handler=cmd_auction)


def cmd_auction(args: argparse.Namespace) -> int:
    if args.input == "-":
        return auction_cli.run(sys.stdin)
    try:
        with open(args.input) as stream:
            return auction_cli.run(stream)
    except OSError as exc:
        print(f"adserve auction: cannot read {args.input}: {exc.strerror}", file=sys.stderr)
        return 2


# benchmarks ---------------------------------------------------------------------

# main job -----------------------------------------------------------------------

def _register_demo(sub) -> None:
    from sim import event_counts_demo as demo

    p = sub.add_parser("demo", help="the main job: platform + simulated traffic through the real jobs, with a report",
                       description=demo.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=50_000, help="simulated ad events (default 50,000)")
    p.add_argument("--corrupt", type=int, default=5, help="corrupt records mixed in (default 5)")
    p.add_argument("--seed", type=int, default=7, help="random seed of the simulation")
    p.add_argument("--requests", type=int, default=3_000,
                   help="simulated ad requests through the ad server and tracker (default 3,000; 0 skips serving)")
    p.add_argument("--down", action="store_true", help="stop the platform at the end (default: leave it up)")
    p.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from sim import event_counts_demo as demo
    from infra.platform import control

    settings = PlatformSettings.from_env()
    try:
        report = demo.run(settings, events=args.events, corrupt=args.corrupt, seed=args.seed,
                          requests=args.requests)
        print(report.render())
    finally:
        if args.down:
            control.down(settings)
    if not args.down:
        print(f"the platform is still up: Flink UI {settings.flink_rest_url}; stop it with `adserve down`")
    return 0 if report.agrees else 1
