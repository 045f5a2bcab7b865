"""`adserve ads review` and `adserve reserves`: what only the platform's operators decide.

  adserve ads review list [--status PENDING|APPROVED|REJECTED|ALL] [--limit 100]
  adserve ads review approve AD_ID [--version N] [--reviewer NAME]
  adserve ads review reject AD_ID --reason TEXT [--version N] [--reviewer NAME]
  adserve reserves list [--all]
  adserve reserves set --placement P [--country C] [--reserve-micros N] [--quality-floor-micros N]
                       [--default-quality-micros N] [--operator NAME]
  adserve reserves set --from-file recommended_reserves.json [--operator NAME]
  adserve reserves unset --placement P [--country C] [--operator NAME]

Both write the campaign store with who and when; the change reaches every ad server through CDC and the index
builder like an advertiser's (serving.ads, serving.reserves), within seconds. The rules are core.campaigns'
(review) and core.reserves' (which rule applies to a request)."""
from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
from typing import Any

from core.campaigns import REVIEW_STATUSES, InvalidField, ReviewConflict
from core.reserves import ANY, PLATFORM_TERMS, rules_from_document, validate_rule
from infra.platform import PlatformSettings


def operator_name() -> str:
    """Who is acting: ADSERVE_OPERATOR, else the login name."""
    return os.environ.get("ADSERVE_OPERATOR") or getpass.getuser()


def _with_store(fn):
    from serving.advertiser.store import CampaignStore

    async def run():
        store = await CampaignStore(PlatformSettings.from_env().postgres_dsn, size=1).open()
        try:
            return await fn(store)
        finally:
            await store.close()
    return asyncio.run(run())


def _print(result: Any) -> int:
    from serving.advertiser.store import to_json

    rows = [to_json(r) for r in result] if isinstance(result, list) else to_json(result)
    print(json.dumps(rows, default=str, indent=2))
    return 0


def _guarded(fn) -> int:
    try:
        return _print(fn())
    except InvalidField as e:
        print(f"adserve: error: {e}")
        return 2
    except ReviewConflict as e:
        print(f"adserve: refused: {e}")
        return 3


# ---------------------------------------------------------------- review

def cmd_review_list(args) -> int:
    return _guarded(lambda: _with_store(lambda store: store.ads_for_review(args.status.upper(), args.limit)))


def cmd_review_decide(args) -> int:
    return _guarded(lambda: _with_store(lambda store: store.review_ad(
        args.ad_id, args.decision, args.reviewer or operator_name(), seen_version=args.version,
        note=getattr(args, "reason", None))))


# ---------------------------------------------------------------- reserves

def cmd_reserves_list(args) -> int:
    rows = _with_store(lambda store: store.list_reserves(include_removed=args.all))
    print(f"# built in, under every rule: reserve {PLATFORM_TERMS.reserve_micros} micros per impression, "
          f"no quality floor, default quality {PLATFORM_TERMS.default_quality_micros}")
    return _print(rows)


def cmd_reserves_set(args) -> int:
    if args.from_file is not None:
        return _reserves_from_file(args)
    if args.placement is None:
        print("adserve: error: placement: give --placement (or --from-file)")
        return 2

    def run():
        fields = validate_rule(args.placement, args.country, reserve_micros=args.reserve_micros,
                               quality_floor_micros=args.quality_floor_micros,
                               default_quality_micros=args.default_quality_micros)
        return _with_store(lambda store: store.set_reserve(fields, args.operator or operator_name()))
    return _guarded(run)


def _reserves_from_file(args) -> int:
    """Every rule of a file (pipelines.auction_replay --recommend's recommended_reserves.json), each set as
    `set` would; all are checked before the first is written."""
    given = [flag for flag, value in (("--placement", args.placement), ("--reserve-micros", args.reserve_micros),
                                      ("--quality-floor-micros", args.quality_floor_micros),
                                      ("--default-quality-micros", args.default_quality_micros)) if value is not None]
    if given or args.country != ANY:
        print(f"adserve: error: --from-file sets the rules the file gives; drop {', '.join(given) or '--country'}")
        return 2
    try:
        with open(args.from_file, encoding="utf-8") as f:
            document = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"adserve: error: --from-file {args.from_file}: {e}")
        return 2
    try:
        rules = rules_from_document(document)
    except InvalidField as e:
        print(f"adserve: error: {args.from_file}: {e}")
        return 2
    who = args.operator or operator_name()

    async def set_all(store) -> list[dict[str, Any]]:
        return [await store.set_reserve(fields, who) for fields in rules]
    return _guarded(lambda: _with_store(set_all))


def cmd_reserves_unset(args) -> int:
    def run():
        fields = {"placement": args.placement.strip(), "country": args.country.upper()}
        return _with_store(lambda store: store.set_reserve(fields, args.operator or operator_name(), remove=True))
    return _guarded(run)


def register(sub) -> None:
    a = sub.add_parser("ads", help="operator actions on ads (review)")
    asub = a.add_subparsers(dest="ads_command", required=True, metavar="COMMAND")
    r = asub.add_parser("review", help="review ads: only approved ads serve",
                        description="New ads, and ads whose creative, landing URL or targeting changed, wait for "
                                    "review (PENDING) and do not serve. An approval or rejection is recorded "
                                    "with the reviewer and the time on the ad and in its review history, and "
                                    "reaches every ad server within seconds.",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    rsub = r.add_subparsers(dest="review_command", required=True, metavar="ACTION")
    p = rsub.add_parser("list", help="ads waiting for review (or in another state), oldest change first")
    p.add_argument("--status", default="PENDING", choices=[*REVIEW_STATUSES, "ALL"], type=str.upper)
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p.set_defaults(handler=cmd_review_list)
    for name, decision in (("approve", "APPROVED"), ("reject", "REJECTED")):
        p = rsub.add_parser(name, help=f"mark an ad {decision}")
        p.add_argument("ad_id", type=int)
        p.add_argument("--version", type=int,
                       help="the version you looked at (from `list`); refused if the ad changed since")
        p.add_argument("--reviewer", help="who decides (default ADSERVE_OPERATOR, else your login name)")
        if decision == "REJECTED":
            p.add_argument("--reason", required=True, help="why, in words the advertiser can act on")
        p.set_defaults(handler=cmd_review_decide, decision=decision)

    s = sub.add_parser("reserves", help="reserve prices, quality floors and default quality per placement and "
                                        "country",
                       description=__doc__.split("\n\n")[0] + "\n\nA rule names a placement and a country, either "
                       "of which may be * (any), and sets any of: the reserve (micro-units per impression; 1000 "
                       "is $1 CPM: an ad needs bid x action rate at least this, and pays at least this), the "
                       "quality floor (an ad whose quality term is below it cannot win) and the default quality "
                       "term (of ads without an estimate of their own). A request takes each value from the most "
                       "specific rule that sets it: (placement, country), (placement, *), (*, country), (*, *), "
                       f"then the built-in terms (reserve {PLATFORM_TERMS.reserve_micros}, no floor, quality "
                       f"{PLATFORM_TERMS.default_quality_micros}).")
    ssub = s.add_subparsers(dest="reserves_command", required=True, metavar="ACTION")
    p = ssub.add_parser("list", help="the rules in force")
    p.add_argument("--all", action="store_true", help="also the removed ones")
    p.set_defaults(handler=cmd_reserves_list)
    p = ssub.add_parser("set", help="set values of a rule; values not given keep the rule's current ones")
    p.add_argument("--placement", help="placement name, or * for every placement (required without --from-file)")
    p.add_argument("--country", default=ANY, help="ISO country code, or * for every country (default *)")
    p.add_argument("--reserve-micros", type=int, help="reserve per impression, micro-units (1000 = $1 CPM)")
    p.add_argument("--quality-floor-micros", type=int, help="quality floor per impression, micro-units")
    p.add_argument("--default-quality-micros", type=int,
                   help="quality term of ads without an estimate of their own, micro-units (may be negative)")
    p.add_argument("--from-file", metavar="FILE",
                   help='set every rule of a JSON file instead: {"rules": [{"placement", "country", "reserve_micros"'
                        '}, ...]}, as pipelines.auction_replay --recommend writes recommended_reserves.json (all '
                        "are checked before any is written)")
    p.add_argument("--operator", help="who sets it (default ADSERVE_OPERATOR, else your login name)")
    p.set_defaults(handler=cmd_reserves_set)
    p = ssub.add_parser("unset", help="remove a rule: requests fall back to the less specific ones")
    p.add_argument("--placement", required=True)
    p.add_argument("--country", default=ANY)
    p.add_argument("--operator", help="who removes it (default ADSERVE_OPERATOR, else your login name)")
    p.set_defaults(handler=cmd_reserves_unset)
