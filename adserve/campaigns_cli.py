"""`adserve campaigns` and `adserve advertisers`: the campaign store from the command line.

Writes go through the same validation as the advertiser API (core.campaigns)
and commit with a new version; the ad servers see them through CDC and the
index builder, like any API change.

  adserve advertisers create NAME            prints an API key for the advertiser
  adserve advertisers keys ADVERTISER_ID     its keys (ids, first characters, created, revoked)
  adserve advertisers revoke-key ADVERTISER_ID KEY_ID|--all
  adserve advertisers rotate-key ADVERTISER_ID   a new key; every older one revoked at once
  adserve advertisers migrate                 the campaign store's migrations not applied yet
  adserve campaigns create FILE.yaml|json [--approve-as NAME]   an advertiser's campaigns and ads:
      advertiser: Acme
      campaigns:
        - {name: Winter sale, bid_type: CPC, daily_budget_micros: 50000000, timezone: America/New_York,
           ads: [{creative_ref: "cdn://a.png", landing_url: "https://acme.example/", bid_micros: 1500000,
                  targeting: {location: [US, CA], interest: [hiking]}}]}
  adserve campaigns pause|resume CAMPAIGN_ID
  adserve campaigns set-budget CAMPAIGN_ID MICROS
  adserve campaigns set-bid AD_ID MICROS
  adserve campaigns bulk-load N [--campaigns-per 5] [--ads-per 20] [--approve-as NAME]   synthetic advertisers

New ads wait for review (`adserve ads review`); --approve-as approves the ads it creates in the same step,
recording NAME as their reviewer."""
from __future__ import annotations

import argparse
import asyncio
import json
import random
from pathlib import Path
from typing import Any

import yaml

from adserve import provision_cli
from core.campaigns import InvalidField, validate_ad, validate_campaign
from infra.platform import PlatformSettings

def _store():
    from serving.advertiser.store import CampaignStore

    return CampaignStore(PlatformSettings.from_env().postgres_dsn, size=1)


async def _with_store(fn):
    store = await _store().open()
    try:
        return await fn(store)
    finally:
        await store.close()


def load_file(path: str) -> dict[str, Any]:
    text = Path(path).read_text()
    data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    if not isinstance(data, dict) or not isinstance(data.get("advertiser"), str) \
            or not isinstance(data.get("campaigns"), list):
        raise InvalidField("file", "needs 'advertiser: NAME' and 'campaigns: [...]'")
    return data


def create(path: str, approved_by: str | None = None) -> dict[str, Any]:
    data = load_file(path)
    # validate everything before writing anything
    plans = []
    for i, c in enumerate(data["campaigns"]):
        if not isinstance(c, dict):
            raise InvalidField(f"campaigns[{i}]", "must be an object")
        ads = c.get("ads", [])
        try:
            fields = validate_campaign({k: v for k, v in c.items() if k != "ads"})
            ad_fields = [validate_ad(a, creating=True) for a in ads]
        except InvalidField as e:
            raise InvalidField(f"campaigns[{i}].{e.field}", str(e).split(": ", 1)[-1]) from None
        plans.append((fields, ad_fields))

    async def run(store):
        advertiser_id, key = await store.create_advertiser(data["advertiser"])
        created = []
        for fields, ads in plans:
            campaign = await store.create_campaign(advertiser_id, fields)
            ad_ids = [(await store.create_ad(advertiser_id, campaign["campaign_id"], a))["ad_id"] for a in ads]
            if approved_by:
                for ad_id in ad_ids:
                    await store.review_ad(ad_id, "APPROVED", approved_by)
            created.append({"campaign_id": campaign["campaign_id"], "ad_ids": ad_ids})
        return {"advertiser_id": advertiser_id, "api_key": key, "campaigns": created,
                "review": f"approved by {approved_by}" if approved_by else "PENDING: `adserve ads review list`"}
    return asyncio.run(_with_store(run))


async def _owner(store, table: str, key: str, row_id: int) -> int:
    async def tx(conn):
        row = await (await conn.execute(f"SELECT advertiser_id FROM {table} WHERE {key} = %s", (row_id,))).fetchone()
        return row["advertiser_id"] if row else None
    owner = await store._run(tx)  # noqa: SLF001 - the store's own transaction helper
    if owner is None:
        raise InvalidField(key, f"no {table[:-1]} {row_id}")
    return owner


def change_campaign(campaign_id: int, payload: dict[str, Any]) -> dict[str, Any]:
    async def run(store):
        owner = await _owner(store, "campaigns", "campaign_id", campaign_id)
        from serving.advertiser.store import with_ms_times

        existing = await store.get_campaign(owner, campaign_id)
        fields = validate_campaign(payload, existing=with_ms_times(existing))
        return await store.update_campaign(owner, campaign_id, fields)
    return asyncio.run(_with_store(run))


def change_ad(ad_id: int, payload: dict[str, Any]) -> dict[str, Any]:
    async def run(store):
        owner = await _owner(store, "ads", "ad_id", ad_id)
        return await store.update_ad(owner, ad_id, validate_ad(payload, creating=False))
    return asyncio.run(_with_store(run))


def bulk_load(advertisers: int, campaigns_per: int, ads_per: int, seed: int = 1, log=print,
              approved_by: str | None = None) -> tuple[int, int]:
    rng = random.Random(seed)

    async def run(store):
        from sim.progress import Progress
        from sim.synthetic import synthetic_campaign  # numpy and the serving index: only when loading

        total = [0, 0]
        progress = Progress("advertisers", advertisers)
        for a in range(advertisers):
            advertiser_id, _ = await store.create_advertiser(f"synthetic-{seed}-{a}")
            plans = [synthetic_campaign(rng, ads_per) for _ in range(campaigns_per)]
            c, n = await store.bulk_load(advertiser_id, [p[0] for p in plans], [p[1] for p in plans],
                                         approved_by=approved_by)
            total[0] += c
            total[1] += n
            progress.update(a + 1)
        progress.close()
        return tuple(total)
    return asyncio.run(_with_store(run))


def register(sub) -> None:
    a = sub.add_parser("advertisers", help="advertisers and their API keys")
    asub = a.add_subparsers(dest="action", required=True)
    p = asub.add_parser("create", help="create an advertiser (or reuse one of that name) and print an API key")
    p.add_argument("name")
    p.set_defaults(handler=cmd_advertisers_create)
    p = asub.add_parser("keys", help="an advertiser's API keys: ids, first characters, created and revoked")
    p.add_argument("advertiser_id", type=int)
    p.set_defaults(handler=cmd_keys)
    p = asub.add_parser("revoke-key", help="revoke an API key (or all of them): refused from the next request on")
    p.add_argument("advertiser_id", type=int)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("key_id", type=int, nargs="?", help="the key's id (`adserve advertisers keys`)")
    which.add_argument("--all", action="store_true", help="every active key of the advertiser")
    p.add_argument("--operator", help="who revokes it (default ADSERVE_OPERATOR, else your login name)")
    p.set_defaults(handler=cmd_revoke_key)
    p = asub.add_parser("rotate-key", help="issue a new API key and revoke every older one in the same step")
    p.add_argument("advertiser_id", type=int)
    p.add_argument("--operator", help="who rotates it (default ADSERVE_OPERATOR, else your login name)")
    p.set_defaults(handler=cmd_rotate_key)
    provision_cli.add_migrate(asub)

    c = sub.add_parser("campaigns", help="create and change campaigns in the campaign store",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    csub = c.add_subparsers(dest="action", required=True)
    p = csub.add_parser("create", help="create an advertiser's campaigns and ads from a YAML or JSON file")
    p.add_argument("file")
    p.add_argument("--approve-as", metavar="NAME", help="approve the new ads, recording NAME as their reviewer "
                                                        "(default: they wait for `adserve ads review`)")
    p.set_defaults(handler=cmd_create)
    for name, status in (("pause", "PAUSED"), ("resume", "ACTIVE")):
        p = csub.add_parser(name, help=f"set a campaign's status to {status}")
        p.add_argument("campaign_id", type=int)
        p.set_defaults(handler=cmd_status, status=status)
    p = csub.add_parser("set-budget", help="set a campaign's daily budget (micros)")
    p.add_argument("campaign_id", type=int)
    p.add_argument("micros", type=int)
    p.set_defaults(handler=cmd_budget)
    p = csub.add_parser("set-bid", help="set an ad's bid (micros)")
    p.add_argument("ad_id", type=int)
    p.add_argument("micros", type=int)
    p.set_defaults(handler=cmd_bid)
    p = csub.add_parser("bulk-load", help="load N synthetic advertisers with realistic targeting")
    p.add_argument("advertisers", type=int)
    p.add_argument("--campaigns-per", type=int, default=5, help="campaigns per advertiser (default 5)")
    p.add_argument("--ads-per", type=int, default=20, help="ads per campaign (default 20)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--approve-as", metavar="NAME", help="approve the synthetic ads, recording NAME as their "
                                                        "reviewer (default: they wait for review)")
    p.set_defaults(handler=cmd_bulk)


def _guarded(fn) -> int:
    try:
        result = fn()
    except InvalidField as e:
        print(f"adserve: error: {e}")
        return 2
    print(json.dumps(result, default=str, indent=2))
    return 0


def cmd_advertisers_create(args) -> int:
    async def run(store):
        advertiser_id, key = await store.create_advertiser(args.name)
        return {"advertiser_id": advertiser_id, "api_key": key}
    return _guarded(lambda: asyncio.run(_with_store(run)))


def cmd_keys(args) -> int:
    from serving.advertiser.store import to_json

    return _guarded(lambda: [to_json(r) for r in asyncio.run(_with_store(
        lambda store: store.list_keys(args.advertiser_id)))])


def cmd_revoke_key(args) -> int:
    from adserve.operators_cli import operator_name

    async def run(store):
        revoked = await store.revoke_keys(args.advertiser_id, args.operator or operator_name(),
                                          None if args.all else args.key_id)
        return {"advertiser_id": args.advertiser_id, "revoked_key_ids": revoked}
    return _guarded(lambda: asyncio.run(_with_store(run)))


def cmd_rotate_key(args) -> int:
    from adserve.operators_cli import operator_name

    async def run(store):
        key_id, key, revoked = await store.rotate_key(args.advertiser_id, args.operator or operator_name())
        return {"advertiser_id": args.advertiser_id, "key_id": key_id, "api_key": key, "revoked_key_ids": revoked}
    return _guarded(lambda: asyncio.run(_with_store(run)))


def cmd_create(args) -> int:
    return _guarded(lambda: create(args.file, args.approve_as))


def cmd_status(args) -> int:
    return _guarded(lambda: _brief(change_campaign(args.campaign_id, {"status": args.status})))


def cmd_budget(args) -> int:
    return _guarded(lambda: _brief(change_campaign(args.campaign_id, {"daily_budget_micros": args.micros})))


def cmd_bid(args) -> int:
    return _guarded(lambda: _brief(change_ad(args.ad_id, {"bid_micros": args.micros})))


def cmd_bulk(args) -> int:
    campaigns, ads = bulk_load(args.advertisers, args.campaigns_per, args.ads_per, args.seed,
                               approved_by=args.approve_as)
    print(json.dumps({"advertisers": args.advertisers, "campaigns": campaigns, "ads": ads}))
    return 0


def _brief(row: dict[str, Any] | None) -> dict[str, Any]:
    keep = ("campaign_id", "ad_id", "status", "daily_budget_micros", "bid_micros", "version")
    return {k: v for k, v in (row or {}).items() if k in keep}


def register_snapshots(sub) -> None:
    s = sub.add_parser("snapshots", help="full snapshots of serving.ads and serving.campaigns for fast boots")
    ssub = s.add_subparsers(dest="action", required=True)
    p = ssub.add_parser("write", help="cut a snapshot now, or one every --every seconds",
                        description="Writes snapshot-<ms>/ (Avro container files + offsets.json) under --dir "
                                    "(default ADSERVE_HOME/state/snapshots); keeps the newest 3. Ad servers "
                                    "started with --snapshot-dir boot from the newest.")
    p.add_argument("--dir", help="snapshot folder (default: ADSERVE_HOME/state/snapshots)")
    p.add_argument("--every", type=float, default=0, help="repeat every N seconds (e.g. 3600); 0: once")
    p.set_defaults(handler=cmd_snapshot_write)


def snapshot_dir(value: str | None) -> Path:
    return Path(value) if value else PlatformSettings.from_env().state_dir / "snapshots"


def cmd_snapshot_write(args) -> int:
    import threading

    from serving.snapshots import SnapshotWriterSettings, cut, write_every

    from streams.endpoints import current

    settings = SnapshotWriterSettings(current().kafka.bootstrap_servers, snapshot_dir(args.dir),
                                      args.every or 3600.0)
    print(f"snapshot {cut(settings)} written", flush=True)
    if args.every:
        try:
            write_every(settings, threading.Event())
        except KeyboardInterrupt:
            pass
    return 0
