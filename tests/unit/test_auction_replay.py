"""The Beam auction replay on beam.Create: the unchanged rules give back the logged RPM and fill exactly, a
higher reserve lowers fill, and the figures equal core.replay's in one process; with --recommend, the reserve
recommended per placement and country equals core.replay.recommend_reserves' and is written as rules
`adserve reserves set --from-file` applies."""
from __future__ import annotations

import json
import random
from pathlib import Path

import apache_beam as beam
import fastavro
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from core.auction import Candidate
from core.errors import InvalidSettings
from core.replay import ReservePolicy, compare_request, recommend_reserves
from core.reserves import rules_from_document
from pipelines.auction_replay import (RecommendReserves, ReplayServedLog, add_counts, counts_of, figures,
                                      parse_candidate_reserves, parse_reserves, render_recommendations, render_table,
                                      run, summary_of)
from schemas import topics
from schemas.codec import AvroCodec
from tests.served_records import T0, auction_record

PLACEMENTS = ("feed", "article")


def _requests(n: int = 60, seed: int = 7) -> list[dict]:
    """Served records of two placements: 2-30 cpc/cpm/cpa candidates, 1-3 slots, reserves that bind."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        slots = rng.randint(1, 3)
        quality = rng.randint(-2_000, 2_000)  # the placement's default quality, as every ad carries it live
        candidates = [Candidate(1000 * i + j, rng.randint(1, 15), rng.choice(["cpm", "cpc", "cpa"]),
                                rng.randint(200_000, 20_000_000),
                                [round(rng.uniform(0.002, 0.03) / (s + 1), 5) for s in range(slots)],
                                pcvr=round(rng.uniform(0.01, 0.1), 4), quality_micros=quality)
                      for j in range(rng.randint(2, 30))]
        records.append(auction_record(candidates, list(range(1, slots + 1)),
                                      reserve_micros=rng.choice([0, 5_000, 20_000]),
                                      request_id=f"req-{i}", placement=PLACEMENTS[i % 2], now_ms=T0 + i * 1000,
                                      location=rng.choice(["US/CA", "DE/BE"])))
    return records


def _expected(records, policy=ReservePolicy(), weight=1.0) -> list[tuple[str, dict]]:
    sums: dict[str, dict] = {}
    for r in records:
        c = compare_request(r, policy, weight)
        sums[c.placement] = add_counts(sums.get(c.placement, {}), counts_of(c))
    return sorted(sums.items())


def _replayed(records, policy=ReservePolicy(), weight=1.0):
    with TestPipeline() as p:
        got = p | beam.Create(records) | ReplayServedLog(policy, weight)
        assert_that(got, equal_to(_expected(records, policy, weight)))
    return summary_of(_expected(records, policy, weight))


def test_the_unchanged_rules_give_back_the_logged_rpm_and_fill_exactly():
    records = _requests()
    summary = _replayed(records)
    for placement in PLACEMENTS:
        f = summary["placements"][placement]
        assert f["replayed_requests"] == 30 and f["logged_revenue_micros"] > 0
        assert (f["replayed_rpm_micros"], f["replayed_fill_rate"]) == (f["logged_rpm_micros"], f["logged_fill_rate"])
        assert (f["changed_winners"], f["changed_prices"], f["exact_share"]) == (0, 0, 1.0)


def test_a_higher_reserve_lowers_fill_where_it_applies_and_is_exact():
    records = _requests()
    summary = _replayed(records, ReservePolicy(by_placement={"feed": 60_000}))
    feed, article = summary["placements"]["feed"], summary["placements"]["article"]
    assert feed["replayed_fill_rate"] < feed["logged_fill_rate"]
    assert feed["changed_winners"] > 0 and feed["exact_share"] == 1.0
    assert (article["changed_winners"], article["changed_prices"]) == (0, 0)


def test_a_quality_weight_change_is_replayed_and_counted():
    summary = _replayed(_requests(), weight=3.0)
    assert summary["total"]["changed_prices"] + summary["total"]["changed_winners"] > 0


def test_a_request_logged_twice_counts_once_and_exploration_and_version_1_records_are_left_out():
    records = _requests(4)
    explored = auction_record([Candidate(1, 1, "cpc", 1_000_000, [0.02]), Candidate(2, 2, "cpc", 1_000_000, [0.0199])],
                              request_id="explored", placement="feed", exploration_share=1.0)
    version_1 = {k: v for k, v in records[1].items() if k not in ("reserve_micros", "slot_positions")}  # article
    version_1["request_id"] = "old"
    with TestPipeline() as p:
        got = (p | beam.Create(records + records[:2] + [explored, version_1]) | ReplayServedLog(ReservePolicy())
               | beam.MapTuple(lambda placement, counts: (placement, counts["requests"], counts["replayed_requests"],
                                                          counts["exploration_requests"],
                                                          counts["unreplayable_requests"])))
        assert_that(got, equal_to([("feed", 3, 2, 1, 0), ("article", 3, 2, 0, 1)]))


def test_reserve_overrides_name_a_placement_or_a_placement_in_a_country():
    policy = parse_reserves(["feed=30000", "feed/us=40000"], default_micros=1_000)
    assert policy == ReservePolicy(1_000, {"feed": 30_000}, {("feed", "US"): 40_000})
    with pytest.raises(ValueError, match="PLACEMENT=MICROS"):
        parse_reserves(["feed:3"])


def test_figures_derive_rpm_and_fill_from_the_sums():
    counts = add_counts({}, {"replayed_requests": 3, "offered_slots": 4, "logged_filled_slots": 3,
                             "replayed_filled_slots": 2, "logged_revenue_micros": 10, "replayed_revenue_micros": 5,
                             "exact_requests": 3})
    f = figures(counts)
    assert (f["logged_rpm_micros"], f["replayed_rpm_micros"]) == (3_333, 1_667)
    assert (f["logged_fill_rate"], f["replayed_fill_rate"], f["exact_share"]) == (0.75, 0.5, 1.0)


ENVELOPE = {"type": "record", "name": "Envelope", "fields": [
    {"name": "topic", "type": "string"}, {"name": "partition", "type": "int"}, {"name": "offset", "type": "long"},
    {"name": "event_time", "type": "long"}, {"name": "k", "type": ["null", "bytes"]},
    {"name": "v", "type": ["null", "bytes"]}]}


def _archive(root: Path, records: list[dict], day: str = "2027-01-15", corrupt: bool = True) -> None:
    codec = AvroCodec()
    served_type = topics.record_type(topics.AD_SERVED)
    envelopes = [{"topic": topics.AD_SERVED, "partition": 0, "offset": i, "event_time": r["event_time"],
                  "k": r["request_id"].encode(), "v": codec.encode(served_type, r)} for i, r in enumerate(records)]
    if corrupt:
        envelopes.append({"topic": topics.AD_SERVED, "partition": 0, "offset": len(records), "event_time": T0,
                          "k": b"x", "v": b"\xc3\x01 not a record"})
    folder = root / topics.AD_SERVED / f"dt={day}" / "hr=08"
    folder.mkdir(parents=True)
    with open(folder / "part-0", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(ENVELOPE), envelopes)


def test_the_pipeline_reads_the_archive_and_writes_a_summary_and_a_table(tmp_path):
    records = _requests(12)
    _archive(tmp_path / "archive", records)
    summary = run(["--archive", str(tmp_path / "archive"), "--from-day", "2027-01-15", "--reserve", "feed=1000000",
                   "--output", str(tmp_path / "out")], save_main_session=False)
    assert (summary["served_records"], summary["corrupt_records"]) == (12, 1)
    assert summary["placements"]["feed"]["replayed_fill_rate"] == 0.0
    article = summary["placements"]["article"]
    assert article["replayed_rpm_micros"] == article["logged_rpm_micros"]
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == summary
    table = (tmp_path / "out" / "table.txt").read_text()
    assert "feed" in table and "RPM logged" in table and table == render_table(summary)


def test_the_recommendation_on_beam_equals_core_replays_in_one_process_and_counts_each_request_once():
    records = _requests()
    for candidates in (None, [5_000, 20_000, 60_000]):
        expected = sorted(recommend_reserves(records, candidates).items())
        assert {key for key, _ in expected} == {("feed", "US"), ("feed", "DE"), ("article", "US"), ("article", "DE")}
        with TestPipeline() as p:
            got = p | beam.Create(records + records[:5]) | RecommendReserves(candidates)
            assert_that(got, equal_to(expected))


def test_candidate_reserves_are_micros_separated_by_commas_with_no_reserve_always_among_them():
    assert parse_candidate_reserves("20000, 10000,20000") == [0, 10_000, 20_000]
    assert parse_candidate_reserves(None) is None
    for bad in ("10k", "-5", "", "1,,x"):
        with pytest.raises(InvalidSettings, match="--candidate-reserves"):
            parse_candidate_reserves(bad)


@pytest.mark.parametrize("flags", [["--recommend", "--reserve", "feed=1000"], ["--recommend", "--reserve-micros", "5"],
                                   ["--min-fill", "0.5"], ["--candidate-reserves", "0,100"],
                                   ["--recommend", "--min-fill", "1.5"], ["--recommend", "--candidate-reserves", "x"]])
def test_recommendation_flags_that_do_not_fit_together_are_refused(flags, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        run(["--served", str(tmp_path / "none.avro"), *flags, "--output", str(tmp_path / "out")],
            save_main_session=False)
    assert done.value.code == 2 and flags[-2] in capsys.readouterr().err


def test_the_recommendation_writes_rules_the_reserves_command_reads_and_a_table(tmp_path):
    records = _requests(24)
    _archive(tmp_path / "archive", records)
    document = run(["--archive", str(tmp_path / "archive"), "--from-day", "2027-01-15", "--recommend",
                    "--candidate-reserves", "5000,20000,60000", "--min-requests", "6", "--output",
                    str(tmp_path / "out")], save_main_session=False)
    assert json.loads((tmp_path / "out" / "recommended_reserves.json").read_text()) == document
    assert (document["served_records"], document["corrupt_records"]) == (24, 1)
    expected = recommend_reserves(records, [5_000, 20_000, 60_000])
    rows = {(row["placement"], row["country"]): row for row in document["recommendations"]}
    assert set(rows) == set(expected)
    for key, row in rows.items():
        choice = expected[key]
        assert [c["reserve_micros"] for c in row["candidates"]] == [0, 5_000, 20_000, 60_000]
        assert (row["requests"], row["recommended_reserve_micros"], row["revenue_per_mille_gain_pct"]) == \
            (choice.no_reserve.requests, choice.recommended.reserve_micros, choice.revenue_per_mille_gain_pct)
        assert row["fill_rate"] >= row["min_fill_rate"] and row["in_rules"] == (row["requests"] >= 6)
    ruled = [(r["placement"], r["country"], r["recommended_reserve_micros"]) for r in rows.values() if r["in_rules"]]
    assert ruled and [(r["placement"], r["country"], r["reserve_micros"])
                      for r in rules_from_document(document)] == sorted(ruled)
    table = (tmp_path / "out" / "recommended_reserves.txt").read_text()
    assert table == render_recommendations(document) and "<- recommended" in table
