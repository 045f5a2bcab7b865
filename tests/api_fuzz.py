"""Schemathesis against a service's own OpenAPI description, for the API fuzz tests.

The service runs on a free loopback port on its own event loop in a background thread (aiohttp is neither
ASGI nor WSGI, so schemathesis calls it over HTTP like any client), its description is read from its
GET /openapi.json, and every operation is called with generated requests: ones that fit the description and
ones that break it. Each answer is checked: no 5xx, a status code the operation lists, the content type it
lists for that status, and a body that fits the schema it lists.

Examples per operation and mode: FUZZ_EXAMPLES (small, so `.ci/run` stays quick); set ADSERVE_FUZZ_EXAMPLES
to run more locally. The seed is fixed unless ADSERVE_FUZZ_RANDOM=1, so a CI failure replays."""
from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, Awaitable, Callable, Iterable

import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup, ServerError
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                               status_code_conformance)

FUZZ_EXAMPLES = 25
CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance]
GUARD_S = 60.0  # a guard against a hang only
REPORT_CHARS = 4_000  # of each failure's report (its check, the request to reproduce it, the answer)


def examples(default: int = FUZZ_EXAMPLES) -> int:
    """Examples per operation and mode: ADSERVE_FUZZ_EXAMPLES when set, else `default`."""
    return int(os.environ.get("ADSERVE_FUZZ_EXAMPLES", default))


class LiveApp:
    """A service on 127.0.0.1 (a free port) on its own event loop in a daemon thread:
    `with LiveApp(make_app) as live: live.url`. `make_app` runs on that loop (aiohttp binds an app to it); a
    service with its own start function passes `start` instead: a coroutine function returning (runner, port),
    and `close`, a coroutine function run after the runner's cleanup (a store's connection pool)."""

    def __init__(self, make_app: Callable[[], web.Application] | None = None, *,
                 start: Callable[[], Awaitable[tuple[web.AppRunner, int]]] | None = None,
                 close: Callable[[], Awaitable[None]] | None = None):
        self.make_app, self.start, self.close = make_app, start or self._start, close
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzzed-service", daemon=True)
        self.runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _start(self) -> tuple[web.AppRunner, int]:
        assert self.make_app is not None, "LiveApp needs make_app or start"
        runner = web.AppRunner(self.make_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def run(self, coroutine: Awaitable[Any]) -> Any:
        """Run a coroutine on the service's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(GUARD_S)  # type: ignore[arg-type]

    def __enter__(self) -> "LiveApp":
        self.thread.start()
        self.runner, self.port = self.run(self.start())
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.runner is not None:
            self.run(self.runner.cleanup())
        if self.close is not None:
            self.run(self.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(GUARD_S)
        self.loop.close()


def _fuzz_settings(max_examples: int):
    return settings(max_examples=max_examples, deadline=None, database=None,
                    derandomize=os.environ.get("ADSERVE_FUZZ_RANDOM") != "1",
                    phases=[Phase.explicit, Phase.generate, Phase.shrink],
                    suppress_health_check=list(HealthCheck), report_multiple_bugs=False, print_blob=False)


def no_server_error(allowed: Iterable[int] = ()):
    """The check that no answer is a 5xx, except the `allowed` ones (a service's documented load shedding)."""
    allowed = frozenset(allowed)

    def not_a_server_error(ctx, response, case) -> None:
        if response.status_code >= 500 and response.status_code not in allowed:
            raise ServerError(operation=case.operation.label, status_code=response.status_code)
    return not_a_server_error


def fuzz(base_url: str, *, max_examples: int | None = None, headers: dict[str, str] | None = None,
         modes: Iterable[GenerationMode] = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE),
         fixed: dict[str, dict[str, Any]] | None = None, skip: Iterable[str] = (),
         allowed_server_errors: Iterable[int] = ()) -> list[str]:
    """Every operation of the description at `base_url`/openapi.json, in each mode, `max_examples` each
    (default examples()); returns one line per operation and mode that failed a check (empty: none did).
    `headers` go with every request (an API key); `fixed` maps an operation's label ("GET /v1/click") to
    as_strategy arguments held fixed (a valid token in `query`), for a third run of positive cases that reach
    past the parameter checks; `skip` lists labels not fuzzed; `allowed_server_errors` are 5xx statuses the
    service answers by design (the check still wants them documented)."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json", timeout=GUARD_S)
    if headers:  # the credential goes with every case, negative ones too, so they reach the validation
        schema.config.generation.update(with_security_parameters=False)
    count = examples() if max_examples is None else max_examples
    checks = [no_server_error(allowed_server_errors), *CONFORMANCE]
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.label in set(skip):
            continue
        runs = [(mode.value, mode, {}) for mode in modes]
        if fixed and operation.label in fixed:
            runs.append(("positive, fixed", GenerationMode.POSITIVE, fixed[operation.label]))
        for name, mode, held in runs:
            if mode is GenerationMode.NEGATIVE and not _has_inputs(operation):
                continue  # nothing to break: an operation without parameters or body
            strategy = operation.as_strategy(generation_mode=mode, **held)

            @_fuzz_settings(count)
            @given(case=strategy)
            def check(case) -> None:
                case.call_and_validate(base_url=base_url, headers=headers, checks=checks, timeout=GUARD_S)

            try:
                check()
            except (Exception, FailureGroup) as failure:  # noqa: BLE001 - every operation's failure is reported
                failures.append(f"{operation.label} ({name}): {failure}"[:REPORT_CHARS])
    return failures


def _has_inputs(operation) -> bool:
    return bool(operation.body) or any(True for _ in operation.iter_parameters())
