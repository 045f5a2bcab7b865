"""The platform's auction terms per placement and country: the reserve, the quality floor and the quality term
of an ad the platform has no estimate for. Pure; it never reads a store or a topic.

Operators write rules (`adserve reserves set`) into the campaign store; the index builder publishes them on
the compacted topic serving.reserves and every ad server keeps them in a `ReserveBook`. A rule names a
placement and a country, either of which may be "*" (any), and sets any of three values; a request takes
each value from the most specific rule that sets it: (placement, country), (placement, *), (*, country),
(*, *), and last the platform's built-in terms (`PLATFORM_TERMS`). docs/decision-engine.md gives the reasons.

  reserve_micros          micro-units per impression (1,000 is $1 CPM). An ad enters a slot only when its bid
                          x action rate reaches it, and its price never falls below it.
  quality_floor_micros    an ad whose quality term is below it cannot win at any price; unset: no floor.
  default_quality_micros  the quality term of every ad the platform has no estimate of its own for."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from core.errors import InvalidField

ANY = "*"
MAX_RESERVE_MICROS = 10**9  # $1,000 per impression: far above any real floor, far below int64 trouble
MAX_QUALITY_MICROS = 1_000_000  # a quality term of +-$1 per impression
PLACEMENT_MAX_LEN = 64  # as an ad request's placement (serving.adserver.request)
_COUNTRY = re.compile(r"^[A-Z]{2}$")


@dataclass(frozen=True)
class AuctionTerms:
    """What one request's auction runs under: its reserve, its quality floor (None: none) and the quality
    term of an ad without an estimate of its own."""

    reserve_micros: int
    quality_floor_micros: int | None
    default_quality_micros: int


# A lone bidder never pays $0: out of the box every impression costs at least $0.10 CPM. Operators replace it
# with a (*, *) rule.
PLATFORM_TERMS = AuctionTerms(reserve_micros=100, quality_floor_micros=None, default_quality_micros=0)


@dataclass(frozen=True)
class ReserveRule:
    """One operator rule (one row of the campaign store's `reserves`; one serving.reserves record)."""

    placement: str
    country: str
    reserve_micros: int | None = None
    quality_floor_micros: int | None = None
    default_quality_micros: int | None = None
    version: int = 1
    removed: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.placement, self.country


VALUE_FIELDS = ("reserve_micros", "quality_floor_micros", "default_quality_micros")


def rule_key(placement: str, country: str) -> str:
    """The record key of a rule on serving.reserves (and its Flink state key)."""
    return f"{placement}|{country}"


class ReserveBook:
    """The rules an ad server holds, and the terms a request resolves to. Rules apply only when their version
    is newer than the one held, so a repeated or reordered record is harmless."""

    def __init__(self, rules: Iterable[ReserveRule] = (), base: AuctionTerms = PLATFORM_TERMS):
        self.base = base
        self._rules: dict[tuple[str, str], ReserveRule] = {}
        self._versions: dict[tuple[str, str], int] = {}
        for rule in rules:
            self.upsert(rule)

    @classmethod
    def fixed(cls, reserve_micros: int, *, quality_floor_micros: int | None = None,
              default_quality_micros: int = 0) -> "ReserveBook":
        """One set of terms for every request (simulators, benchmarks, tests)."""
        return cls(base=AuctionTerms(reserve_micros, quality_floor_micros, default_quality_micros))

    def upsert(self, rule: ReserveRule) -> bool:
        """Apply a rule if it is newer than the one held; a removed rule stops counting. Returns whether it
        applied."""
        if rule.version <= self._versions.get(rule.key, 0):
            return False
        self._versions[rule.key] = rule.version
        if rule.removed:
            self._rules.pop(rule.key, None)
        else:
            self._rules[rule.key] = rule
        return True

    def rules(self) -> list[ReserveRule]:
        return sorted(self._rules.values(), key=lambda r: (r.placement, r.country))

    def terms(self, placement: str, country: str | None) -> AuctionTerms:
        """Each value from the most specific rule that sets it, else the base terms."""
        if not self._rules:
            return self.base
        chain = [(placement, country), (placement, ANY), (ANY, country), (ANY, ANY)] if country else \
            [(placement, ANY), (ANY, ANY)]
        found: dict[str, Any] = {}
        for key in chain:
            rule = self._rules.get(key)  # type: ignore[arg-type]
            if rule is None:
                continue
            for name in VALUE_FIELDS:
                value = getattr(rule, name)
                if value is not None and name not in found:
                    found[name] = value
        if not found:
            return self.base
        return replace(self.base, **found)


# ---------------------------------------------------------------- operator input and the serving record

def _micros(value: Any, field_name: str, low: int, high: int) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidField(field_name, "must be an integer number of micros (1 USD = 1000000)")
    if not low <= value <= high:
        raise InvalidField(field_name, f"must be between {low} and {high}")
    return value


def validate_rule(placement: Any, country: Any, *, reserve_micros: Any = None, quality_floor_micros: Any = None,
                  default_quality_micros: Any = None) -> dict[str, Any]:
    """The columns of a rule an operator sets; raises InvalidField naming the field."""
    if not isinstance(placement, str) or not placement.strip() or len(placement) > PLACEMENT_MAX_LEN:
        raise InvalidField("placement", f'must be a placement name of at most {PLACEMENT_MAX_LEN} characters, '
                                          'or "*" for every placement')
    if not isinstance(country, str) or not (country == ANY or _COUNTRY.match(country.upper())):
        raise InvalidField("country", 'must be a two-letter ISO country code such as US, or "*" for every '
                                        "country")
    fields = {
        "placement": placement.strip(), "country": country.upper(),
        "reserve_micros": _micros(reserve_micros, "reserve_micros", 0, MAX_RESERVE_MICROS),
        "quality_floor_micros": _micros(quality_floor_micros, "quality_floor_micros", -MAX_QUALITY_MICROS,
                                        MAX_QUALITY_MICROS),
        "default_quality_micros": _micros(default_quality_micros, "default_quality_micros", -MAX_QUALITY_MICROS,
                                          MAX_QUALITY_MICROS),
    }
    if all(fields[name] is None for name in VALUE_FIELDS):
        raise InvalidField("reserve_micros", "a rule sets at least one of reserve_micros, quality_floor_micros "
                                               "and default_quality_micros")
    return fields


def rules_from_document(document: Any) -> list[dict[str, Any]]:
    """The rules a file gives `adserve reserves set --from-file`: {"rules": [rule, ...]} (the form
    pipelines.auction_replay --recommend writes; other keys are ignored) or a bare list of rules, each
    {"placement", "country" (default "*"), and any of reserve_micros, quality_floor_micros,
    default_quality_micros}, checked by validate_rule. Every rule is checked before any is written: InvalidField
    naming `rules[i].field`; a (placement, country) given twice is refused too."""
    rules = document.get("rules") if isinstance(document, dict) else document
    if not isinstance(rules, list) or not rules:
        raise InvalidField("rules", 'expected a non-empty list of rules, e.g. {"rules": [{"placement": "feed", '
                                    '"country": "US", "reserve_micros": 20000}]}')
    checked: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict):
            raise InvalidField(f"rules[{i}]", "expected an object with placement, country and values")
        try:
            fields = validate_rule(rule.get("placement"), rule.get("country", ANY),
                                   **{name: rule.get(name) for name in VALUE_FIELDS})
        except InvalidField as e:
            raise InvalidField(f"rules[{i}].{e.field}", str(e).split(": ", 1)[1]) from None
        key = (fields["placement"], fields["country"])
        if key in seen:
            raise InvalidField(f"rules[{i}]", f"placement {key[0]!r} and country {key[1]!r} are given twice")
        seen.add(key)
        checked.append(fields)
    return checked


def merged_rule(existing: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The values a `set` writes: those given, and for the others the rule's current ones (none when the rule
    is new or was removed, so a removed rule does not come back with its old values)."""
    current = existing if existing is not None and not existing.get("removed") else {}
    return {name: fields[name] if fields.get(name) is not None else current.get(name) for name in VALUE_FIELDS}


def reserve_serving_record(row: Mapping[str, Any], commit_ms: int) -> dict[str, Any]:
    """schemas/serving_reserve.avsc from a `reserves` row."""
    def optional(name: str) -> int | None:
        return None if row.get(name) is None else int(row[name])
    return {"placement": row["placement"], "country": row["country"], "version": int(row["version"]),
            "event_time": int(commit_ms), "removed": bool(row.get("removed", False)),
            "reserve_micros": optional("reserve_micros"), "quality_floor_micros": optional("quality_floor_micros"),
            "default_quality_micros": optional("default_quality_micros"), "set_by": row.get("set_by") or ""}


def reserve_rule(record: Mapping[str, Any]) -> ReserveRule:
    """A serving.reserves record as the rule a ReserveBook holds."""
    return ReserveRule(placement=record["placement"], country=record["country"],
                       reserve_micros=record.get("reserve_micros"),
                       quality_floor_micros=record.get("quality_floor_micros"),
                       default_quality_micros=record.get("default_quality_micros"),
                       version=int(record["version"]), removed=bool(record.get("removed", False)))
