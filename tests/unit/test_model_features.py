"""The click model's inputs: FeatureSpec, the vectoriser (training examples and one request), and the
example files' keep rate and split. numpy only (no TensorFlow)."""
from __future__ import annotations

import numpy as np
import pytest

from core.training import keeps_negative
from learning import synthetic
from learning.dataset import (ExamplesInvalid, harmonise_keep_rate, keep_rate_of, read_examples, validation_mask,
                              write_examples)
from serving.model.examples import ExampleTable
from serving.model.features import (AD_NUMERIC, INDEX_INPUTS, FeatureSpec, FeatureMismatch, ad_table, example_inputs,
                                    RequestFacts, packed_request_inputs, request_inputs, unpack)


@pytest.fixture(scope="module")
def day():
    return synthetic.make_day(4_000, seed=1)


@pytest.fixture(scope="module")
def spec(day):
    return FeatureSpec.learn(ExampleTable.from_records(day.examples), day.snapshot)


def test_spec_learns_sorted_user_features_and_vocabularies(spec):
    assert spec.user_features == tuple(sorted([f"emb_{i}" for i in range(8)] + ["activity", "age"]))
    assert spec.placements == ("article", "feed", "video")
    assert spec.countries == ("", "DE", "GB", "US")  # "" is a request without a country
    assert spec.billing_types == ("CLICK", "IMPRESSION")
    assert spec.max_slot_position == 4
    assert spec.ad_embedding_dim == synthetic.DIM


def test_an_unseen_value_lands_in_the_out_of_vocabulary_bucket(spec):
    assert spec.index_of("placements", "podcast") == 0
    assert spec.index_of("placements", "feed") == 2
    assert spec.index_of("countries", None) == spec.index_of("countries", "") == 1


def test_spec_round_trips_through_json(spec, tmp_path):
    spec.save(tmp_path / "feature_spec.json")
    assert FeatureSpec.load(tmp_path / "feature_spec.json") == spec


def test_example_inputs_have_one_row_per_example(day, spec):
    examples = ExampleTable.from_records(day.examples)
    inputs = example_inputs(spec, examples, {day.snapshot.version: ad_table(spec, day.snapshot)})
    n = len(examples)
    assert inputs["user"].shape == (n, 10) and inputs["user"].dtype == np.float32
    assert inputs["ad_embedding"].shape == (n, 8)
    assert inputs["ad_numeric"].shape == (n, len(AD_NUMERIC))
    for name in INDEX_INPUTS:
        assert inputs[name].shape == (n,) and inputs[name].dtype == np.int32
    assert abs(inputs["user"].mean()) < 0.1  # standardised
    assert inputs["ad_numeric"][:, 2].min() == 1.0  # every ad is in the snapshot


def test_a_missing_user_feature_is_zero_before_standardising(spec):
    from serving.model.features import user_matrix

    row = user_matrix(spec, [{"age": 40.0, "unknown_feature": 3.0}])[0]
    i = spec.user_features.index("activity")
    assert row[i] == pytest.approx((0.0 - spec.user_mean[i]) / spec.user_scale[i])


def test_examples_of_a_snapshot_that_is_not_loaded_are_an_error(day, spec):
    examples = ExampleTable.from_records(day.examples)
    with pytest.raises(FeatureMismatch, match="snapshot v1"):
        example_inputs(spec, examples, {})


def test_a_request_is_tiled_candidate_major_over_its_slots_and_padded(day, spec):
    table = ad_table(spec, day.snapshot)
    ad_ids = np.array([1_000, 1_001, 999_999])  # the last one is not in the snapshot
    rows = table.rows(ad_ids)
    assert rows[-1] == -1
    inputs = request_inputs(spec, table, rows, [1, 3], RequestFacts(user_features={"age": 30.0}, placement="podcast",
                                                                   country="US", device="ios"), padded_to=8)
    assert inputs["user"].shape == (8, 10) and inputs["ad_embedding"].shape == (8, 8)
    assert inputs["position"].tolist() == [1, 3, 1, 3, 1, 3, 0, 0]
    assert np.array_equal(inputs["ad_embedding"][0], day.snapshot.embedding[0])
    assert np.array_equal(inputs["ad_embedding"][2], day.snapshot.embedding[1])
    assert not inputs["ad_embedding"][4].any() and inputs["ad_numeric"][4, 2] == 0.0  # the unknown ad
    assert inputs["placement"][:6].tolist() == [0] * 6  # out of vocabulary
    assert inputs["country"][0] == spec.index_of("countries", "US")
    assert not inputs["user"][6:].any()  # padding


def test_a_position_beyond_the_largest_seen_is_clipped(day, spec):
    table = ad_table(spec, day.snapshot)
    inputs = request_inputs(spec, table, np.array([0]), [9], RequestFacts(user_features={}, placement="feed",
                                                                          country=None, device=None))
    assert inputs["position"].tolist() == [spec.max_slot_position]


def test_packed_inputs_unpack_to_the_named_inputs(day, spec):
    table = ad_table(spec, day.snapshot)
    floats, indexes = packed_request_inputs(spec, table, np.array([0, 1]), [1, 2],
                                            RequestFacts(user_features={}, placement="feed", country="DE",
                                                         device="ios"))
    named = unpack(spec, floats, indexes)
    assert set(named) == {"user", "ad_embedding", "ad_numeric", *INDEX_INPUTS}
    assert named["ad_numeric"].shape == (4, 3) and named["device"].shape == (4,)


def test_the_request_path_and_the_training_path_build_the_same_row(day, spec):
    examples = ExampleTable.from_records(day.examples[:1])
    table = ad_table(spec, day.snapshot)
    offline = example_inputs(spec, examples, {day.snapshot.version: table})
    e = day.examples[0]
    online = request_inputs(spec, table, table.rows([e["ad_id"]]), [e["slot_position"]],
                            RequestFacts(user_features=e["user_features"], placement=e["placement"],
                                         country=e["country"], device=e["device"]))
    for name in offline:
        assert np.allclose(offline[name], online[name]), name


def test_a_snapshot_of_another_embedding_width_is_refused(spec):
    snapshot, _ = synthetic.make_snapshot(10)
    snapshot.embedding = snapshot.embedding[:, :4]
    with pytest.raises(FeatureMismatch, match="width 8"):
        ad_table(spec, snapshot)


def test_keep_rate_is_read_from_the_negatives_weight(day):
    assert keep_rate_of(day.examples) == pytest.approx(0.1)
    assert keep_rate_of([e for e in day.examples if e["label"] == 1]) == 1.0


def test_files_of_different_keep_rates_are_brought_to_the_smallest(day):
    full = synthetic.make_day(3_000, seed=2, keep_rate=1.0)
    merged, keep_rate = harmonise_keep_rate([day.examples, full.examples])
    assert keep_rate == pytest.approx(0.1)
    from_full = [e for e in merged if e["impression_id"].startswith("syn2-")]
    negatives = [e for e in from_full if e["label"] == 0]
    assert all(keeps_negative(e["impression_id"], 0.1) and e["sample_weight"] == 10.0 for e in negatives)
    assert len(negatives) == sum(1 for e in full.examples
                                 if e["label"] == 0 and keeps_negative(e["impression_id"], 0.1))
    assert keep_rate_of(merged) == pytest.approx(0.1)


def test_mixed_keep_rates_in_one_file_are_an_error(day):
    odd = dict(next(e for e in day.examples if e["label"] == 0), sample_weight=5.0)
    with pytest.raises(ExamplesInvalid, match="different keep rates"):
        keep_rate_of(day.examples + [odd])


def test_the_split_keeps_a_request_on_one_side_and_is_the_same_every_time():
    ids = [f"r{i // 3}" for i in range(3_000)]
    mask = validation_mask(ids)
    assert np.array_equal(mask, validation_mask(ids))
    assert all(len(set(mask[i: i + 3])) == 1 for i in range(0, 3_000, 3))
    assert 0.05 < mask.mean() < 0.15


def test_examples_round_trip_through_an_avro_file(day, tmp_path):
    write_examples(tmp_path / "examples.avro", day.examples[:50])
    again = read_examples(tmp_path / "examples.avro")
    assert [e["impression_id"] for e in again] == [e["impression_id"] for e in day.examples[:50]]
    assert again[0]["user_features"].keys() == day.examples[0]["user_features"].keys()


def test_a_file_that_is_not_avro_is_an_error_naming_it(tmp_path):
    (tmp_path / "bad.avro").write_bytes(b"not avro")
    with pytest.raises(ExamplesInvalid, match="bad.avro"):
        read_examples(tmp_path / "bad.avro")
