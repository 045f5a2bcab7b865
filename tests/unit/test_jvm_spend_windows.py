"""SpendWindows.java counts a spend report once by the one rule of core.spend.SpendDedupe.

Golden vectors: the same budget.spend records (encoded with the project's codec, single-campaign records and
batches of packed columns) and watermarks go through the Java operator's table (SpendWindows.Table, through
the golden driver, no cluster) and through a model of its windows here that reads each record with
`core.spend.spend_items` and whose only de-duplication is `SpendDedupe.first_time`; both must emit the same
rows. A record behind the watermark is not counted by either: it leaves raw, whole, for the job's Python path."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from core.spend import SpendCut, SpendDedupe, batch_records, heartbeat_record, spend_items
from jobs.jvm import run_golden_driver
from schemas import topics
from schemas.codec import AvroCodec, HEADER_LEN

CODEC = AvroCodec()
SPEND_REPORT = topics.record_type(topics.BUDGET_SPEND)
WINDOW_MS, SERVER_WINDOW_MS = 10_000, 1_000  # the table's window sizes (the budget job's)
T0 = 1_700_000_000_000  # a window boundary: T0 % WINDOW_MS == 0


def report(server: str, sequence: int, campaign: int, at_ms: int, spend: int = 1_000, served: int = 1,
           eligible: int = 2, price: int = 500, lease: str | None = None, wants: bool = False) -> dict:
    return {"server_id": server, "sequence": sequence, "campaign_id": campaign, "event_time": at_ms,
            "interval_start": at_ms - 1_000, "expected_spend_micros": spend, "served_ads": served,
            "eligible_requests": eligible, "lease_id": lease, "max_price_micros": price, "wants_slice": wants}


@dataclass
class DedupedWindows:
    """The windows SpendWindows emits, with SpendDedupe deciding what counts (the model these tests pin to)."""

    dedupe: SpendDedupe = field(default_factory=SpendDedupe)
    watermark: int = -(2**63)
    windows: dict[int, list[dict]] = field(default_factory=dict)
    metered: dict[int, list[dict]] = field(default_factory=dict)
    emitted: list[tuple] = field(default_factory=list)

    def offer(self, record: dict, value_hex: str) -> None:
        at_ms = record["event_time"]
        reports = [r for r in spend_items(record) if r["campaign_id"] > 0]
        if at_ms <= self.watermark:
            if reports:
                self.emitted.append(("spend_raw", at_ms, value_hex))
            return
        for r in reports:
            if self.dedupe.first_time(r):  # else a copy of a report already counted
                self.windows.setdefault(at_ms - at_ms % WINDOW_MS + WINDOW_MS, []).append(r)
                if r["lease_id"] is not None or r["wants_slice"] or r.get("released"):
                    self.metered.setdefault(at_ms - at_ms % SERVER_WINDOW_MS + SERVER_WINDOW_MS, []).append(r)

    def advance(self, mark: int) -> None:
        self.watermark = max(self.watermark, mark)
        for end in sorted(e for e in self.metered if e - 1 <= self.watermark):
            for r in self.metered.pop(end):
                self.emitted.append(("server", end - 1, r["campaign_id"], r["server_id"], r["lease_id"],
                                     r["expected_spend_micros"], r["served_ads"], r["eligible_requests"],
                                     r["max_price_micros"], 1, r["wants_slice"], r.get("released", False)))
        for end in sorted(e for e in self.windows if e - 1 <= self.watermark):
            reports = self.windows.pop(end)
            for campaign in sorted({r["campaign_id"] for r in reports}):
                of = [r for r in reports if r["campaign_id"] == campaign]
                self.emitted.append(("window", end - 1, campaign, None, None,
                                     sum(r["expected_spend_micros"] for r in of), sum(r["served_ads"] for r in of),
                                     sum(r["eligible_requests"] for r in of), max(r["max_price_micros"] for r in of),
                                     len({r["server_id"] for r in of}), False, False))


def cut(server: str, sequence: int, at_ms: int, figures: dict[int, tuple], leases: dict[int, str] | None = None,
        wants: set[int] | None = None, released: set[int] | None = None) -> SpendCut:
    """A server's cut: campaign -> (spend, served, eligible, price)."""
    ids = sorted(figures)
    column = [np.array([figures[c][i] for c in ids], t) for i, t in enumerate((np.int64, np.int32, np.int32, np.int64))]
    return SpendCut(server, sequence, at_ms - 1_000, at_ms, np.array(ids, np.int64), column[0], column[1], column[2],
                    column[3], dict(leases or {}), set(wants or ()), set(released or ()))


def batches(spend_cut: SpendCut, partitions: int = 2) -> list[dict]:
    """The cut as an ad server sends it: one batch record per partition (all reach this one table here)."""
    return [record for _, record in batch_records(spend_cut, partitions)]


def _java_rows(answer: list[dict]) -> list[tuple]:
    rows = []
    for item in answer:
        if "raw" in item:
            rows.append(("spend_raw", item["ts"], item["raw"]))
        else:
            kind, campaign, server, lease, spend, served, eligible, price, servers, wants = item["row"][:10]
            released = item["row"][15]
            rows.append((kind, item["ts"], campaign, server, lease, spend, served, eligible, price, servers, wants,
                         released))
    return rows


def both(ops: list) -> tuple[list[tuple], list[tuple]]:
    """(Java's rows, the model's rows) for `ops`: report dicts, raw bytes, or int watermarks."""
    header = CODEC.encode(SPEND_REPORT, report("s", 1, 1, T0))[:HEADER_LEN].hex()
    model, words = DedupedWindows(), []
    for op in ops:
        if isinstance(op, int):
            model.advance(op)
            words.append(f"w:{op}")
        elif isinstance(op, bytes):
            model.emitted.append(("spend_raw", T0, op.hex()))
            words.append(f"r:{T0}:{op.hex()}")
        else:
            value_hex = CODEC.encode(SPEND_REPORT, op).hex()
            model.offer(op, value_hex)
            words.append(f"r:{op['event_time']}:{value_hex}")
    (answer,) = run_golden_driver([f"windows {header} {WINDOW_MS} {SERVER_WINDOW_MS} {' '.join(words)}"])
    return _java_rows(answer), model.emitted


def assert_same_rows(ops: list) -> list[tuple]:
    java, model = both(ops)
    assert sorted(java, key=repr) == sorted(model, key=repr)
    emitted_at = [row[1] for row in java if row[0] != "spend_raw"]
    assert emitted_at == sorted(emitted_at), "windows leave oldest first"
    return java


def test_copies_of_one_report_count_once_in_its_window():
    a = report("s1", 7, 11, T0 + 1_500, spend=2_000)
    rows = assert_same_rows([a, a, report("s1", 8, 11, T0 + 2_000), a, T0 + WINDOW_MS])
    assert [r for r in rows if r[0] == "window"] == [
        ("window", T0 + WINDOW_MS - 1, 11, None, None, 3_000, 2, 4, 500, 1, False, False)]


def test_a_report_is_server_sequence_and_campaign_so_each_differing_part_counts_apart():
    rows = assert_same_rows([report("s1", 7, 11, T0 + 100), report("s2", 7, 11, T0 + 100),
                             report("s1", 7, 12, T0 + 100), report("s1", 8, 11, T0 + 100), T0 + WINDOW_MS])
    assert [(r[2], r[5], r[9]) for r in rows] == [(11, 3_000, 2), (12, 1_000, 1)]


def test_heartbeats_count_nothing_on_time_or_late():
    rows = assert_same_rows([report("s1", 1, 0, T0 + 10), report("s1", 2, 11, T0 + 20), T0 + WINDOW_MS,
                             report("s1", 3, 0, T0 + 30), T0 + 2 * WINDOW_MS])
    assert [r[0] for r in rows] == ["window"]


def test_metered_reports_reach_the_pacer_once_per_report_and_second():
    leased = report("s1", 4, 11, T0 + 300, lease="lease-a")
    wants = report("s2", 4, 11, T0 + 1_300, wants=True, price=900)
    rows = assert_same_rows([leased, wants, leased, wants, T0 + 5_000, T0 + WINDOW_MS])
    assert [(r[0], r[1], r[3]) for r in rows] == [("server", T0 + 999, "s1"), ("server", T0 + 1_999, "s2"),
                                                  ("window", T0 + WINDOW_MS - 1, None)]


def test_a_draining_servers_last_batch_hands_its_slices_back_through_the_pacers_server_rows():
    """A released campaign reaches the pacer per server even with nothing spent and no lease named; a copy of
    the report without the release (the same report sent again) does not take it back."""
    last = cut("s1", 9, T0 + 1_500, {11: (2_000, 1, 1, 700), 12: (0, 0, 0, 0), 13: (500, 1, 1, 100)},
               leases={11: "lease-a"}, released={11, 12})
    records = batches(last, partitions=1)
    again = [dict(r, campaigns=dict(r["campaigns"], released=[])) for r in records]
    rows = assert_same_rows([*records, *again, T0 + WINDOW_MS])
    assert sorted((r[0], r[2], r[4], r[5], r[11]) for r in rows if r[0] == "server") == [
        ("server", 11, "lease-a", 2_000, True), ("server", 12, None, 0, True)]
    assert all(not r[11] for r in rows if r[0] == "window")


def test_a_resend_behind_the_watermark_and_undecodable_bytes_leave_raw_for_the_python_path():
    a = report("s1", 9, 11, T0 + 100)
    rows = assert_same_rows([a, T0 + WINDOW_MS, a, b"\xc3\x01 not a report"])
    assert [r[0] for r in rows] == ["window", "spend_raw", "spend_raw"]


def test_a_batch_counts_each_of_its_campaigns_once_as_single_campaign_records_of_them_would():
    spend_cut = cut("s1", 7, T0 + 1_500, {11: (2_000, 2, 5, 700), 12: (3_000, 1, 4, 900), 13: (0, 0, 9, 100)},
                    leases={12: "lease-b"}, wants={13})
    records = batches(spend_cut)
    assert len(records) == 2 and all(r["campaign_id"] == 0 for r in records)
    as_batches = assert_same_rows([*records, records[0], T0 + WINDOW_MS])
    as_singles = assert_same_rows([*spend_cut.items(), T0 + WINDOW_MS])
    assert sorted(as_batches) == sorted(as_singles)
    assert sorted((r[0], r[2], r[5]) for r in as_batches) == [
        ("server", 12, 3_000), ("server", 13, 0), ("window", 11, 2_000), ("window", 12, 3_000), ("window", 13, 0)]


def test_a_report_sent_once_in_a_batch_and_again_as_a_single_record_counts_once():
    spend_cut = cut("s1", 7, T0 + 1_500, {11: (2_000, 2, 5, 700), 12: (3_000, 1, 4, 900)})
    rows = assert_same_rows([*batches(spend_cut), *spend_cut.items(), T0 + WINDOW_MS])
    assert [(r[2], r[5]) for r in rows] == [(11, 2_000), (12, 3_000)]


def test_a_late_batch_leaves_whole_and_a_late_empty_batch_leaves_nothing():
    on_time = batches(cut("s1", 1, T0 + 100, {11: (1_000, 1, 1, 1), 12: (2_000, 1, 1, 1)}), partitions=1)
    late = batches(cut("s1", 2, T0 + 200, {11: (5_000, 1, 1, 1), 12: (6_000, 1, 1, 1)}), partitions=1)
    empty = batches(SpendCut("s1", 3, T0 + 300, T0 + 300, *(np.zeros(0, t) for t in
                                                            (np.int64, np.int64, np.int32, np.int32, np.int64))))
    rows = assert_same_rows([*on_time, T0 + WINDOW_MS, *late, *empty, heartbeat_record("s1", 4, T0 + 400)])
    assert [r[0] for r in rows] == ["window", "window", "spend_raw"]


def test_a_batch_the_decoder_cannot_read_leaves_raw_whole():
    (record,) = batches(cut("s1", 1, T0 + 100, {11: (1_000, 1, 1, 1), 12: (2_000, 1, 1, 1)}), partitions=1)
    unequal = dict(record, campaigns=dict(record["campaigns"], served_ads=b"\0" * 4))
    rows = assert_same_rows([CODEC.encode(SPEND_REPORT, unequal), T0 + WINDOW_MS])
    assert [r[0] for r in rows] == ["spend_raw"]


def _random_stream(rng: random.Random) -> list:
    """Servers cutting their campaigns once a second under a sequence per cut, sent either as batches (one per
    partition, an empty one the partition's heartbeat) or as one record per campaign, campaign 0 a heartbeat;
    copies of recent records re-sent, and the watermark moving in between."""
    sequences = {f"s{n}": 0 for n in range(3)}
    sent: list[dict] = []
    ops: list = []
    watermark = T0
    for _ in range(60):
        roll = rng.random()
        if roll < 0.3 and sent:
            ops.extend(rng.sample(sent[-8:], k=min(len(sent), rng.randrange(1, 4))))  # resends: the same records
        elif roll < 0.45:
            watermark += rng.randrange(0, 4_000)
            ops.append(watermark)
        else:
            server = rng.choice(sorted(sequences))
            sequences[server] += 1
            campaigns = rng.sample(range(1, 7), k=rng.randrange(0, 5))
            spend_cut = cut(server, sequences[server], watermark + rng.randrange(-500, 6_000),
                            {c: (rng.randrange(0, 5_000), rng.randrange(0, 3), rng.randrange(0, 9),
                                 rng.randrange(0, 2_000)) for c in campaigns},
                            leases={c: "lease-a" for c in campaigns if rng.random() < 0.3},
                            wants={c for c in campaigns if rng.random() < 0.2})
            if rng.random() < 0.5:
                records = batches(spend_cut, partitions=rng.choice([1, 2, 3]))
            else:
                records = spend_cut.items() + [heartbeat_record(server, spend_cut.sequence, spend_cut.event_time)]
            sent.extend(records)
            ops.extend(records)
    return ops + [watermark + 60_000]


def test_random_streams_of_batches_single_reports_resends_and_heartbeats_give_the_same_rows():
    rng = random.Random(20_261_202)
    streams = [_random_stream(rng) for _ in range(6)]
    assert any(isinstance(op, dict) and op.get("campaigns") and op["campaigns"]["campaign_id"] for s in streams
               for op in s) and any(isinstance(op, dict) and op["campaign_id"] > 0 for s in streams for op in s)
    for ops in streams:
        assert_same_rows(ops)
