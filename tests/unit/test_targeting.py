"""Targeting forms: compilation, validation messages, and the reference matcher."""
import pytest

from core.targeting import InvalidTargeting, Targeting, compile_targeting, matches, request_terms

DESIGN_EXAMPLE = {"location": ["US", "CA"], "age_band": ["25-34", "35-44"], "interest": ["hiking"],
                  "exclude": {"audience": ["existing-customers"]}}


def test_the_designs_example_matches_a_hiker_in_san_francisco():
    targeting = compile_targeting(DESIGN_EXAMPLE)
    user = request_terms(location=["US/CA/San Francisco"], age_band="35-44", interest=["hiking", "jazz"],
                         audience=["newsletter"])
    assert matches(targeting, user)


def test_an_excluded_audience_member_does_not_match():
    targeting = compile_targeting(DESIGN_EXAMPLE)
    user = request_terms(location=["CA/ON/Toronto"], age_band="25-34", interest=["hiking"],
                         audience=["existing-customers"])
    assert not matches(targeting, user)


def test_every_constrained_attribute_must_match():
    targeting = compile_targeting(DESIGN_EXAMPLE)
    assert not matches(targeting, request_terms(location=["US"], age_band="18-24", interest=["hiking"]))
    assert not matches(targeting, request_terms(location=["GB"], age_band="25-34", interest=["hiking"]))
    assert not matches(targeting, request_terms(location=["US"], age_band="25-34"))


def test_a_user_matches_at_every_level_of_its_location():
    city = compile_targeting({"location": ["US/CA/San Francisco"]})
    region = compile_targeting({"location": ["US/CA"]})
    user = request_terms(location=["US/CA/San Francisco"])
    assert matches(city, user) and matches(region, user)
    assert not matches(city, request_terms(location=["US/CA/Los Angeles"]))


def test_no_targeting_matches_everyone():
    assert matches(compile_targeting({}), request_terms())


@pytest.mark.parametrize("form, field, words", [
    ({"colour": ["red"]}, "colour", "unknown attribute"),
    ({"interest": []}, "interest", "allowed set is empty"),
    ({"interest": ["hiking", "health"]}, "interest", "sensitive category"),
    ({"religion": ["any"]}, "religion", "sensitive category"),
    ({"age_band": ["25-35"]}, "age_band", "unknown value"),
    ({"location": ["USA"]}, "location", "two-letter ISO country code"),
    ({"exclude": {"audience": []}}, "exclude.audience", "allowed set is empty"),
    ({"device": "ios"}, "device", "expected a list"),
])
def test_invalid_targeting_is_rejected_with_an_actionable_message(form, field, words):
    with pytest.raises(InvalidTargeting) as err:
        compile_targeting(form)
    assert err.value.field == field
    assert words in str(err.value)


def test_clauses_round_trip_through_the_serving_record_form():
    targeting = compile_targeting(DESIGN_EXAMPLE)
    assert Targeting.from_clauses(targeting.clauses()) == targeting


def test_targeting_is_bounded_in_values_per_attribute_value_length_and_terms_per_ad():
    import pytest

    from core.targeting import MAX_TERMS_PER_AD, MAX_VALUE_CHARS, MAX_VALUES_PER_ATTRIBUTE, InvalidTargeting
    from serving.decision.index import MAX_TERMS_PER_ROW

    assert MAX_VALUES_PER_ATTRIBUTE <= MAX_TERMS_PER_AD < MAX_TERMS_PER_ROW
    with pytest.raises(InvalidTargeting, match="MAX_VALUES_PER_ATTRIBUTE") as many:
        compile_targeting({"interest": [f"i{n}" for n in range(70_000)]})
    assert many.value.field == "interest"
    with pytest.raises(InvalidTargeting, match="MAX_VALUE_CHARS") as long:
        compile_targeting({"interest": ['"' * 500_000]})
    assert long.value.field == "interest" and len(str(long.value)) < 300  # the value is not echoed back
    spread = {"interest": [f"i{n}" for n in range(900)], "location": [f"US/R{n}" for n in range(900)],
              "exclude": {"interest": [f"x{n}" for n in range(201)]}}
    with pytest.raises(InvalidTargeting, match="MAX_TERMS_PER_AD"):
        compile_targeting(spread)
    spread["exclude"]["interest"].pop()
    assert compile_targeting(spread).term_count() == MAX_TERMS_PER_AD
    assert compile_targeting({"interest": ["a" * MAX_VALUE_CHARS]}).include["interest"] == {"a" * MAX_VALUE_CHARS}


def test_the_index_refuses_a_row_wider_than_its_term_count_width_before_writing_anything():
    import numpy as np
    import pytest

    from core.errors import CapacityExceeded
    from serving.decision.index import MAX_TERMS_PER_ROW, AdColumns, TargetingColumns, TargetingIndex

    with pytest.raises(CapacityExceeded, match="65,535"):
        TargetingIndex.from_columns(AdColumns(ad_id=np.array([7]), campaign_id=np.array([1]), version=np.array([1]),
                                              bid_type=np.array([0]), bid_micros=np.array([1]),
                                              quality_micros=np.array([0]), static_score=np.array([1.0]),
                                              ctr_prior=np.array([0.01]), embedding=np.zeros((1, 4), np.float32)),
                                    TargetingColumns(term_keys=[("interest", "a", False)],
                                                     term_counts=np.array([MAX_TERMS_PER_ROW + 1]),
                                                     terms_flat=np.zeros(MAX_TERMS_PER_ROW + 1, np.uint32)))
