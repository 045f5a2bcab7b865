"""`adserve auction` on JSON input: the design's example, and bad input naming the field."""
import json
import subprocess
import sys

import pytest

EXAMPLE = {"slots": [{"position": 1}], "reserve_micros": 0, "candidates": [
    {"ad_id": "A", "campaign_id": "a", "bid_type": "cpc", "bid_micros": 2_000_000, "pctr": [0.015], "pcvr": 0.0,
     "quality_micros": 2_000},
    {"ad_id": "B", "campaign_id": "b", "bid_type": "cpc", "bid_micros": 3_000_000, "pctr": [0.008], "pcvr": 0.0,
     "quality_micros": -1_000}]}


def auction(stdin: str):
    return subprocess.run([sys.executable, "-m", "adserve", "auction", "--input", "-"], input=stdin,
                          capture_output=True, text=True, timeout=60)


def test_the_designs_example_from_json():
    done = auction(json.dumps(EXAMPLE))
    assert done.returncode == 0, done.stderr
    [winner] = json.loads(done.stdout)["winners"]
    assert (winner["slot"], winner["ad_id"], winner["campaign_id"]) == (1, "A", "a")
    assert (winner["price_micros"], winner["billing"], winner["total_value_micros"]) == (1_400_000, "cpc", 32_000)
    assert winner["explanation"]["runner_up_total_value_micros"] == 23_000


def test_reading_a_file(tmp_path):
    path = tmp_path / "auction.json"
    path.write_text(json.dumps(EXAMPLE))
    done = subprocess.run([sys.executable, "-m", "adserve", "auction", "--input", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert json.loads(done.stdout)["winners"][0]["price_micros"] == 1_400_000


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["candidates"][1].update(bid_type="cpx"), "candidates[1].bid_type"),
    (lambda d: d["candidates"][0].update(bid_micros=1.5), "candidates[0].bid_micros"),
    (lambda d: d["candidates"][0].update(pctr=[0.01, 0.02]), "candidates[0].pctr"),
    (lambda d: d["candidates"][0].update(pctr=[1.5]), "candidates[0].pctr[0]"),
    (lambda d: d.update(slots=[]), "slots"),
    (lambda d: d.update(reserve_micros=-1), "reserve_micros"),
    (lambda d: d.update(quality_floor_micros="low"), "quality_floor_micros"),
])
def test_a_bad_field_exits_2_naming_it(mutate, message):
    document = json.loads(json.dumps(EXAMPLE))
    mutate(document)
    done = auction(json.dumps(document))
    assert done.returncode == 2
    assert message in done.stderr


def test_the_quality_floor_and_the_platforms_reserve_apply():
    document = {k: v for k, v in EXAMPLE.items() if k != "reserve_micros"}
    done = auction(json.dumps({**document, "quality_floor_micros": 0}))
    [winner] = json.loads(done.stdout)["winners"]  # B's quality (-1,000) is under the floor: A alone pays the reserve
    assert (winner["ad_id"], winner["price_micros"]) == ("A", 6_667)  # 100 / 0.015, rounded up
    assert winner["explanation"]["reserve_micros"] == 100 and winner["explanation"]["price_set_by"] == "reserve"


def test_bad_json_exits_2():
    done = auction("{not json")
    assert done.returncode == 2 and "not valid JSON" in done.stderr
