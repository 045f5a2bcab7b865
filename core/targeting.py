"""Targeting expressions: the advertiser's form, its validation and compiled
form, a request's terms, and the reference matcher.

An expression constrains attributes: OR inside an attribute (any allowed
value), AND across attributes, and exclusions (no excluded value may be
present). An attribute the ad does not constrain matches everyone.
Locations are one attribute with hierarchical values "US", "US/CA",
"US/CA/San Francisco": a request carries every level of its location, so an
ad targeting "US" matches a user in San Francisco.

`matches` is the definition; the serving index must agree with it on every
ad and request (tests/unit/test_targeting_index.py checks that by property
tests). Pure: no I/O."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from core.audiences import uploaded_audience_id
from core.errors import AdserveError, InvalidField

LOCATION = "location"
ATTRIBUTES: tuple[str, ...] = ("location", "age_band", "gender", "language", "device", "placement", "interest",
                               "audience")
AGE_BANDS = frozenset({"13-17", "18-24", "25-34", "35-44", "45-54", "55-64", "65+"})
GENDERS = frozenset({"female", "male", "other"})
DEVICES = frozenset({"ios", "android", "desktop", "tablet", "ctv"})
CLOSED_VOCABULARIES: dict[str, frozenset[str]] = {"age_band": AGE_BANDS, "gender": GENDERS, "device": DEVICES}

# Special categories of personal data (GDPR art. 9) and their usual interest names:
# never targetable, as an attribute or as an interest or audience value.
SENSITIVE_CATEGORIES = frozenset({
    "health", "medical_condition", "religion", "religious_belief", "political_opinion", "politics",
    "ethnicity", "racial_origin", "sexual_orientation", "sex_life", "trade_union", "genetic", "biometric",
})

# Bounds on one ad's targeting, checked where a record is born (the advertiser API, and the index builder when it
# compiles a row written around the API): far below the index's integer widths (a row's term count is a uint16,
# serving.decision.index.MAX_TERMS_PER_ROW) and small enough that the change stream's largest record stays far
# under Kafka Connect's producer limit (infra/platform/cdc.py).
MAX_VALUES_PER_ATTRIBUTE = 1_000
MAX_VALUE_CHARS = 200
MAX_TERMS_PER_AD = 2_000

# Attributes whose clauses make an ad "narrow": retrieval always reads such ads
# completely, so a broad ad with a better static score never crowds them out.
NARROW_ATTRIBUTES = frozenset({"audience"})


class InvalidTargeting(AdserveError):
    """A targeting form that cannot be served; the message says what to change."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"targeting.{field}: {message}")


@dataclass(frozen=True)
class Targeting:
    """A compiled expression: allowed values per constrained attribute, excluded values per attribute."""

    include: Mapping[str, frozenset[str]]
    exclude: Mapping[str, frozenset[str]]

    def clauses(self) -> list[dict[str, Any]]:
        """The expression as serving-record clauses (schemas/serving_ad.avsc TargetingClause)."""
        out = [{"attribute": a, "values": sorted(v), "excluded": False} for a, v in sorted(self.include.items())]
        out += [{"attribute": a, "values": sorted(v), "excluded": True} for a, v in sorted(self.exclude.items())]
        return out

    @classmethod
    def from_clauses(cls, clauses: Iterable[Mapping[str, Any]]) -> "Targeting":
        include: dict[str, frozenset[str]] = {}
        exclude: dict[str, frozenset[str]] = {}
        for clause in clauses:
            target = exclude if clause.get("excluded") else include
            target[clause["attribute"]] = target.get(clause["attribute"], frozenset()) | frozenset(clause["values"])
        return cls(include, exclude)

    @property
    def narrow(self) -> bool:
        return any(a in NARROW_ATTRIBUTES for a in self.include)

    def term_count(self) -> int:
        return sum(map(len, self.include.values())) + sum(map(len, self.exclude.values()))


def _location_values(values: Iterable[str], field: str) -> frozenset[str]:
    out = set()
    for value in values:
        parts = [p.strip() for p in str(value).split("/")]
        if not all(parts) or len(parts) > 3:
            raise InvalidTargeting(field, f"location {value!r} must be COUNTRY, COUNTRY/REGION or "
                                          "COUNTRY/REGION/CITY, e.g. 'US', 'US/CA', 'US/CA/San Francisco'")
        if len(parts[0]) != 2 or not parts[0].isalpha():
            raise InvalidTargeting(field, f"location {value!r} must start with a two-letter ISO country code")
        out.add("/".join([parts[0].upper(), *parts[1:]]))
    return frozenset(out)


def _shown(value: Any, limit: int = 80) -> str:
    """A value in an error message, cut short: a message never echoes a megabyte back."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


def _values(attribute: str, raw: Any, field: str) -> frozenset[str]:
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
        raise InvalidTargeting(field, f"expected a list of values, got {_shown(raw)}")
    raw = list(raw)
    if len(raw) > MAX_VALUES_PER_ATTRIBUTE:
        raise InvalidTargeting(field, f"{len(raw):,} values: an attribute lists at most {MAX_VALUES_PER_ATTRIBUTE:,}"
                                      " (MAX_VALUES_PER_ATTRIBUTE)")
    values = [str(v).strip() for v in raw]
    for value in values:
        if len(value) > MAX_VALUE_CHARS:
            raise InvalidTargeting(field, f"a value of {len(value):,} characters: a value has at most "
                                          f"{MAX_VALUE_CHARS} (MAX_VALUE_CHARS)")
        if not value.isprintable():  # control characters (NUL among them, which PostgreSQL's jsonb refuses)
            raise InvalidTargeting(field, f"{_shown(value)} holds a control character")
    if not values or not all(values):
        raise InvalidTargeting(field, "the allowed set is empty: list at least one value, or remove the "
                                      "attribute to target everyone")
    if attribute == LOCATION:
        return _location_values(values, field)
    lowered = frozenset(v.lower() for v in values) if attribute != "audience" else frozenset(values)
    vocabulary = CLOSED_VOCABULARIES.get(attribute)
    if vocabulary is not None and not lowered <= vocabulary:
        unknown = sorted(lowered - vocabulary)
        raise InvalidTargeting(field, f"unknown value(s) {_shown(unknown)}; use one of {sorted(vocabulary)}")
    if attribute in ("interest", "audience"):
        sensitive = sorted(lowered & SENSITIVE_CATEGORIES)
        if sensitive:
            raise InvalidTargeting(field, f"{sensitive} is a sensitive category and cannot be targeted")
    if attribute == "audience":
        for value in lowered:  # an uploaded audience is "aud-{id}" (core.audiences); the API checks its owner
            try:
                uploaded_audience_id(value)
            except InvalidField as e:
                raise InvalidTargeting(field, str(e).split(": ", 1)[-1]) from None
    return lowered


def compile_targeting(form: Mapping[str, Any]) -> Targeting:
    """Validate the campaign store's targeting form and compile it.

    Form: {"location": ["US", "CA"], "age_band": ["25-34", "35-44"], "interest": ["hiking"],
           "exclude": {"audience": ["existing-customers"]}}. Raises InvalidTargeting naming the field."""
    if not isinstance(form, Mapping):
        raise InvalidTargeting("", "targeting must be an object of attribute -> list of values")

    def section(part: Mapping[str, Any], prefix: str) -> dict[str, frozenset[str]]:
        out: dict[str, frozenset[str]] = {}
        for attribute, raw in part.items():
            field = f"{prefix}{attribute}"
            if attribute in SENSITIVE_CATEGORIES:
                raise InvalidTargeting(field, f"{attribute!r} is a sensitive category and cannot be targeted")
            if attribute not in ATTRIBUTES:
                raise InvalidTargeting(field, f"unknown attribute {attribute!r}; use one of {list(ATTRIBUTES)}")
            out[attribute] = _values(attribute, raw, field)
        return out

    include = section({k: v for k, v in form.items() if k != "exclude"}, "")
    exclude_form = form.get("exclude", {})
    if not isinstance(exclude_form, Mapping):
        raise InvalidTargeting("exclude", "exclude must be an object of attribute -> list of values")
    exclude = section(exclude_form, "exclude.")
    targeting = Targeting(include, exclude)
    if targeting.term_count() > MAX_TERMS_PER_AD:
        raise InvalidTargeting("", f"{targeting.term_count():,} values in all: an ad targets at most "
                                   f"{MAX_TERMS_PER_AD:,} values (MAX_TERMS_PER_AD) across its attributes")
    return targeting


def request_terms(*, location: Iterable[str] = (), **attributes: Iterable[str] | str | None) -> dict[str, frozenset[str]]:
    """A request's targeting terms: every level of each location, and the other attributes' values.

    request_terms(location=["US/CA/San Francisco"], age_band="25-34", interest=["hiking"])"""
    terms: dict[str, frozenset[str]] = {}
    levels = set()
    for value in location:
        parts = str(value).split("/")
        parts[0] = parts[0].upper()
        for depth in range(1, len(parts) + 1):
            levels.add("/".join(parts[:depth]))
    if levels:
        terms[LOCATION] = frozenset(levels)
    for attribute, raw in attributes.items():
        if raw is None:
            continue
        values = [raw] if isinstance(raw, str) else list(raw)
        if values:
            terms[attribute] = frozenset(v if attribute == "audience" else str(v).lower() for v in values)
    return terms


def matches(targeting: Targeting, terms: Mapping[str, frozenset[str]]) -> bool:
    """The definition: every constrained attribute has an allowed value, no excluded value is present."""
    for attribute, allowed in targeting.include.items():
        if not (terms.get(attribute, frozenset()) & allowed):
            return False
    for attribute, banned in targeting.exclude.items():
        if terms.get(attribute, frozenset()) & banned:
            return False
    return True
