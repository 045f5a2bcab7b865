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
