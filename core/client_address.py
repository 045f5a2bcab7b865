"""The client's address behind proxies: X-Forwarded-For read only through proxies the operator trusts. Pure.

Behind an ingress or a load balancer every request comes from the proxy's address, so a rule keyed by address
(the click aggregator's ip_burst, the advertiser API's per-address limit) would lump every client together:
after the fifth click of a minute, every click from anyone would be invalid. X-Forwarded-For names the client,
but anyone can send that header, so it is believed only as far as a chain of trusted proxies reaches: starting
from the connection's peer and walking the header from its right end, each hop that is a trusted proxy hands
over to the address it forwarded for; the first address that is not a trusted proxy is the client. With no
trusted proxies configured (the default) the peer is the client and the header is ignored.

    trusted = parse_trusted_proxies("10.0.0.0/8, 192.168.1.7")
    client_address("10.0.0.3", "198.51.100.9, 10.0.0.5", trusted)  -> "198.51.100.9"
    client_address("203.0.113.1", "198.51.100.9", trusted)          -> "203.0.113.1" (the peer is not trusted)
"""
from __future__ import annotations

import ipaddress
from typing import Iterable

from core.errors import InvalidSettings

TRUSTED_PROXIES_ENV = "ADSERVE_TRUSTED_PROXIES"
MAX_HOPS = 20  # a longer X-Forwarded-For is read from its right end only this far

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_trusted_proxies(text: str | None) -> tuple[Network, ...]:
    """Comma-separated addresses or CIDR blocks (10.0.0.0/8, fd00::/8, 192.168.1.7); empty: none."""
    networks = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise InvalidSettings(f"{TRUSTED_PROXIES_ENV}: {part!r} is not an IP address or CIDR block") from None
    return tuple(networks)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1:text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address, trusted: Iterable[Network]) -> bool:
    return any(address.version == n.version and address in n for n in trusted)


def client_address(peer: str | None, forwarded_for: str | None, trusted: tuple[Network, ...]) -> str | None:
    """The client's address: the peer unless it is a trusted proxy, else the rightmost address of
    X-Forwarded-For that is not one (a malformed hop ends the walk at the last address known good)."""
    current = _address(peer or "")
    if current is None:
        return peer or None
    if not trusted or not forwarded_for:
        return str(current)
    hops = [h for h in forwarded_for.split(",") if h.strip()][-MAX_HOPS:]
    while _trusted(current, trusted) and hops:
        previous = _address(hops.pop())
        if previous is None:
            break
        current = previous
    return str(current)
