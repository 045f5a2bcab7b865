"""Custom audiences: how an id is normalised and hashed, what an upload may hold, and the keys the platform
stores and matches on. Pure: no I/O, no environment read (`salt_from` is given a mapping).

The scheme (docs/storage.md, "Custom audiences"):
- The advertiser normalises each email or device id (`normalise_email`, `normalise_device_id`) and uploads its
  unsalted SHA-256 in hex (`upload_hash`): the industry's usual form, so no secret has to be shared with
  advertisers, and no clear id ever reaches the platform.
- The platform keys every hash with its own secret salt before storing it (`AudienceSalt.member_key`,
  HMAC-SHA256), so what it stores cannot be joined with any other data set of SHA-256 hashes, and a leak of the
  store does not let anyone test a guessed email without the salt.
- At request time the ad server computes the same member keys from what the request carries (`device_id`, or the
  publisher's SHA-256 of the signed-in user's normalised email) and matches on them: never on a clear id.

It must never log, print or return a salt, and never accept a clear email where a hash is expected."""
from __future__ import annotations

import hashlib
import hmac
import re
from typing import Any, Iterable, Mapping

from core.errors import InvalidField, InvalidSettings

# An uploaded audience's targeting value: "aud-{audience_id}" (what `{"audience": [...]}` names).
AUDIENCE_VALUE_PREFIX = "aud-"
MAX_HASHED_IDS_PER_UPLOAD = 10_000  # 10,000 x 67 bytes of JSON stays under the API's 1 MiB body cap
# An audience is matched only once it holds this many distinct members: with a handful of people, targeting plus
# hourly reports would tell an advertiser what one person does (the industry's floor is about a hundred).
MIN_AUDIENCE_MEMBERS = 100
MAX_AUDIENCES_PER_ADVERTISER = 500
MAX_MEMBERS_PER_ADVERTISER = 10_000_000  # over all of an advertiser's audiences (~640 MB of keys in Redis)
MAX_AUDIENCE_NAME_LEN = 200
MIN_SALT_BYTES = 16
SALT_ENV = "ADSERVE_AUDIENCE_SALT"
# Public: only ever used in development mode, like the development token key.
DEVELOPMENT_SALT = "adserve-dev-audience-salt-change-me"
_HEX64 = re.compile(r"[0-9a-f]{64}")


def normalise_email(raw: str) -> str:
    """An email as it is hashed: surrounding whitespace trimmed and lower-cased, nothing else. Dots and "+tags"
    in the local part are kept (removing them is right only for some providers, and an advertiser and the
    platform that disagree on it would never match). Raises InvalidField("email") for no single "@"."""
    email = raw.strip().lower()
    local, at, domain = email.partition("@")
    if not at or not local or not domain or "@" in domain or any(c.isspace() for c in email):
        raise InvalidField("email", f"{raw!r} is not an email address (one '@', no spaces)")
    return email


def normalise_device_id(raw: str) -> str:
    """A device (advertising) id as it is hashed: trimmed and lower-cased, hyphens kept, i.e. the IDFA or GAID
    as the operating system prints it, in lower case. Raises InvalidField("device_id") when empty."""
    device_id = raw.strip().lower()
    if not device_id:
        raise InvalidField("device_id", "is empty")
    return device_id


def upload_hash(normalised_id: str) -> str:
    """What an advertiser uploads for one normalised id: its SHA-256, 64 lower-case hex digits."""
    return hashlib.sha256(normalised_id.encode("utf-8")).hexdigest()


def parse_hash(value: Any, field: str) -> str:
    """One SHA-256 in hex (either case; returned lower-cased), or InvalidField naming `field`. A clear email
    is refused with a message that says to hash it first."""
    if isinstance(value, str) and _HEX64.fullmatch(value.lower()):
        return value.lower()
    if isinstance(value, str) and "@" in value:
        raise InvalidField(field, "looks like a clear email: upload only the SHA-256 (hex) of the normalised "
                                  "email, never the email itself")
    raise InvalidField(field, "must be a SHA-256 in hex (64 hex digits) of a normalised email or device id")


def parse_hashed_ids(body: Any) -> list[str]:
    """The hashes of a members upload ({"hashed_ids": [...]}, 1 to MAX_HASHED_IDS_PER_UPLOAD), deduplicated
    in their order; InvalidField naming the field (`hashed_ids[3]`) for the first one that is not a hash."""
    if not isinstance(body, dict):
        raise InvalidField("body", 'must be a JSON object like {"hashed_ids": ["<sha256 hex>", ...]}')
    unknown = sorted(set(body) - {"hashed_ids"})
    if unknown:
        raise InvalidField(unknown[0], "is not a field of a members upload (only hashed_ids)")
    raw = body.get("hashed_ids")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_HASHED_IDS_PER_UPLOAD:
        raise InvalidField("hashed_ids", f"must be a list of 1 to {MAX_HASHED_IDS_PER_UPLOAD} SHA-256 hashes "
                                         "(hex); send a larger audience in several uploads")
    return list(dict.fromkeys(parse_hash(value, f"hashed_ids[{i}]") for i, value in enumerate(raw)))


def parse_audience_name(body: Any) -> str:
    """The name of a new audience ({"name": "..."}), trimmed; InvalidField naming the field."""
    if not isinstance(body, dict):
        raise InvalidField("body", 'must be a JSON object like {"name": "newsletter subscribers"}')
    unknown = sorted(set(body) - {"name"})
    if unknown:
        raise InvalidField(unknown[0], "is not a field of an audience (only name; upload members with "
                                       "POST /v1/audiences/{id}/members)")
    name = body.get("name")
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_AUDIENCE_NAME_LEN \
            or not name.isprintable():
        raise InvalidField("name", f"must be a non-empty string of at most {MAX_AUDIENCE_NAME_LEN} characters, "
                                   "without control characters")
    return name.strip()


class AudienceSalt:
    """The platform's secret salt. Prints as "***" (core.settings masks it through `masked`)."""

    def __init__(self, secret: bytes):
        if len(secret) < MIN_SALT_BYTES:
            raise InvalidSettings(f"{SALT_ENV} must be at least {MIN_SALT_BYTES} bytes")
        self._secret = secret

    def member_key(self, uploaded_hash: str) -> str:
        """The stored and matched key of one uploaded hash: HMAC-SHA256 under the salt, 64 hex digits."""
        return hmac.new(self._secret, bytes.fromhex(uploaded_hash), hashlib.sha256).hexdigest()

    def masked(self) -> str:
        return "***"

    def __repr__(self) -> str:
        return "AudienceSalt(***)"


def salt_from(environ: Mapping[str, str], *, development: bool) -> AudienceSalt | None:
    """The salt ADSERVE_AUDIENCE_SALT holds; the public development salt only in development mode; else None
    (custom audiences are then off: nothing is uploaded or matched)."""
    secret = environ.get(SALT_ENV, "").strip()
    if secret:
        return AudienceSalt(secret.encode("utf-8"))
    return AudienceSalt(DEVELOPMENT_SALT.encode("utf-8")) if development else None


def request_member_keys(salt: AudienceSalt, *, device_id: str | None, email_sha256: str | None) -> list[str]:
    """The member keys of a request's ids: its device id (normalised and hashed here) and the publisher's
    SHA-256 of the user's normalised email (already a hash: never an email)."""
    hashes = []
    if device_id and device_id.strip():  # never raises: an id of any other shape simply matches nothing
        hashes.append(upload_hash(normalise_device_id(device_id)))
    if email_sha256:
        hashes.append(email_sha256)
    return list(dict.fromkeys(salt.member_key(h) for h in hashes))


def audience_value(audience_id: int) -> str:
    """The targeting value of an uploaded audience: "aud-12"."""
    return f"{AUDIENCE_VALUE_PREFIX}{int(audience_id)}"


def uploaded_audience_id(value: str) -> int | None:
    """The audience id an "aud-{id}" targeting value names; None for any other audience value (an audience the
    profile system assigns). Raises InvalidField("audience") for "aud-" followed by anything but an id."""
    if not value.startswith(AUDIENCE_VALUE_PREFIX):
        return None
    digits = value[len(AUDIENCE_VALUE_PREFIX):]
    # at most 18 digits: an id is a PostgreSQL bigint, and int() of a longer string may refuse (4,300 digits)
    if not digits.isdigit() or not digits.isascii() or len(digits) > 18 or int(digits) < 1:
        raise InvalidField("audience", f"{value!r}: an uploaded audience is named 'aud-<audience_id>', "
                                       "e.g. 'aud-12'")
    return int(digits)


def named_audience_ids(targeting: Mapping[str, Any]) -> set[int]:
    """Every uploaded audience a (validated) targeting form names, included or excluded."""
    sections: Iterable[Mapping[str, Any]] = (targeting, targeting.get("exclude") or {})
    ids = set()
    for section in sections:
        for value in section.get("audience") or ():
            audience_id = uploaded_audience_id(str(value).strip())
            if audience_id is not None:
                ids.add(audience_id)
    return ids


def audience_serves(member_count: int) -> bool:
    """Whether an audience of this many members is matched (MIN_AUDIENCE_MEMBERS)."""
    return member_count >= MIN_AUDIENCE_MEMBERS


def matching_change(live: bool, member_count: int, *, removing: bool) -> str:
    """What the ad servers' membership sets (Redis) need after an upload or a removal committed, given whether the
    audience is matched now (`live`) and its member count after the change:
    "link_all" (it reached the minimum: every member becomes matchable), "link_upload" (already matched: the
    upload's members too), "unlink_upload" (still matched: the removed members stop matching), "unlink_all" (it
    fell under the minimum: no member matches any more), or "none" (under the minimum and not matched)."""
    serves = audience_serves(member_count)
    if live and not serves:
        return "unlink_all"
    if not serves:
        return "none"
    if removing:
        return "unlink_upload" if live else "link_all"
    return "link_upload" if live else "link_all"


def check_member_quota(advertiser_members: int, adding: int) -> None:
    """Refuse an upload that could take the advertiser past MAX_MEMBERS_PER_ADVERTISER (InvalidField hashed_ids)."""
    if advertiser_members + adding > MAX_MEMBERS_PER_ADVERTISER:
        raise InvalidField("hashed_ids", f"your audiences hold {advertiser_members:,} members; {adding:,} more would "
                                         f"pass the quota of {MAX_MEMBERS_PER_ADVERTISER:,} "
                                         "(MAX_MEMBERS_PER_ADVERTISER): remove members or audiences first")
