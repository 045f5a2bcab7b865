"""Signed impression/click tokens: what the tracker trusts, and nothing else.

A token is `<payload>.<signature>`, both base64url without padding. The
payload is the claims as compact JSON: impression id, ad, campaign, price in
micros, billing type, landing URL, expiry (ms) and the id of the key that
signed it. The signature is HMAC-SHA256 over the payload bytes with that key.

Keys rotate: a `TokenKeys` holds several keys at once, signs with the active
one and verifies with whichever the token names, so tokens signed before a
rotation stay valid until they expire. Verification compares signatures in
constant time (hmac.compare_digest) and checks the expiry. Pure: the clock is
a parameter.

    keys = TokenKeys({"k2": b"...", "k1": b"..."}, active="k2")
    token = keys.sign(TokenClaims("imp-1", 7, 3, 1_400_000, "CLICK", "https://x.test", expires_ms=...))
    claims = keys.verify(token, now_ms)   # raises InvalidToken(reason) if forged, tampered or expired"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import asdict, dataclass
from typing import Mapping

from core.errors import AdserveError

TOKEN_LIFETIME_MS = 3_600_000  # a beacon or click more than an hour after serving is not billed
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


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenKeys:
    """Signing keys by id; `active` signs, every key verifies (two at once while rotating)."""

    def __init__(self, keys: Mapping[str, bytes], active: str):
        if active not in keys:
            raise ValueError(f"active key {active!r} is not among the keys {sorted(keys)}")
        if any(len(k) < 16 for k in keys.values()):
            raise ValueError("token keys must be at least 16 bytes")
        self.keys = dict(keys)
        self.active = active

    @classmethod
    def from_spec(cls, spec: str) -> "TokenKeys":
        """'id1:secret1,id2:secret2' (the first is active), as in ADSERVE_TOKEN_KEYS."""
        pairs = [p.split(":", 1) for p in spec.split(",") if p.strip()]
        if not pairs or any(len(p) != 2 for p in pairs):
            raise ValueError("token keys must look like 'id1:secret1,id2:secret2'")
        return cls({k.strip(): v.strip().encode() for k, v in pairs}, active=pairs[0][0].strip())

    def sign(self, claims: TokenClaims) -> str:
        if claims.billing not in BILLING_TYPES:
            raise ValueError(f"billing must be one of {BILLING_TYPES}, got {claims.billing!r}")
        body = {**asdict(claims), "key_id": self.active}
        payload = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        signature = hmac.new(self.keys[self.active], payload, hashlib.sha256).digest()
        return f"{_b64(payload)}.{_b64(signature)}"

    def verify(self, token: str, now_ms: int) -> TokenClaims:
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
            claims = TokenClaims(**body)
        except TypeError as e:
            raise InvalidToken("malformed", f"unexpected claims: {e}") from e
        if now_ms > claims.expires_ms:
            raise InvalidToken("expired", f"expired {now_ms - claims.expires_ms} ms ago")
        return claims
