"""Signed impression/click tokens: what the tracker trusts, and nothing else.

A token is `<payload>.<signature>`, both base64url without padding. The
payload is the claims as compact JSON: impression id, ad, campaign, price in
micros, billing type, landing URL, expiry (ms), the id of the key that
signed it, and the user's pseudonymous key (`TokenKeys.user_key`, empty for an
anonymous request). The signature is HMAC-SHA256 over the payload bytes with that key.

Keys rotate: a `TokenKeys` holds several keys at once, signs with the active
one and verifies with whichever the token names, so tokens signed before a
rotation stay valid until they expire. Verification compares signatures in
constant time (hmac.compare_digest) and checks the expiry. Pure: the clock is
a parameter.

    keys = TokenKeys({"k2": b"...", "k1": b"..."}, active="k2")
    token = keys.sign(TokenClaims("imp-1", 7, 3, 1_400_000, "CLICK", "https://x.test", expires_ms=...))
    claims = keys.verify(token, now_ms)   # raises InvalidToken(reason) if forged, tampered or expired

A click id is the same kind of signed object with other claims (ClickIdClaims: the impression, the ad, the
campaign, when it was served and clicked, a 7-day expiry): the tracker appends it to the landing URL of a
click, and the advertiser sends it back with a conversion. Neither verifies as the other (their claims differ,
and a click id names its kind), so a beacon token cannot report a conversion nor a click id bill a click."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Mapping

from core.errors import AdserveError, InvalidArgument, InvalidSettings

TOKEN_LIFETIME_MS = 3_600_000  # a beacon or click more than an hour after serving is not billed
CLICK_ID_LIFETIME_MS = 7 * 86_400_000  # a conversion reported more than 7 days after its click is refused
CLICK_ID_KIND = "click_id"
BILLING_TYPES = ("IMPRESSION", "CLICK")


class InvalidToken(AdserveError):
    """A token that must not be honoured. `reason` is one of: malformed, unknown_key, bad_signature, expired."""

    def __init__(self, reason: str, detail: str):
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True)
class TokenClaims:
    impression_id: str
    ad_id: int
    campaign_id: int
    price_micros: int
    billing: str  # IMPRESSION or CLICK
    landing_url: str
    expires_ms: int
    key_id: str = ""
    served_ms: int = 0
    # the user as a pseudonym: TokenKeys.user_key of the request's user id (empty for an anonymous request), so
    # the click aggregator's per-user rules work on beacons without any raw user id leaving the ad server
    user_key: str = ""


@dataclass(frozen=True)
class ClickIdClaims:
    """What a click id carries: the clicked impression, for the conversion that may follow."""

    impression_id: str
    ad_id: int
    campaign_id: int
    served_ms: int
    click_ms: int
    expires_ms: int
    key_id: str = ""
    kind: str = CLICK_ID_KIND


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """The bytes of unpadded base64url text; InvalidToken (malformed) unless `text` is exactly what _b64 writes
    for them. A lenient decoder would take several spellings of one token (unused low bits in the last
    character, padding, characters outside the alphabet skipped), so a changed token could still verify."""
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:
        raise InvalidToken("malformed", "the token is not <payload>.<signature> in canonical base64url")
    return data


class TokenKeys:
    """Signing keys by id; `active` signs, every key verifies (two at once while rotating)."""

    def __init__(self, keys: Mapping[str, bytes], active: str):
        if active not in keys:
            raise InvalidSettings(f"active key {active!r} is not among the keys {sorted(keys)}")
        if any(len(k) < 16 for k in keys.values()):
            raise InvalidSettings("token keys must be at least 16 bytes")
        self.keys = dict(keys)
        self.active = active

    @classmethod
    def from_spec(cls, spec: str) -> "TokenKeys":
        """'id1:secret1,id2:secret2' (the first is active), as in ADSERVE_TOKEN_KEYS."""
        pairs = [p.split(":", 1) for p in spec.split(",") if p.strip()]
        if not pairs or any(len(p) != 2 for p in pairs):
            raise InvalidSettings("token keys must look like 'id1:secret1,id2:secret2'")
        return cls({k.strip(): v.strip().encode() for k, v in pairs}, active=pairs[0][0].strip())

    def masked(self) -> str:
        """The key ids without their secrets, for logs: 'k2:***,k1:*** (k2 signs)'."""
        ids = [self.active] + sorted(k for k in self.keys if k != self.active)
        return ",".join(f"{key_id}:***" for key_id in ids) + f" ({self.active} signs)"

    def __repr__(self) -> str:
        return f"TokenKeys({self.masked()})"

    def _sign(self, claims: TokenClaims | ClickIdClaims) -> str:
        body = {**vars(claims), "key_id": self.active}  # every claim is a scalar: no deep copy (asdict)
        payload = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        signature = hmac.new(self.keys[self.active], payload, hashlib.sha256).digest()
        return f"{_b64(payload)}.{_b64(signature)}"

    def user_key(self, user_id: str) -> str:
        """The pseudonymous key of a user id: HMAC-SHA256 of the id under the active signing key, 128 bits in
        hex. Stable while the key is active (one user's clicks count together for the burst rules), unlinkable
        to the id without the key, and unlinkable across a rotation once the old key is retired."""
        digest = hmac.new(self.keys[self.active], b"adserve-user-key\x00" + user_id.encode(), hashlib.sha256)
        return digest.hexdigest()[:32]

    def sign(self, claims: TokenClaims) -> str:
        if claims.billing not in BILLING_TYPES:
            raise InvalidArgument(f"billing must be one of {BILLING_TYPES}, got {claims.billing!r}")
        return self._sign(claims)

    def sign_click_id(self, claims: ClickIdClaims) -> str:
        """A click id for a clicked impression (the tracker's redirect appends it to the landing URL)."""
        return self._sign(claims)

    def verify(self, token: str, now_ms: int) -> TokenClaims:
        """The claims of a beacon or click token; InvalidToken if forged, tampered, unknown-keyed or expired."""
        return self._verify(token, now_ms, TokenClaims)

    def verify_click_id(self, click_id: str, now_ms: int) -> ClickIdClaims:
        """The claims of a click id; InvalidToken as for verify (a beacon token is malformed here)."""
        claims = self._verify(click_id, now_ms, ClickIdClaims)
        if claims.kind != CLICK_ID_KIND:
            raise InvalidToken("malformed", f"not a click id (kind {claims.kind!r})")
        return claims

    def _verify(self, token: str, now_ms: int, kind):
        try:
            payload_text, signature_text = token.split(".")
            payload, signature = _unb64(payload_text), _unb64(signature_text)
            body = json.loads(payload)
            key_id = body["key_id"]
        except (ValueError, KeyError, TypeError) as e:
            raise InvalidToken("malformed", "the token is not <payload>.<signature> in base64url") from e
        key = self.keys.get(key_id) if isinstance(key_id, str) else None
        if key is None:
            raise InvalidToken("unknown_key", f"no key {key_id!r} (retired or never issued)")
        expected = hmac.new(key, payload, hashlib.sha256).digest()
        if not hmac.compare_digest(expected, signature):
            raise InvalidToken("bad_signature", "the signature does not match the claims")
        try:
            claims = kind(**body)
        except TypeError as e:
            raise InvalidToken("malformed", f"unexpected claims: {e}") from e
        if now_ms > claims.expires_ms:
            raise InvalidToken("expired", f"expired {now_ms - claims.expires_ms} ms ago")
        return claims
