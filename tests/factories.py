"""Literal test records built field by field, so a test states its data."""
from __future__ import annotations

from typing import Any

BASE_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z, a minute boundary


def ad_event(n: int, *, campaign_id: int, offset_ms: int, event_type: str = "IMPRESSION",
             billing_type: str = "IMPRESSION", price_micros: int = 2_000) -> dict[str, Any]:
    return {
        "event_id": f"evt-{n}",
        "impression_id": f"imp-{n}",
        "event_type": event_type,
        "event_time": BASE_MS + offset_ms,
        "served_time": BASE_MS + offset_ms - 500,
        "campaign_id": campaign_id,
        "ad_id": campaign_id * 100 + 1,
        "price_micros": price_micros,
        "billing_type": billing_type,
        "user_id": f"user-{n % 5}",
        "ip_address": "203.0.113.7",
        "user_agent": "Mozilla/5.0",
        "token_key_id": "k1",
    }


# The smoke job's worked example: two campaigns over three minutes.
# campaign 7 bills impressions at 2,000 micros; campaign 9 bills clicks at 1,500,000 micros.
SMOKE_EVENTS = [
    ad_event(1, campaign_id=7, offset_ms=1_000),
    ad_event(2, campaign_id=7, offset_ms=20_000),
    ad_event(3, campaign_id=7, offset_ms=59_999, event_type="CLICK"),
    ad_event(4, campaign_id=9, offset_ms=5_000, billing_type="CLICK", price_micros=1_500_000),
    ad_event(5, campaign_id=9, offset_ms=6_000, event_type="CLICK", billing_type="CLICK", price_micros=1_500_000),
    ad_event(6, campaign_id=7, offset_ms=60_000),
    ad_event(7, campaign_id=9, offset_ms=61_000, event_type="CLICK", billing_type="CLICK", price_micros=1_500_000),
    ad_event(8, campaign_id=9, offset_ms=62_000, event_type="CLICK", billing_type="CLICK", price_micros=1_500_000),
    ad_event(9, campaign_id=7, offset_ms=125_000),
]

SMOKE_EXPECTED = [
    # (campaign_id, window_start offset, impressions, clicks, billable_micros)
    (7, 0, 2, 1, 4_000),
    (9, 0, 1, 1, 1_500_000),
    (7, 60_000, 1, 0, 2_000),
    (9, 60_000, 0, 2, 3_000_000),
    (7, 120_000, 1, 0, 2_000),
]


def expected_event_counts() -> list[dict[str, Any]]:
    return [
        {"campaign_id": c, "window_start": BASE_MS + w, "event_time": BASE_MS + w + 60_000,
         "impressions": i, "clicks": k, "billable_micros": b}
        for c, w, i, k, b in SMOKE_EXPECTED
    ]


class ServedLogStandIn:
    """The ad server's served log in memory: keeps every record it is handed, never full."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def put(self, key: bytes, record: dict[str, Any]) -> None:
        self.records.append(record)

    def full(self) -> bool:
        return False


def archived_rows(archive, topic: str) -> list[dict]:
    """The archiver's rows of `topic` under `archive` (its dt=*/hr=*/part-* Avro files, in path order): each row
    carries the Kafka record's value bytes in `v`."""
    from pathlib import Path

    import fastavro

    rows: list[dict] = []
    for path in sorted((Path(archive) / topic).glob("dt=*/hr=*/part-*")):
        with open(path, "rb") as f:
            rows.extend(fastavro.reader(f))
    return rows
