"""The operators' token that guards the ad server's /debug/timings (serving.ops_auth)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from core.errors import InvalidSettings

from serving.adserver.app import AdServer, ServerConfig
from serving.ops_auth import ops_authorized, ops_token_from

TOKEN = "0123456789abcdef0123"


def test_the_token_comes_from_the_environment_and_a_short_one_is_refused():
    assert ops_token_from({}) is None and ops_token_from({"ADSERVE_OPS_TOKEN": "  "}) is None
    assert ops_token_from({"ADSERVE_OPS_TOKEN": TOKEN}) == TOKEN
    with pytest.raises(InvalidSettings, match="at least 16"):
        ops_token_from({"ADSERVE_OPS_TOKEN": "short"})


def test_only_the_bearer_token_itself_is_authorized():
    assert ops_authorized(f"Bearer {TOKEN}", TOKEN)
    assert not ops_authorized(f"Bearer {TOKEN}x", TOKEN) and not ops_authorized(TOKEN, TOKEN)
    assert not ops_authorized("", TOKEN) and not ops_authorized("Basic abc", TOKEN)


def _timings(token: str | None, authorization: str | None, clear: bool = False):
    server = SimpleNamespace(config=ServerConfig(ops_token=token), timings=[{"decision": 1.5}],
                             _error=AdServer._error)
    request = SimpleNamespace(headers={"Authorization": authorization} if authorization else {},
                              query={"clear": "1"} if clear else {})
    response = asyncio.run(AdServer.handle_timings(server, request))
    return response.status, server.timings


def test_debug_timings_answer_the_operator_refuse_anyone_else_and_are_off_without_a_token():
    assert _timings(None, f"Bearer {TOKEN}") == (404, [{"decision": 1.5}])
    assert _timings(TOKEN, None, clear=True) == (401, [{"decision": 1.5}])  # nobody else clears them
    assert _timings(TOKEN, "Bearer wrong-token-wrong-token", clear=True)[0] == 401
    assert _timings(TOKEN, f"Bearer {TOKEN}", clear=True) == (200, [])
