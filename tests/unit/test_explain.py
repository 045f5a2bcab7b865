"""`adserve explain`: the price of one impression recomputed from the served log with the auction's own
pricing, checked against the logged price, and told in words."""
from __future__ import annotations

import json
from pathlib import Path

import fastavro
import pytest

from adserve.cli import main
from adserve.explain import money, render
from core.auction import Candidate
from core.replay import ImpressionNotFound, explain_winner
from schemas import topics
from schemas.codec import AvroCodec
from streams.served_lookup import find_in_records, request_id_of
from tests.served_records import T0, auction_record, design_example
from tests.unit.test_auction_replay import ENVELOPE

SERVED_RECORD = topics.record_type(topics.AD_SERVED)


def test_the_designs_example_explains_a_dollar_forty_per_click_and_matches_the_log():
    e = explain_winner(design_example(reserve_micros=100), "r1:1")
    assert (e["bid_micros"], e["pctr"], e["quality_micros"], e["own_total_micros"]) == (2_000_000, 0.015, 2_000, 32_000)
    assert e["price_set_by"] == "runner_up"
    assert (e["runner_up"]["ad_id"], e["runner_up"]["total_micros"], e["next_total_micros"]) == (22, 23_000, 23_000)
    assert e["arithmetic"]["numerator_micros"] == 21_000 and e["arithmetic"]["raw_price_micros"] == 1_400_000
    assert (e["recomputed_price_micros"], e["logged_price_micros"], e["price_matches"]) == (1_400_000, 1_400_000, True)
    text = render(e)
    assert "paid $1.40 per click" in text
    assert "$3.00 x 0.8 % - $0.001 = $0.023 per impression" in text
    assert "($0.023 - $0.002) / 1.5 % = $1.40 per click" in text
    assert "equal to the logged price" in text


def test_a_lone_winner_is_explained_by_the_reserve():
    record = auction_record([Candidate(11, 1, "cpc", 2_000_000, [0.015])], reserve_micros=15_000)
    e = explain_winner(record, "r1:1")
    assert (e["price_set_by"], e["runner_up"], e["next_total_micros"]) == ("reserve", None, 15_000)
    assert (e["recomputed_price_micros"], e["price_matches"]) == (1_000_000, True)  # 15,000 / 0.015
    assert "the reserve, $0.015 per impression: no ad of another campaign below yours cleared it" in render(e)


def test_each_slot_is_explained_with_its_own_position_and_a_cpa_price_divides_by_both_rates():
    ads = [Candidate(1, 1, "cpc", 1_000_000, [0.03, 0.01]), Candidate(2, 2, "cpc", 500_000, [0.02, 0.018]),
           Candidate(3, 3, "cpa", 40_000_000, [0.01, 0.012], pcvr=0.05)]
    record = auction_record(ads, [1, 4], reserve_micros=1_000)
    first, second = (explain_winner(record, f"r1:{slot}") for slot in (1, 2))
    assert (first["ad_id"], first["runner_up"]["ad_id"], first["recomputed_price_micros"]) == (1, 3, 666_667)
    assert (second["ad_id"], second["slot_position"], second["pctr"], second["pcvr"]) == (3, 4, 0.012, 0.05)
    assert (second["runner_up"]["ad_id"], second["next_total_micros"]) == (2, 9_000)  # $0.50 x 1.8 %
    assert second["recomputed_price_micros"] == 15_000_000 and second["price_matches"]  # 9,000 / (1.2 % x 5 %)
    assert "/ (1.2 % x 5 %) = $15.00 per conversion" in render(second)


def test_a_price_that_does_not_match_the_log_is_said_clearly():
    record = design_example()
    record["winners"][0]["price_micros"] = 1_399_999
    e = explain_winner(record, "r1:1")
    assert not e["price_matches"]
    assert "MISMATCH" in render(e) and "$1.399999" in render(e)


def test_an_impression_the_record_does_not_hold_is_not_found():
    with pytest.raises(ImpressionNotFound):
        explain_winner(design_example(), "r1:2")
    assert find_in_records([design_example()], "r1:2") is None
    with pytest.raises(ValueError, match="REQUEST_ID:SLOT"):
        request_id_of("r1")


def test_money_reads_like_a_price():
    assert [money(1_400_000), money(32_000), money(-1_000), money(0), money(1_866_667)] == \
        ["$1.40", "$0.032", "-$0.001", "$0.00", "$1.866667"]


def _archive(root: Path, records: list[dict]) -> None:
    codec = AvroCodec()
    folder = root / topics.AD_SERVED / "dt=2027-01-15" / "hr=08"
    folder.mkdir(parents=True)
    with open(folder / "part-0", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(ENVELOPE), [
            {"topic": topics.AD_SERVED, "partition": 0, "offset": i, "event_time": T0, "k": r["request_id"].encode(),
             "v": codec.encode(SERVED_RECORD, r)} for i, r in enumerate(records)])


def test_the_command_finds_the_impression_in_the_archive_and_prints_json(tmp_path, capsys):
    other = auction_record([Candidate(5, 5, "cpc", 1_000_000, [0.01])], request_id="r0")
    _archive(tmp_path, [other, design_example()])
    assert main(["explain", "r1:1", "--archive", str(tmp_path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["ad_id"], printed["recomputed_price_micros"], printed["price_matches"]) == (11, 1_400_000, True)
    assert main(["explain", "r1:1", "--archive", str(tmp_path), "--day", "2027-01-15"]) == 0
    assert "paid $1.40 per click" in capsys.readouterr().out


def test_the_command_exits_non_zero_on_a_mismatch_and_on_a_missing_impression(tmp_path, capsys):
    wrong = design_example()
    wrong["winners"][0]["price_micros"] = 1_500_000
    _archive(tmp_path, [wrong])
    assert main(["explain", "r1:1", "--archive", str(tmp_path)]) == 1
    assert "MISMATCH" in capsys.readouterr().out
    assert main(["explain", "r9:1", "--archive", str(tmp_path)]) == 2
    assert "no served record" in capsys.readouterr().err


def test_a_version_1_record_is_explained_from_its_rounded_runner_up_total_with_a_note():
    from schemas import HISTORY_DIR
    from schemas.codec import SchemaRegistry

    registry = SchemaRegistry.from_directory()
    v1 = registry.by_fingerprint[registry.register(json.loads((HISTORY_DIR / "ad_served.v1.avsc").read_text()))]
    codec = AvroCodec(registry)
    old = codec.decode(codec.encode(v1, design_example()), SERVED_RECORD)
    assert old["reserve_micros"] is None and old["winners"][0]["bid_type"] is None
    e = explain_winner(old, "r1:1")
    assert (e["bid_type"], e["record_version"], e["recomputed_price_micros"], e["price_matches"]) == \
        ("cpc", 1, 1_400_000, True)
    assert "version-1 record" in render(e)
