"""A tiny stand-in for what a PyFlink function sees (runtime context, keyed state, timers, metrics), so a
job's function classes run in a unit test without a cluster. Only what the project's functions call."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class FakeCounter:
    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        self.count += n


class FakeMetrics:
    """Counters and gauges by name; a key-value group's are named `key=value.name` (nested groups in order)."""

    def __init__(self, prefix: str = "", root: "FakeMetrics | None" = None) -> None:
        self.counters: dict[str, FakeCounter] = root.counters if root is not None else {}
        self.gauges: dict[str, Any] = root.gauges if root is not None else {}
        self.prefix = prefix

    def counter(self, name: str) -> FakeCounter:
        return self.counters.setdefault(self.prefix + name, FakeCounter())

    def gauge(self, name: str, obj) -> None:
        self.gauges[self.prefix + name] = obj

    def add_group(self, name: str, extra: str | None = None) -> "FakeMetrics":
        return FakeMetrics(f"{self.prefix}{name}{'' if extra is None else '=' + extra}.", self)


class FakeValueState:
    def __init__(self) -> None:
        self.held: Any = None

    def value(self) -> Any:
        return self.held

    def update(self, value: Any) -> None:
        self.held = value

    def clear(self) -> None:
        self.held = None


class FakeMapState:
    def __init__(self) -> None:
        self.held: dict = {}

    def get(self, key):
        return self.held.get(key)

    def put(self, key, value) -> None:
        self.held[key] = value

    def remove(self, key) -> None:
        self.held.pop(key, None)

    def contains(self, key) -> bool:
        return key in self.held

    def items(self):
        return list(self.held.items())

    def clear(self) -> None:
        self.held = {}


class FakeKeyedStates:
    """Keyed state per current key, as Flink scopes it: `key` selects which key's states the function sees."""

    def __init__(self) -> None:
        self.by_key: dict[Any, dict[str, Any]] = {}
        self.key: Any = None

    def state(self, name: str, kind: type):
        return _Scoped(self, name, kind)


class _Scoped:
    def __init__(self, states: FakeKeyedStates, name: str, kind: type) -> None:
        self.states, self.name, self.kind = states, name, kind

    def _target(self):
        return self.states.by_key.setdefault(self.states.key, {}).setdefault(self.name, self.kind())

    def __getattr__(self, attribute: str):
        return getattr(self._target(), attribute)


class FakeRuntimeContext:
    def __init__(self, subtask: int = 0) -> None:
        self.metrics = FakeMetrics()
        self.states = FakeKeyedStates()
        self.subtask = subtask

    def get_metrics_group(self) -> FakeMetrics:
        return self.metrics

    def get_state(self, descriptor):
        return self.states.state(descriptor.name, FakeValueState)

    def get_map_state(self, descriptor):
        return self.states.state(descriptor.name, FakeMapState)

    def get_index_of_this_subtask(self) -> int:
        return self.subtask

    def counter(self, name: str) -> int:
        return self.metrics.counter(name).count


@dataclass
class FakeTimerService:
    watermark_ms: int = -(2 ** 63)
    timers: list[int] = field(default_factory=list)

    def current_watermark(self) -> int:
        return self.watermark_ms

    def register_event_time_timer(self, timestamp_ms: int) -> None:
        self.timers.append(timestamp_ms)


@dataclass
class FakeContext:
    """What process_element and on_timer get: the current key, the record's event time, the timers and (for a
    broadcast function) the broadcast state."""

    key: Any = None
    timestamp_ms: int | None = None
    timers: FakeTimerService = field(default_factory=FakeTimerService)
    broadcast: dict[str, FakeMapState] = field(default_factory=dict)  # a broadcast function's state, by name

    def get_current_key(self):
        return self.key

    def get_broadcast_state(self, descriptor) -> FakeMapState:
        return self.broadcast.setdefault(descriptor.name, FakeMapState())

    def timestamp(self) -> int | None:
        return self.timestamp_ms

    def timer_service(self) -> FakeTimerService:
        return self.timers


def opened(function, context: FakeRuntimeContext | None = None):
    """The function opened on a fake runtime context; returns (function, context)."""
    context = context or FakeRuntimeContext()
    function.open(context)
    return function, context


def at_key(context: FakeRuntimeContext, ctx: FakeContext, key) -> FakeContext:
    """Select `key` as the current key of both the runtime context's state and the call's context."""
    context.states.key = key
    ctx.key = key
    return ctx


def through_flink_coder(type_info, value):
    """`value` encoded and decoded by the coder PyFlink's workers use for `type_info` (what state holds)."""
    from pyflink.fn_execution.coders import from_type_info

    coder = from_type_info(type_info).get_impl()
    return coder.decode(coder.encode(value))
