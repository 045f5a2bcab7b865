"""The campaign store's change topics (Debezium, one per table) and the serving record each compiles to.

This module owns that routing: which change topic feeds which serving topic with which record type. The
compiling itself is core.campaigns'. It must never read or write Kafka."""
from __future__ import annotations

from typing import Any

from core.campaigns import BadChange, compile_change
from schemas import topics

# change topic -> (serving topic, serving record type)
CDC_ROUTES: dict[str, tuple[str, str]] = {
    topics.CDC_CAMPAIGNS: (topics.SERVING_CAMPAIGNS, "ServingCampaign"),
    topics.CDC_ADS: (topics.SERVING_ADS, "ServingAd"),
    topics.CDC_RESERVES: (topics.SERVING_RESERVES, "ServingReserve"),
}


def serving_record_from_change(topic: str, value: bytes | str | None) -> tuple[str, str, str, dict[str, Any]] | None:
    """A Debezium change on `topic` -> (serving topic, record key, record type, serving record); None for a
    delete or a heartbeat (core.campaigns.compile_change); BadChange for a topic no serving record comes from."""
    route = CDC_ROUTES.get(topic)
    if route is None:
        raise BadChange(f"no serving record comes from topic {topic!r}")
    serving_topic, record_type = route
    compiled = compile_change(record_type, value)
    if compiled is None:
        return None
    key, record = compiled
    return serving_topic, key, record_type, record
