"""Property tests of the targeting compiler (core/targeting.py) on arbitrary JSON-like forms, as an advertiser's
request body can carry them: each form compiles, or raises InvalidTargeting whose field is a path into the form
(an attribute, or exclude.<attribute>; "" for a form that is not an object), never another exception. A form
that compiles holds only the attributes it names, each with string values, and compiles again from its own
clauses to the same expression.

Examples per property: the settings below (bounded, for `.ci/run`); raise them with ADSERVE_FUZZ_EXAMPLES."""
from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

from core.targeting import (AGE_BANDS, ATTRIBUTES, DEVICES, GENDERS, SENSITIVE_CATEGORIES, InvalidTargeting,
                            Targeting, compile_targeting)

EXAMPLES = int(os.environ.get("ADSERVE_FUZZ_EXAMPLES", 300))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=os.environ.get("ADSERVE_FUZZ_RANDOM") != "1",
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
# Per attribute: values an advertiser means, values close to them, and values at the edges of the rules
NEAR = {"location": ["US", "us", "US/CA", "US/CA/San Francisco", "USA", "U1", "ÄÖ", "US//SF", "US/CA/SF/x", "/"],
        "age_band": sorted(AGE_BANDS) + ["18-25", "65"], "gender": sorted(GENDERS) + ["Female", "x"],
        "device": sorted(DEVICES) + ["IOS", "phone"], "language": ["en", "EN", "pt-BR"],
        "placement": ["feed", "Feed", "sidebar"], "interest": ["hiking", "Health", *sorted(SENSITIVE_CATEGORIES)[:2]],
        "audience": ["aud-12", "aud-", "aud-0", "aud-x", "AUD-3", "aud-١٢", "aud-" + "9" * 19,
                     "aud-" + "9" * 5000, "loyal-customers"]}
near_values = st.lists(st.one_of(st.sampled_from(sorted({v for vs in NEAR.values() for v in vs} | {"", " "})),
                                 st.text(max_size=12)), max_size=4)
values = st.one_of(near_values, st.lists(json_values, max_size=3), json_values)
attributes = st.one_of(st.sampled_from([*ATTRIBUTES, *sorted(SENSITIVE_CATEGORIES)[:3], "Device", "exclude"]),
                       st.text(max_size=8))
forms = st.one_of(
    st.dictionaries(attributes, values, max_size=4),
    st.dictionaries(attributes, values, max_size=3).flatmap(
        lambda include: st.dictionaries(attributes, values, max_size=3).map(
            lambda exclude: {**include, "exclude": exclude})),
    json_values)


@st.composite
def near_forms(draw) -> dict[str, Any]:
    """Forms of real attributes, each with values near its own rules (included or excluded)."""
    form: dict[str, Any] = {}
    for attribute in draw(st.lists(st.sampled_from(ATTRIBUTES), min_size=1, max_size=3, unique=True)):
        chosen = draw(st.lists(st.sampled_from(NEAR[attribute]), min_size=1, max_size=3))
        (form.setdefault("exclude", {}) if draw(st.booleans()) else form)[attribute] = chosen
    return form


def named_path(form: Any, field: str) -> bool:
    """Whether `field` names a place in the form: "" (the form itself), an attribute, or exclude.<attribute>."""
    if field == "":
        return True
    if not isinstance(form, dict):
        return False
    if field in form:
        return True
    head, _, rest = field.partition(".")
    return head == "exclude" and (rest == "" and "exclude" in form or isinstance(form.get("exclude"), dict)
                                  and rest in form["exclude"])


def compiles_or_names_its_field(form: Any) -> None:
    try:
        compiled = compile_targeting(form)
    except InvalidTargeting as e:
        assert isinstance(e.field, str) and named_path(form, e.field), f"field {e.field!r} is not in the form"
        assert str(e).startswith(f"targeting.{e.field}: ")
        return
    named = {a for a in form if a != "exclude"}
    assert set(compiled.include) <= named and set(compiled.exclude) <= set(form.get("exclude") or {})
    for allowed in [*compiled.include.values(), *compiled.exclude.values()]:
        assert allowed and all(isinstance(v, str) and v for v in allowed)
    assert Targeting.from_clauses(compiled.clauses()) == compiled


@SETTINGS
@given(form=forms)
def test_any_json_form_compiles_or_is_refused_naming_its_field(form):
    compiles_or_names_its_field(form)


@SETTINGS
@given(form=near_forms())
def test_a_form_near_the_rules_compiles_or_is_refused_naming_its_field(form):
    compiles_or_names_its_field(form)
