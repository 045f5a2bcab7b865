"""The live loop benchmark's world (sim.live_world) and its figures (bench.live_loop): what they compute, on
small inputs, without the platform."""
from __future__ import annotations

import numpy as np

from bench.live_loop import _figures, _ne
from bench.live_traffic import Tally, impressions
from core.ad_content import content_embedding
from schemas import topics
from schemas.codec import AvroCodec
from sim.live_world import make_live_world


def test_the_same_seed_makes_the_same_world_and_content_is_the_platforms_own_embedding():
    a, placements = make_live_world(seed=3, advertisers=2, users=50)
    b, _ = make_live_world(seed=3, advertisers=2, users=50)
    assert a.creative_ref == b.creative_ref and np.array_equal(a.ad_logit, b.ad_logit)
    row = 5
    assert np.allclose(a.content[row], content_embedding(a.creative_ref[row], a.landing_url[row], int(a.category[row])))
    assert set(placements) == set(a.campaign_id.tolist())


def test_a_users_taste_moves_the_true_rate_toward_ads_of_matching_content():
    world, _ = make_live_world(seed=3, advertisers=2, users=50)
    rows = np.arange(world.ads)
    user = 0
    affinity = world.content @ world.user_taste[user]
    p = world.true_ctr(user, rows, "feed", 1)
    lifted = world.ad_logit + 3.0 * affinity
    assert np.corrcoef(np.log(p / (1 - p)), lifted)[0, 1] > 0.999
    assert (world.true_ctr(user, rows, "feed", 2) < p).all()  # a lower slot is seen less


def test_the_worlds_serving_records_are_valid_compiled_records():
    world, placements = make_live_world(seed=3, advertisers=2, users=10)
    codec = AvroCodec()
    records = world.serving_records(placements, 1_000)
    for topic, record in records:
        assert codec.decode(codec.encode(topics.record_type(topic), record)) == record
    assert sum(1 for t, _ in records if t == topics.SERVING_ADS) == world.ads


def test_normalised_entropy_is_one_for_the_base_rate_and_lower_for_knowledge():
    y = np.array([1, 0, 0, 0] * 100, dtype=float)
    assert _ne(np.full(len(y), 0.25), y) == 1.0
    assert _ne(np.where(y == 1, 0.9, 0.05), y) < 0.5
    assert _ne(np.zeros(0), np.zeros(0)) is None


def test_figures_join_the_served_log_to_the_users_clicks_by_impression():
    rows, served = [], []
    for i in range(800):
        phase, version = ("priors", "prior-baseline-1") if i < 400 else ("learned", "click-v1")
        clicked = i % 4 == 0
        rows.append((f"r{i}:0", phase, 1, "feed", "US", 1, 0.25, clicked))
        served.append({"event_time": 10_000, "ad_snapshot_version": 4_000 if i >= 400 else 0,
                       "model_version": version,
                       "winners": [{"impression_id": f"r{i}:0", "pctr": 0.25 if i >= 400 else 0.01}]})
    f = _figures(iter(rows), Tally({200: 799, 503: 1}, {}), iter(served), "click-v1")
    assert f["ne_served_learned"] == 1.0 and f["ne_served_priors"] > 1.0
    assert f["hot_swap_failed_requests"] == 1
    assert f["feature_snapshot_age_p99_s"] == 6.0 and f["requests_served_with_a_snapshot"] == 400
    assert f["calibration_min"] == f["calibration_max"] == 1.0 and f["calibration_segments"] == 1  # 100 expected
    assert (f["impressions"], f["clicks"], f["served_records"]) == (800, 200, 800)


def test_impression_lines_read_back_typed_and_a_cut_line_is_skipped(tmp_path):
    path = tmp_path / "impressions-0.tsv"
    path.write_text("r1:0\tpriors\t7\tfeed\tUS\t1\t0.0125\t1\nr2:0\tpriors\t8\tvideo\tGB\t2\t0.5\t0\nr3:0\tpri")
    assert list(impressions([path, tmp_path / "absent.tsv"])) == [
        ("r1:0", "priors", 7, "feed", "US", 1, 0.0125, True), ("r2:0", "priors", 8, "video", "GB", 2, 0.5, False)]
