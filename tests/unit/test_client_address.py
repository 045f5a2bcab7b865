"""X-Forwarded-For believed only through trusted proxies (core.client_address)."""
from __future__ import annotations

import pytest

from core.client_address import client_address, parse_trusted_proxies
from core.errors import InvalidSettings

TRUSTED = parse_trusted_proxies("10.0.0.0/8, 192.168.1.7, fd00::/8")


def test_without_trusted_proxies_the_peer_is_the_client_and_the_header_is_ignored():
    assert client_address("10.0.0.3", "198.51.100.9", ()) == "10.0.0.3"


def test_a_trusted_ingress_hands_over_to_the_address_it_forwarded_for():
    assert client_address("10.0.0.3", "198.51.100.9", TRUSTED) == "198.51.100.9"
    assert client_address("10.0.0.3", "198.51.100.9, 10.0.0.5", TRUSTED) == "198.51.100.9"  # two trusted hops
    assert client_address("fd00::1", "2001:db8::7", TRUSTED) == "2001:db8::7"


def test_a_client_cannot_choose_its_address_by_sending_the_header():
    assert client_address("203.0.113.1", "198.51.100.9", TRUSTED) == "203.0.113.1"  # the peer is not trusted
    # a spoofed left part stays left of the first untrusted hop
    assert client_address("10.0.0.3", "1.2.3.4, 198.51.100.9", TRUSTED) == "198.51.100.9"


def test_a_malformed_hop_ends_the_walk_at_the_last_good_address():
    assert client_address("10.0.0.3", "198.51.100.9, junk", TRUSTED) == "10.0.0.3"
    assert client_address("10.0.0.3", "[2001:db8::9]:443", TRUSTED) == "2001:db8::9"
    assert client_address("10.0.0.3", "198.51.100.9:5123", TRUSTED) == "198.51.100.9"


def test_a_bad_trusted_list_is_refused_by_name():
    with pytest.raises(InvalidSettings, match="ADSERVE_TRUSTED_PROXIES"):
        parse_trusted_proxies("10.0.0.0/8, ingress")
    assert parse_trusted_proxies("") == ()
