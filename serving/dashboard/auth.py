"""Who may read the pacing dashboard's API: bearer tokens, with an operator role and an advertiser role.

- The operators' token (ADSERVE_OPS_TOKEN, serving.ops_auth) reads every campaign and the fleet panels.
- An advertiser's API key (the advertiser API's own, looked up in the campaign store) reads that advertiser's
  campaigns only (core.pacing_view.Viewer scopes the list and hides other campaigns).
- Anything else is a 401. Failed tokens spend a bucket of the client's address (the one behind the trusted
  proxies, core.client_address), as the advertiser API's do, so the dashboard is no oracle for guessing keys:
  past the bucket the answer is 429 before any lookup. A key that worked lately is looked up even then."""
from __future__ import annotations

import hashlib
import time
from typing import Awaitable, Callable

from aiohttp import web

from core.client_address import Network, client_address
from core.pacing_view import OPERATOR, Viewer
from core.rate_limit import FailedKeyLimiter, RateLimit
from serving.ops_auth import ops_authorized

FAILED_TOKENS = RateLimit(rate_per_s=1.0, burst=20)  # per client address, as the advertiser API's


def _refusal(status: int, message: str, retry_after_s: int | None = None) -> web.Response:
    response = web.json_response({"error": message, "field": "Authorization"}, status=status)
    if retry_after_s is not None:
        response.headers["Retry-After"] = str(retry_after_s)
    return response


class DashboardAuth:
    """The dashboard's bearer-token check. `advertiser_for_key(key)` is the campaign store's lookup (None: only
    the operators' token is accepted); `close()` closes what it holds."""

    def __init__(self, ops_token: str, advertiser_for_key: Callable[[str], Awaitable[int | None]] | None = None,
                 *, trusted_proxies: tuple[Network, ...] = (), clock: Callable[[], float] = time.monotonic,
                 close: Callable[[], Awaitable[None]] | None = None):
        self.ops_token, self.advertiser_for_key = ops_token, advertiser_for_key
        self.trusted_proxies, self.clock, self._close = trusted_proxies, clock, close
        self.failed = FailedKeyLimiter(FAILED_TOKENS)

    async def viewer(self, request: web.Request) -> tuple[Viewer | None, web.Response | None]:
        """(the viewer, None) for a good token, else (None, the 401 or 429 to answer)."""
        header = request.headers.get("Authorization", "")
        if ops_authorized(header, self.ops_token):
            return OPERATOR, None
        key = header[7:].strip() if header.startswith("Bearer ") else ""
        address = client_address(request.remote, request.headers.get("X-Forwarded-For"),
                                 self.trusted_proxies) or ""
        now_s, digest = self.clock(), hashlib.sha256(key.encode()).hexdigest()
        decision = self.failed.before_lookup(address, digest, now_s)
        if decision.allowed:
            advertiser_id = await self.advertiser_for_key(key) if key and self.advertiser_for_key else None
            if advertiser_id is not None:
                self.failed.succeeded(digest)
                return Viewer("advertiser", advertiser_id), None
            decision = self.failed.failed(address, digest, now_s)
            if decision.allowed:
                return None, _refusal(401, "send 'Authorization: Bearer <token>': the operators' token, or your "
                                           "advertiser API key for your own campaigns")
        return None, _refusal(429, f"too many failed tokens from this address: retry after "
                                   f"{decision.retry_after_s} s", decision.retry_after_s)

    async def close(self) -> None:
        if self._close is not None:
            await self._close()


async def store_auth(ops_token: str, postgres_dsn: str | None, *,
                     trusted_proxies: tuple[Network, ...] = ()) -> DashboardAuth:
    """The dashboard's auth over the campaign store at `postgres_dsn` (advertisers' keys), or over the operators'
    token alone without one."""
    if not postgres_dsn:
        return DashboardAuth(ops_token, trusted_proxies=trusted_proxies)
    from serving.advertiser.store import CampaignStore

    store = await CampaignStore(postgres_dsn, size=2).open()
    return DashboardAuth(ops_token, store.advertiser_for_key, trusted_proxies=trusted_proxies, close=store.close)


