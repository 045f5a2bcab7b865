"""The gateway in front of the ad-server workers: HAProxy, configured and run from here.

Owns the rendering of haproxy.cfg (`render_config`, pure) and the HAProxy child process (`start_gateway`,
`Gateway.stop`). What the gateway does, and why, is in docs/gateway.md: each request is routed by a
consistent hash of the body's `user_id` (else `device_id`), stamped with `X-Request-Start: t=<epoch µs>`,
shed with a JSON 503 when its server's connection slots and short queue are full, and sent only to servers
whose `GET /ready` answers 200. It reads the body only for the routing key and never changes a request
body or a server's answer."""
from __future__ import annotations

import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from core.errors import InvalidSettings
from infra.platform.errors import PlatformError
from infra.platform.process import ManagedProcess, port_in_use, wait_until

# The moment the gateway had the whole request, as "t=<microseconds since the Unix epoch>" (HAProxy's
# date(0,us) when the frontend rules run, before any wait for a server): a server subtracts the time since
# then from its deadline. Any value a client sent is replaced.
REQUEST_START_HEADER = "X-Request-Start"
BACKEND = "adservers"
# The request's routing key: the body's user id, else its device id (the server keys a user's frequency
# record and its in-memory notes by the same field).
USER_KEY_VAR = "txn.user_key"
OVERLOADED = "overloaded: no ad server could take the request at once; try again"
UNAVAILABLE = "unavailable: no ad server is ready (every GET /ready check fails)"
BAD_GATEWAY = "bad gateway: the ad server closed the connection or answered something that is not HTTP"
GATEWAY_TIMEOUT = "gateway timeout: the ad server did not answer in time"
INSTALL_HINT = "install it with `apt-get install haproxy` (infra/bootstrap.sh does) or put it on PATH"
_TOKEN = re.compile(r"^[A-Za-z0-9_.:-]+$")  # a server name or a host: no space, quote or brace


@dataclass(frozen=True)
class Backend:
    """One ad-server worker behind the gateway; `name` is its server id (HAProxy's server name)."""

    host: str
    port: int
    name: str


@dataclass(frozen=True)
class GatewayOptions:
    """How the gateway admits, waits and checks. Times in milliseconds."""

    # Requests one worker has in flight at most; the next ones wait in its queue. Twelve at ~3 ms of CPU each
    # (1 M ads) stay under a worker's own admission limit (half the 100 ms deadline), so overload is refused here,
    # at once, rather than by the worker after the wait; fewer refuse the bursts of a rate the tier holds.
    server_maxconn: int = 12
    server_maxqueue: int = 1  # requests waiting for one worker at most; one more is refused at once
    queue_timeout_ms: int = 1  # the longest a request waits for a connection slot before its 503
    frontend_maxconn: int = 4096  # client connections the gateway holds open
    threads: int = 1  # HAProxy threads (the workers need the other cores)
    connect_timeout_ms: int = 100
    server_timeout_ms: int = 1000
    client_timeout_ms: int = 5000
    check_interval_ms: int = 1000
    check_timeout_ms: int = 500
    check_fall: int = 2  # failed checks in a row that take a server out
    check_rise: int = 1  # passed checks that bring it back
    server_weight: int = 100  # the same for every worker: more points each on the hash ring, an even spread
    log_requests: bool = False  # one line per request to stderr (the gateway's log file); costs throughput
    metrics_port: int | None = None  # HAProxy's own Prometheus exporter (GET /metrics) on the listen host

    def __post_init__(self) -> None:
        for name in ("server_maxconn", "server_maxqueue", "queue_timeout_ms", "frontend_maxconn", "threads",
                     "connect_timeout_ms", "server_timeout_ms", "client_timeout_ms", "check_interval_ms",
                     "check_timeout_ms", "check_fall", "check_rise"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidSettings(f"gateway {name}: {value!r} must be a whole number >= 1")
        if not 1 <= self.server_weight <= 256:
            raise InvalidSettings(f"gateway server_weight: {self.server_weight!r} must be between 1 and 256")
        if self.metrics_port is not None:
            _check_port("gateway metrics_port", self.metrics_port)


def _check_port(what: str, port: int) -> None:
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise InvalidSettings(f"{what}: {port!r} is not a TCP port (1 to 65535)")


def _check_host(what: str, host: str) -> None:
    if not isinstance(host, str) or not _TOKEN.match(host):
        raise InvalidSettings(f"{what}: {host!r} is not a host name or an IPv4/IPv6 address")


def _json_body(message: str) -> str:
    """An HAProxy single-quoted string holding {"error": message} (messages here have no quote or backslash)."""
    return "'{\"error\": \"" + message + "\"}'"


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def render_config(listen_host: str, listen_port: int, backends: Sequence[Backend],
                  options: GatewayOptions = GatewayOptions()) -> str:
    """haproxy.cfg for a gateway on listen_host:listen_port in front of `backends` (pure)."""
    _check_host("gateway listen host", listen_host)
    _check_port("gateway listen port", listen_port)
    if not backends:
        raise InvalidSettings("gateway backends: at least one ad server is needed")
    names = [b.name for b in backends]
    for b in backends:
        if not isinstance(b.name, str) or not _TOKEN.match(b.name):
            raise InvalidSettings(f"gateway backend name {b.name!r}: letters, digits, '-', '_', '.', ':' only")
        _check_host(f"gateway backend {b.name} host", b.host)
        _check_port(f"gateway backend {b.name} port", b.port)
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidSettings(f"gateway backend names must differ: {', '.join(duplicates)} appear twice")
    o = options
    log_global = ["    log stderr format raw local0"] if o.log_requests else []
    log_defaults = ["    log global", "    option httplog"] if o.log_requests else ["    no log"]
    lines = [
        "# The ad-server gateway, rendered by infra.gateway.render_config (docs/gateway.md).",
        "global",
        f"    nbthread {o.threads}",
        f"    maxconn {o.frontend_maxconn + len(backends) * o.server_maxconn + 16}",
        *log_global,
        "",
        "defaults",
        "    mode http",
        *log_defaults,
        "    option http-keep-alive",
        "    option abortonclose",  # a client gone away frees its place in the queue
        "    retries 1",
        "    option redispatch 1",  # a connection refused by a server not yet marked down goes to another one
        f"    timeout connect {o.connect_timeout_ms}ms",
        f"    timeout client {o.client_timeout_ms}ms",
        f"    timeout http-request {o.client_timeout_ms}ms",
        f"    timeout http-keep-alive {o.client_timeout_ms}ms",
        f"    timeout server {o.server_timeout_ms}ms",
        f"    timeout queue {o.queue_timeout_ms}ms",
        f"    timeout check {o.check_timeout_ms}ms",
        f"    http-error status 503 content-type application/json string {_json_body(OVERLOADED)}",
        f"    http-error status 502 content-type application/json string {_json_body(BAD_GATEWAY)}",
        f"    http-error status 504 content-type application/json string {_json_body(GATEWAY_TIMEOUT)}",
        "",
        "frontend ads",
        f"    bind {_address(listen_host, listen_port)}",
        f"    maxconn {o.frontend_maxconn}",
        "    option http-buffer-request",
        f"    http-request set-header {REQUEST_START_HEADER} t=%[date(0,us)]",
        f"    http-request set-var({USER_KEY_VAR}) req.body,json_query('$.user_id')",
        f"    http-request set-var({USER_KEY_VAR}) req.body,json_query('$.device_id')"
        f" if !{{ var({USER_KEY_VAR}) -m found }}",
        f"    default_backend {BACKEND}",
        "",
        f"backend {BACKEND}",
        f"    balance hash var({USER_KEY_VAR})",  # no key: round robin over the servers with free slots
        "    hash-type consistent",
        "    option httpchk",
        "    http-check send meth GET uri /ready",
        "    http-check expect status 200",
        f"    http-request return status 503 content-type application/json string {_json_body(UNAVAILABLE)}"
        " if { nbsrv lt 1 }",
        f"    http-request return status 503 content-type application/json string {_json_body(OVERLOADED)}"
        f" if {{ queue ge {len(backends) * o.server_maxqueue} }}",
        f"    default-server check inter {o.check_interval_ms}ms fall {o.check_fall} rise {o.check_rise}"
        f" maxconn {o.server_maxconn} maxqueue {o.server_maxqueue} weight {o.server_weight}",
        *(f"    server {b.name} {_address(b.host, b.port)}" for b in backends),
    ]
    if o.metrics_port is not None:
        lines += ["", "frontend metrics", f"    bind {_address(listen_host, o.metrics_port)}",
                  "    http-request use-service prometheus-exporter if { path /metrics }",
                  "    http-request return status 404"]
    return "\n".join(lines) + "\n"


def find_haproxy(search_path: str | None = None, fallback: Path = Path("/usr/sbin/haproxy")) -> Path:
    """The HAProxy binary: on `search_path` (default PATH), else `fallback` (Debian's place, off a user's PATH);
    PlatformError naming how to install it."""
    found = shutil.which("haproxy", path=search_path)
    if found is not None:
        return Path(found)
    if fallback.is_file():
        return fallback
    raise PlatformError(f"the gateway needs HAProxy 2.4 or later and none is installed: {INSTALL_HINT}")


def check_config(config_path: Path, binary: Path | None = None) -> None:
    """`haproxy -c -f config_path`; PlatformError with HAProxy's own words when the file is not valid."""
    checked = subprocess.run([str(binary or find_haproxy()), "-c", "-f", str(config_path)],
                             capture_output=True, text=True, timeout=30)
    if checked.returncode != 0:
        raise PlatformError(f"HAProxy rejects {config_path}:\n{(checked.stdout + checked.stderr).strip()}")


@dataclass
class Gateway:
    """A running HAProxy in front of the ad servers."""

    host: str
    port: int
    config_path: Path
    process: ManagedProcess
    backends: tuple[Backend, ...] = field(default_factory=tuple)

    @property
    def url(self) -> str:
        return f"http://{_address(self.host, self.port)}"

    def running(self) -> bool:
        return self.process.pid() is not None

    def stop(self) -> bool:
        """Stop HAProxy (TERM, then KILL); True if it was running."""
        return self.process.stop(timeout_s=10.0)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def start_gateway(backends: Sequence[Backend], port: int, run_dir: Path, *, host: str = "127.0.0.1",
                  options: GatewayOptions = GatewayOptions(), wait_s: float = 10.0,
                  name: str = "gateway") -> Gateway:
    """Write run_dir/<name>.cfg, check it, start HAProxy in the foreground as a managed child (pid file and
    log under run_dir) and wait until its port accepts connections. Port 0 picks a free port."""
    binary = find_haproxy()
    port = port or free_port(host)
    if port_in_use(host, port):
        raise PlatformError(f"the gateway cannot listen on {host}:{port}: something already does")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / f"{name}.cfg"
    config_path.write_text(render_config(host, port, backends, options))
    check_config(config_path, binary)
    process = ManagedProcess(name, run_dir, run_dir / f"{name}.log")
    process.start([str(binary), "-db", "-f", str(config_path)])
    gateway = Gateway(host, port, config_path, process, tuple(backends))
    try:
        wait_until(lambda: port_in_use(host, port), timeout_s=wait_s, interval_s=0.05,
                   what=f"the gateway on {host}:{port}",
                   failed=lambda: None if gateway.running() else f"HAProxy exited:\n{process.log_tail()}")
    except PlatformError:
        gateway.stop()
        raise
    return gateway
