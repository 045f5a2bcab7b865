"""The budget job's state survives a schema change: PacerState is kept in Flink state as the project's Avro
record (schemas/pacer_state.avsc) framed with its writer schema's fingerprint, so a new build reads the state a
savepoint of an older build holds, as long as the registry knows that older version (schemas/history) and every
added field has a default.

tests/unit/state_bytes/ holds state bytes written by each released version of the schema (pacer_state.vN.hex):
each must still decode under the current schema to the same campaign state. A change to pacer_state.avsc
therefore needs its previous version copied to schemas/history/pacer_state.vN.avsc (the bytes below then name
an unknown fingerprint otherwise) and new bytes written by the new version."""
from __future__ import annotations

import copy
import json
from dataclasses import fields
from pathlib import Path

import pytest

from core import budget
from core.budget import PacerState, Slice, Window
from core.errors import CorruptRecord
from schemas import HISTORY_DIR, SCHEMA_DIR
from schemas.codec import HEADER_LEN, AvroCodec, SchemaRegistry, schema_fingerprint, default_registry

STATE_BYTES = Path(__file__).resolve().parent / "state_bytes"
T0 = 1_767_614_400_000  # 2026-01-05 12:00:00 UTC

# The campaign whose state each file under state_bytes/ holds, as its version wrote it.
WRITTEN = PacerState(
    campaign_id=1001, timezone="America/New_York", bid_type="CPA", status="ACTIVE", budget_micros=250_000_000,
    shape=[0.5, 1.0, 2.0, 1.5], budget_day="2026-01-05", plan_budget_micros=250_000_000, plan_anchor_minute=420.5,
    plan_anchor_spend_micros=12_000_000, participation_probability=0.625, bid_multiplier=1.125,
    reported_today_micros=40_000_000, windows=[Window(T0, 3_000_000, 30, 41, 2), Window(T0 + 10_000, 0, 0, 7, 1)],
    billed_micros=38_500_000, billed_until_ms=T0 - 60_000, invalid_credit_micros=250_000,
    expired_unreported=[Window(T0 - 5_000, 1_000_000, 0, 0, 0)],
    slices=[Slice("lease-1001-7", "ad-server-3", 5_000_000, 1_250_000, T0 + 30_000)], lease_counter=7,
    peak_minute_micros=900_000, click_price_micros=1_400_000, impression_charge_micros=0,
    p_today=[0.5, 0.625], p_yesterday=[0.25], last_state="PACING", last_p=0.625, last_emit_ms=T0,
    last_step_ms=T0, delivery_limit="BUDGET", spend_per_server_s_micros=15_000, luck_absorbed_micros=-20_000,
    level_spend_micros=39_000_000, level_reported_micros=40_000_000, placements=["feed", "video"],
    ad_bid_micros=2_000_000, forecast_pending=False, first_eligible_ms=T0 - 3_600_000)


def _files() -> list[Path]:
    return sorted(STATE_BYTES.glob("pacer_state.v*.hex"))


def _fingerprint(data: bytes) -> bytes:
    return data[2:HEADER_LEN]


def test_state_bytes_of_the_current_schema_are_kept_for_the_versions_to_come():
    current = schema_fingerprint(default_registry().schema("PacerState"))
    written = [_fingerprint(bytes.fromhex(p.read_text().strip())) for p in _files()]
    assert current in written, (
        "schemas/pacer_state.avsc changed: copy its previous version to schemas/history/pacer_state.vN.avsc and "
        "add the state bytes of the new version (tests/unit/state_bytes/pacer_state.vN+1.hex, written by "
        "AvroCodec().encode('PacerState', budget.to_record(WRITTEN)))")


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.name)
def test_state_written_by_every_released_schema_reads_back_under_the_current_one(path):
    state = budget.from_record(AvroCodec().decode(bytes.fromhex(path.read_text().strip()), "PacerState"))
    assert state == WRITTEN


def _evolved_schema(**added) -> dict:
    """The current PacerState schema with fields added (a next version of it)."""
    schema = copy.deepcopy(json.loads((SCHEMA_DIR / "pacer_state.avsc").read_text()))
    schema["fields"] += [dict(field, doc="added in a later version") for field in added.values()]
    return schema


def _registry_after(next_schema: dict) -> SchemaRegistry:
    """A registry whose current PacerState is `next_schema`, with today's schemas as history."""
    registry = SchemaRegistry.from_directory(SCHEMA_DIR, HISTORY_DIR)
    registry.register(json.loads((SCHEMA_DIR / "pacer_state.avsc").read_text()), current=False)
    registry.register(next_schema, current=True)
    return registry


def test_a_field_added_with_a_default_reads_as_its_default_from_older_state():
    old_bytes = bytes.fromhex(_files()[-1].read_text().strip())
    registry = _registry_after(_evolved_schema(cap={"name": "hourly_cap_micros", "type": "long", "default": 0}))
    record = AvroCodec(registry).decode(old_bytes, "PacerState")
    assert record["hourly_cap_micros"] == 0
    assert {k: v for k, v in record.items() if k != "hourly_cap_micros"} == budget.to_record(WRITTEN)


def test_a_field_added_without_a_default_cannot_read_older_state_and_says_so():
    old_bytes = bytes.fromhex(_files()[-1].read_text().strip())
    registry = _registry_after(_evolved_schema(cap={"name": "hourly_cap_micros", "type": "long"}))
    with pytest.raises(CorruptRecord, match="hourly_cap_micros"):
        AvroCodec(registry).decode(old_bytes, "PacerState")


def test_a_state_field_of_core_is_a_field_of_the_schema():
    schema_fields = {f["name"] for f in json.loads((SCHEMA_DIR / "pacer_state.avsc").read_text())["fields"]}
    assert {f.name for f in fields(PacerState)} == schema_fields
