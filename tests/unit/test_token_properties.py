"""Property tests of the token parser (core/tokens.py), the only thing the tracker trusts: any string given as a
token or a click id is refused with InvalidToken and one of its known reasons (never another exception), what
is signed verifies to the same claims, and a signed token or click id with any one character changed, added
or removed is refused.

Examples per property: the settings below (bounded, for `.ci/run`); raise them with ADSERVE_FUZZ_EXAMPLES."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings, strategies as st

from core.tokens import BILLING_TYPES, ClickIdClaims, InvalidToken, TokenClaims, TokenKeys

EXAMPLES = int(os.environ.get("ADSERVE_FUZZ_EXAMPLES", 150))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=os.environ.get("ADSERVE_FUZZ_RANDOM") != "1",
                    suppress_health_check=[HealthCheck.too_slow])
KEYS = TokenKeys({"k2": b"2" * 32, "k1": b"1" * 32}, active="k2")
REASONS = {"malformed", "unknown_key", "bad_signature", "expired"}
NOW_MS = 1_800_000_000_000
INT64 = st.integers(-2**63, 2**63 - 1)
TEXT = st.text(max_size=30)
BASE64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

token_claims = st.builds(TokenClaims, impression_id=TEXT, ad_id=INT64, campaign_id=INT64, price_micros=INT64,
                         billing=st.sampled_from(BILLING_TYPES), landing_url=TEXT,
                         expires_ms=st.integers(NOW_MS, 2**63 - 1), served_ms=INT64)
click_id_claims = st.builds(ClickIdClaims, impression_id=TEXT, ad_id=INT64, campaign_id=INT64, served_ms=INT64,
                            click_ms=INT64, expires_ms=st.integers(NOW_MS, 2**63 - 1))
# Strings a forger would try: anything, and two base64url-looking parts around a dot
token_like = st.one_of(st.text(max_size=200),
                       st.builds(lambda a, b: f"{a}.{b}", st.text(BASE64URL + "=.", max_size=120),
                                 st.text(BASE64URL + "=.", max_size=60)))


def refused(verify, text: str) -> InvalidToken | None:
    """The InvalidToken `verify` raises for `text`, or None when it accepts it; any other exception escapes."""
    try:
        verify(text, NOW_MS)
    except InvalidToken as e:
        assert e.reason in REASONS, f"unknown reason {e.reason!r}"
        return e
    return None


@SETTINGS
@given(text=token_like)
def test_any_string_is_refused_as_a_token_with_a_known_reason(text):
    assert refused(KEYS.verify, text) is not None


@SETTINGS
@given(text=token_like)
def test_any_string_is_refused_as_a_click_id_with_a_known_reason(text):
    assert refused(KEYS.verify_click_id, text) is not None


@SETTINGS
@given(claims=token_claims)
def test_a_signed_token_verifies_to_its_claims(claims):
    assert KEYS.verify(KEYS.sign(claims), NOW_MS) == TokenClaims(**{**claims.__dict__, "key_id": "k2"})


@SETTINGS
@given(claims=click_id_claims)
def test_a_signed_click_id_verifies_to_its_claims(claims):
    assert KEYS.verify_click_id(KEYS.sign_click_id(claims), NOW_MS) == \
        ClickIdClaims(**{**claims.__dict__, "key_id": "k2"})


def changed(token: str, data) -> str:
    """The token with one character replaced, inserted (the end included) or removed, drawn from `data`: anywhere,
    and often at the ends of its two parts, where base64 leaves room for a second spelling of the same bytes."""
    edit = data.draw(st.sampled_from(["replace", "insert", "remove"]), label="edit")
    last = len(token) if edit == "insert" else len(token) - 1
    dot = token.index(".")
    at = data.draw(st.one_of(st.integers(0, last), st.sampled_from([0, dot - 1, dot, dot + 1, last])), label="at")
    if edit == "remove":
        return token[:at] + token[at + 1:]
    other = data.draw(st.sampled_from(BASE64URL + ".=").filter(lambda c: edit == "insert" or c != token[at]),
                      label="character")
    return token[:at] + other + token[at + (edit == "replace"):]


@SETTINGS
@given(claims=token_claims, data=st.data())
def test_a_token_with_any_one_character_changed_is_refused(claims, data):
    assert refused(KEYS.verify, changed(KEYS.sign(claims), data)) is not None


@SETTINGS
@given(claims=click_id_claims, data=st.data())
def test_a_click_id_with_any_one_character_changed_is_refused(claims, data):
    assert refused(KEYS.verify_click_id, changed(KEYS.sign_click_id(claims), data)) is not None


def test_a_token_is_not_a_click_id_nor_a_click_id_a_token():
    token = KEYS.sign(TokenClaims("imp-1", 7, 3, 1_400_000, "CLICK", "https://x.test", NOW_MS + 1))
    click_id = KEYS.sign_click_id(ClickIdClaims("imp-1", 7, 3, NOW_MS - 2, NOW_MS - 1, NOW_MS + 1))
    assert refused(KEYS.verify_click_id, token).reason == "malformed"
    assert refused(KEYS.verify, click_id).reason == "malformed"
