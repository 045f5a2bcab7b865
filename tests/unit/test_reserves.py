"""Reserve rules: the most specific rule that sets a value wins, newer versions only, operator input checked."""
from __future__ import annotations

import pytest

from core.errors import InvalidField
from core.reserves import (PLATFORM_TERMS, AuctionTerms, ReserveBook, ReserveRule, merged_rule, reserve_rule,
                           reserve_serving_record, validate_rule)


def rule(placement, country, version=1, **values):
    return ReserveRule(placement, country, version=version, **values)


def test_without_rules_every_request_gets_the_platform_terms_and_they_are_never_free():
    assert ReserveBook().terms("feed", "US") == PLATFORM_TERMS
    assert PLATFORM_TERMS.reserve_micros > 0 and PLATFORM_TERMS.default_quality_micros == 0


def test_each_value_comes_from_the_most_specific_rule_that_sets_it():
    book = ReserveBook([rule("*", "*", reserve_micros=50, default_quality_micros=0),
                        rule("feed", "*", reserve_micros=200, quality_floor_micros=-500),
                        rule("*", "US", reserve_micros=300, default_quality_micros=-20),
                        rule("feed", "US", reserve_micros=400)])
    assert book.terms("feed", "US") == AuctionTerms(400, -500, -20)
    assert book.terms("feed", "DE") == AuctionTerms(200, -500, 0)
    assert book.terms("story", "US") == AuctionTerms(300, None, -20)
    assert book.terms("story", "DE") == AuctionTerms(50, None, 0)
    assert book.terms("feed", None) == AuctionTerms(200, -500, 0)  # no country: the country rules do not apply


def test_an_older_or_repeated_version_is_ignored_and_a_removed_rule_falls_back():
    book = ReserveBook([rule("feed", "US", version=2, reserve_micros=400)])
    assert not book.upsert(rule("feed", "US", version=1, reserve_micros=1))
    assert not book.upsert(rule("feed", "US", version=2, reserve_micros=1))
    assert book.terms("feed", "US").reserve_micros == 400
    assert book.upsert(ReserveRule("feed", "US", reserve_micros=400, version=3, removed=True))
    assert book.terms("feed", "US") == PLATFORM_TERMS
    assert not book.upsert(rule("feed", "US", version=2, reserve_micros=7))  # the removal's version still counts


@pytest.mark.parametrize("args, field", [
    (("", "US"), "placement"), (("x" * 65, "US"), "placement"), (("feed", "USA"), "country"),
    (("feed", "1A"), "country"), (("feed", "US"), "reserve_micros"),
])
def test_operator_input_names_the_field(args, field):
    with pytest.raises(InvalidField) as e:
        validate_rule(*args)
    assert e.value.field == field


@pytest.mark.parametrize("values, field", [
    ({"reserve_micros": -1}, "reserve_micros"), ({"reserve_micros": 1.5}, "reserve_micros"),
    ({"reserve_micros": True}, "reserve_micros"), ({"quality_floor_micros": 10**7}, "quality_floor_micros"),
    ({"default_quality_micros": -10**7}, "default_quality_micros"),
])
def test_values_are_integer_micros_in_range(values, field):
    with pytest.raises(InvalidField) as e:
        validate_rule("feed", "US", **values)
    assert e.value.field == field


def test_a_rule_round_trips_through_its_serving_record():
    fields = validate_rule("feed", "us", reserve_micros=250, default_quality_micros=-10)
    assert fields["country"] == "US"
    record = reserve_serving_record({**fields, "version": 3, "set_by": "ops"}, commit_ms=5)
    assert record["event_time"] == 5 and record["quality_floor_micros"] is None and not record["removed"]
    assert reserve_rule(record) == ReserveRule("feed", "US", 250, None, -10, version=3)


def test_setting_one_value_keeps_the_others_unless_the_rule_was_removed():
    existing = {"reserve_micros": 200, "quality_floor_micros": -500, "default_quality_micros": None, "removed": False}
    given = {"reserve_micros": None, "quality_floor_micros": None, "default_quality_micros": 10}
    assert merged_rule(existing, given) == {"reserve_micros": 200, "quality_floor_micros": -500,
                                            "default_quality_micros": 10}
    assert merged_rule({**existing, "removed": True}, given) == {"reserve_micros": None, "quality_floor_micros": None,
                                                                 "default_quality_micros": 10}
    assert merged_rule(None, given)["reserve_micros"] is None


def test_a_rules_file_gives_checked_rules_and_names_the_first_bad_field():
    from core.reserves import rules_from_document

    document = {"min_fill": 0.8, "rules": [{"placement": "feed", "country": "us", "reserve_micros": 20_000},
                                           {"placement": "article", "reserve_micros": 0}]}
    assert rules_from_document(document) == [
        {"placement": "feed", "country": "US", "reserve_micros": 20_000, "quality_floor_micros": None,
         "default_quality_micros": None},
        {"placement": "article", "country": "*", "reserve_micros": 0, "quality_floor_micros": None,
         "default_quality_micros": None}]
    assert rules_from_document(document["rules"]) == rules_from_document(document)
    for bad, field in [({"rules": [document["rules"][0], {"placement": "feed", "reserve_micros": -1}]},
                        "rules[1].reserve_micros"),
                       ({"rules": [{"placement": "feed", "country": "USA", "reserve_micros": 1}]}, "rules[0].country"),
                       ({"rules": [document["rules"][0], document["rules"][0]]}, "rules[1]"),
                       ({"rules": []}, "rules"), ({"rules": ["feed"]}, "rules[0]")]:
        with pytest.raises(InvalidField) as e:
            rules_from_document(bad)
        assert e.value.field == field


def test_reserves_set_from_file_sets_every_rule_of_the_file_and_none_of_a_bad_one(tmp_path, monkeypatch, capsys):
    import asyncio
    import json

    from adserve import operators_cli
    from adserve.cli import build_parser

    written: list[tuple[dict, str]] = []

    class Store:
        async def set_reserve(self, fields, set_by, remove=False):
            written.append((fields, set_by))
            return {**fields, "version": len(written), "set_by": set_by}

    monkeypatch.setattr(operators_cli, "_with_store", lambda fn: asyncio.run(fn(Store())))
    good, bad = tmp_path / "recommended_reserves.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"rules": [{"placement": "feed", "country": "US", "reserve_micros": 20_000},
                                          {"placement": "feed", "country": "*", "reserve_micros": 5_000}]}))
    bad.write_text(json.dumps({"rules": [{"placement": "feed", "country": "US", "reserve_micros": 20_000},
                                         {"placement": "feed", "reserve_micros": "lots"}]}))

    def run(*argv: str) -> int:
        args = build_parser().parse_args(["reserves", "set", *argv])
        return args.handler(args)

    assert run("--from-file", str(bad)) == 2 and written == []
    assert "rules[1].reserve_micros" in capsys.readouterr().out
    assert run("--from-file", str(good), "--placement", "feed") == 2 and written == []
    assert run("--from-file", str(good), "--operator", "ops-anna") == 0
    assert [(f["placement"], f["country"], f["reserve_micros"], who) for f, who in written] == [
        ("feed", "US", 20_000, "ops-anna"), ("feed", "*", 5_000, "ops-anna")]
