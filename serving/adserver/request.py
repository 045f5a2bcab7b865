"""The ad request: parsing, validation and the gateway's duties (location, consent). Pure.

    POST /v1/ads
    {"request_id": "r1",                       optional: the client's own id, only echoed back as
                                               client_request_id (the server makes the request id that
                                               names the served record and every impression id)
     "user_id": "u42",                         or "device_id"; optional (anonymous)
     "device_id": "6d92078a-...",              the device's advertising id; optional
     "email_sha256": "<64 hex digits>",        the SHA-256 of the signed-in user's normalised email (never the
                                               email: core.audiences); optional
     "consent": {"personalization": true},     false: no profile signal or custom audience becomes a targeting
                                               term, a model feature or a logged feature
     "placement": "feed",
     "slots": [{"position": 1}, {"position": 2}],   1 to 3, distinct positions 1 to MAX_POSITION
     "device": "ios", "language": "en" | ["en", "es"],
     "location": "US/CA/San Francisco" | "ip": "203.0.113.7",
     "page": "https://news.example/article"}

A malformed request raises BadRequest naming the field (the server answers 400)."""
from __future__ import annotations

import ipaddress
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from core.audiences import parse_hash
from core.errors import BadRequest, InvalidField
from core.targeting import request_terms

MAX_SLOTS = 3
MAX_POSITION = 2**31 - 1  # the served log's slot positions are Avro ints: a larger one could not be logged


@dataclass
class AdRequest:
    request_id: str  # made by the server for every request: the served record's id and its impression ids' stem
    user_id: str | None
    personalization: bool
    placement: str
    positions: list[int]
    device: str | None
    languages: list[str]
    location: str | None
    ip: str | None
    page: str | None
    extra: dict[str, Any] = field(default_factory=dict)
    device_id: str | None = None  # matched against custom audiences, with consent only
    email_sha256: str | None = None  # likewise; a SHA-256 in hex, never an email
    client_request_id: str | None = None  # the caller's own id, echoed back and never used as a key


def _string(body: Mapping[str, Any], name: str, *, required: bool = False, max_len: int = 256) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise BadRequest(name, "is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(name, "must be a non-empty string")
    if len(value) > max_len:
        raise BadRequest(name, f"must be at most {max_len} characters")
    return value.strip()


def parse_ad_request(body: Any) -> AdRequest:
    if not isinstance(body, dict):
        raise BadRequest("body", "must be a JSON object")
    placement = _string(body, "placement", required=True, max_len=64)
    slots = body.get("slots")
    if not isinstance(slots, list) or not 1 <= len(slots) <= MAX_SLOTS:
        raise BadRequest("slots", f"must be a list of 1 to {MAX_SLOTS} slots")
    positions = []
    for i, slot in enumerate(slots):
        position = slot.get("position") if isinstance(slot, dict) else None
        if not isinstance(position, int) or isinstance(position, bool) or not 1 <= position <= MAX_POSITION:
            raise BadRequest(f"slots[{i}].position", f"must be an integer from 1 to {MAX_POSITION}")
        if position in positions:
            raise BadRequest(f"slots[{i}].position", f"position {position} appears twice")
        positions.append(position)
    consent = body.get("consent", {})
    if not isinstance(consent, dict) or not isinstance(consent.get("personalization", False), bool):
        raise BadRequest("consent", 'must be an object like {"personalization": true}')
    languages = body.get("language", [])
    if isinstance(languages, str):
        languages = [languages]
    if not isinstance(languages, list) or not all(isinstance(v, str) and v for v in languages) \
            or len(languages) > 5:
        raise BadRequest("language", "must be a language code or a list of up to 5")
    ip = _string(body, "ip", max_len=45)
    if ip is not None:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise BadRequest("ip", f"{ip!r} is not an IP address") from None
    device_id = _string(body, "device_id", max_len=128)
    user_id = _string(body, "user_id", max_len=128) or device_id
    email_sha256 = None
    if body.get("email_sha256") is not None:
        try:
            email_sha256 = parse_hash(body["email_sha256"], "email_sha256")
        except InvalidField as e:
            raise BadRequest(e.field, str(e).split(": ", 1)[-1]) from None
    return AdRequest(
        request_id=uuid.uuid4().hex, client_request_id=_string(body, "request_id", max_len=128),
        user_id=user_id, personalization=bool(consent.get("personalization", False)),
        placement=placement, positions=positions, device=_string(body, "device", max_len=32),
        languages=languages, location=_string(body, "location", max_len=200), ip=ip,
        page=_string(body, "page", max_len=2048), device_id=device_id, email_sha256=email_sha256)


class GeoResolver:
    """Location from an IP address: a table of CIDR -> "COUNTRY/Region/City" (longest prefix wins).

    Load one with from_csv (lines "203.0.113.0/24,US/CA/San Francisco"); the default table is empty,
    so an IP alone leaves the location unknown."""

    def __init__(self, table: Iterable[tuple[str, str]] = ()):
        self.networks = sorted(((ipaddress.ip_network(c, strict=False), loc) for c, loc in table),
                               key=lambda item: -item[0].prefixlen)

    @classmethod
    def from_csv(cls, path: str) -> "GeoResolver":
        rows = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    cidr, _, location = line.partition(",")
                    rows.append((cidr.strip(), location.strip()))
        return cls(rows)

    def locate(self, ip: str) -> str | None:
        address = ipaddress.ip_address(ip)
        for network, location in self.networks:
            if address.version == network.version and address in network:
                return location
        return None


def targeting_terms(request: AdRequest, location: str | None, profile: Mapping[str, list[str]]
                    ) -> dict[str, frozenset[str]]:
    """The request's targeting terms. Context (placement, device, language, location) always counts;
    profile signals (age band, gender, interests, audiences, the profile's locations) only with consent.
    `profile["audiences"]` holds the profile's audiences and the custom audiences the user's hashed ids are
    members of (the caller looks those up only with consent)."""
    locations = [location] if location else []
    attributes: dict[str, Any] = {"placement": request.placement, "device": request.device,
                                  "language": request.languages}
    if request.personalization:
        if not locations:
            locations = profile.get("locations", [])[:3]
        for name, key in (("age_band", "age_band"), ("gender", "gender"), ("interest", "interests"),
                          ("audience", "audiences")):
            values = profile.get(key, [])
            if values:
                attributes[name] = values
    return request_terms(location=locations, **attributes)


# Set by the gateway (infra.gateway): "t=<microseconds since the Unix epoch>" when it had the whole request.
REQUEST_START_HEADER = "X-Request-Start"


def gateway_wait_s(header: str | None, now_s: float) -> float:
    """How long the request already waited before reaching the server (seconds, 0 to 10), from the gateway's
    X-Request-Start header; 0 when the header is absent or unreadable (a direct call). Clocks of one host."""
    if not header or not header.startswith("t="):
        return 0.0
    try:
        started_s = int(header[2:]) / 1_000_000
    except ValueError:
        return 0.0
    return min(10.0, max(0.0, now_s - started_s))
