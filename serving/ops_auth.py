"""The operators' bearer token: what guards the servers' debug endpoints.

A server started with ADSERVE_OPS_TOKEN set answers its operator-only endpoints (the ad server's
GET /debug/timings) to `Authorization: Bearer <that token>` and 401 to anything else; without it they are off
(404). The token is compared in constant time and never printed."""
from __future__ import annotations

import hmac
import os
from typing import Mapping

from core.errors import InvalidSettings

OPS_TOKEN_ENV = "ADSERVE_OPS_TOKEN"
MIN_TOKEN_CHARS = 16


def ops_token_from(environ: Mapping[str, str] = os.environ) -> str | None:
    """The operators' token of the environment, or None when unset; a token under 16 characters is refused."""
    token = environ.get(OPS_TOKEN_ENV, "").strip()
    if not token:
        return None
    if len(token) < MIN_TOKEN_CHARS:
        raise InvalidSettings(f"{OPS_TOKEN_ENV}: at least {MIN_TOKEN_CHARS} characters (e.g. `openssl rand -hex 24`)")
    return token


def ops_authorized(authorization: str, token: str) -> bool:
    """Whether an Authorization header carries the operators' token."""
    if not authorization.startswith("Bearer "):
        return False
    return hmac.compare_digest(authorization[7:].strip().encode(), token.encode())
