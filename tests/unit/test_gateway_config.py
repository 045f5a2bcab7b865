"""The gateway's haproxy.cfg as infra.gateway.render_config writes it: the routing rule, the deadline header,
shedding, health checks and timeouts read from the rendered text; the whole file checked by HAProxy itself
(`haproxy -c`)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from core.errors import InvalidSettings
from infra.gateway import (
    OVERLOADED, REQUEST_START_HEADER, UNAVAILABLE, Backend, GatewayOptions, check_config, find_haproxy,
    render_config,
)
from infra.platform.errors import PlatformError

WORKERS = [Backend("127.0.0.1", 9101, "adserver-1-w0"), Backend("127.0.0.1", 9102, "adserver-1-w1")]


def sections(config: str) -> dict[str, list[str]]:
    """The config's sections ("global", "defaults", "frontend ads", ...) -> their indented lines, stripped."""
    found: dict[str, list[str]] = {}
    current = None
    for line in config.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if not line.startswith(" "):
            current = line.strip()
            found[current] = []
        else:
            found[current].append(line.strip())
    return found


def json_bodies(lines: list[str]) -> list[dict]:
    """The JSON documents in the lines' single-quoted strings (the gateway's own answers)."""
    return [json.loads(text) for line in lines for text in re.findall(r"'(\{.*?\})'", line)]


def test_the_user_id_in_the_body_chooses_the_server_on_a_consistent_hash():
    s = sections(render_config("127.0.0.1", 8080, WORKERS))
    front, back = s["frontend ads"], s["backend adservers"]
    assert "option http-buffer-request" in front
    assert "http-request set-var(txn.user_key) req.body,json_query('$.user_id')" in front
    assert "balance hash var(txn.user_key)" in back and "hash-type consistent" in back


def test_a_request_without_a_user_id_is_routed_by_its_device_id():
    front = sections(render_config("127.0.0.1", 8080, WORKERS))["frontend ads"]
    by_user = front.index("http-request set-var(txn.user_key) req.body,json_query('$.user_id')")
    assert front[by_user + 1] == ("http-request set-var(txn.user_key) req.body,json_query('$.device_id') "
                                  "if !{ var(txn.user_key) -m found }")


def test_every_request_carries_the_epoch_microseconds_the_gateway_received_it():
    front = sections(render_config("127.0.0.1", 8080, WORKERS))["frontend ads"]
    assert REQUEST_START_HEADER == "X-Request-Start"
    assert "http-request set-header X-Request-Start t=%[date(0,us)]" in front


def test_each_worker_is_a_checked_server_with_its_own_connection_limit_and_short_queue():
    options = GatewayOptions(server_maxconn=12, server_maxqueue=3, check_interval_ms=1000, check_fall=2,
                             check_rise=1)
    back = sections(render_config("127.0.0.1", 8080, WORKERS, options))["backend adservers"]
    assert "default-server check inter 1000ms fall 2 rise 1 maxconn 12 maxqueue 3 weight 100" in back
    assert [line for line in back if line.startswith("server ")] == [
        "server adserver-1-w0 127.0.0.1:9101", "server adserver-1-w1 127.0.0.1:9102"]
    assert ["option httpchk", "http-check send meth GET uri /ready", "http-check expect status 200"] == \
        [line for line in back if "httpchk" in line or line.startswith("http-check")]


def test_the_queue_of_the_whole_tier_is_bounded_and_waits_only_milliseconds():
    s = sections(render_config("127.0.0.1", 8080, WORKERS, GatewayOptions(server_maxqueue=2, queue_timeout_ms=1)))
    assert "timeout queue 1ms" in s["defaults"]
    (shed,) = [line for line in s["backend adservers"] if line.endswith("if { queue ge 4 }")]
    assert shed.startswith("http-request return status 503 content-type application/json string")
    assert json_bodies([shed]) == [{"error": OVERLOADED}]


def test_the_gateway_answers_its_own_errors_in_json_like_the_server():
    s = sections(render_config("127.0.0.1", 8080, WORKERS))
    errors = {int(line.split()[2]): json_bodies([line])[0] for line in s["defaults"]
              if line.startswith("http-error status")}
    assert set(errors) == {502, 503, 504}
    assert all("content-type application/json" in line for line in s["defaults"] if line.startswith("http-error"))
    assert errors[503] == {"error": OVERLOADED} and OVERLOADED.startswith("overloaded: ")
    (none_up,) = [line for line in s["backend adservers"] if line.endswith("if { nbsrv lt 1 }")]
    assert json_bodies([none_up]) == [{"error": UNAVAILABLE}]


def test_the_no_server_answer_comes_before_the_queue_rule():
    back = sections(render_config("127.0.0.1", 8080, WORKERS))["backend adservers"]
    rules = [line for line in back if line.startswith("http-request return")]
    assert rules[0].endswith("if { nbsrv lt 1 }") and rules[1].endswith(" }") and "queue ge" in rules[1]


def test_timeouts_threads_and_connection_limits_come_from_the_options():
    options = GatewayOptions(connect_timeout_ms=100, server_timeout_ms=1000, client_timeout_ms=5000, threads=2,
                             frontend_maxconn=3000, check_timeout_ms=400)
    s = sections(render_config("127.0.0.1", 8080, WORKERS, options))
    assert {"timeout connect 100ms", "timeout server 1000ms", "timeout client 5000ms", "timeout check 400ms",
            "option http-keep-alive"} <= set(s["defaults"])
    assert "nbthread 2" in s["global"] and "maxconn 3000" in s["frontend ads"]
    assert s["frontend ads"][0] == "bind 127.0.0.1:8080"


def test_request_logging_is_off_unless_asked_for():
    quiet = sections(render_config("127.0.0.1", 8080, WORKERS))
    loud = sections(render_config("127.0.0.1", 8080, WORKERS, GatewayOptions(log_requests=True)))
    assert "no log" in quiet["defaults"] and not any(line.startswith("log ") for line in quiet["global"])
    assert "log stderr format raw local0" in loud["global"] and "option httplog" in loud["defaults"]


def test_the_metrics_frontend_exists_only_with_a_metrics_port():
    assert "frontend metrics" not in sections(render_config("127.0.0.1", 8080, WORKERS))
    metrics = sections(render_config("127.0.0.1", 8080, WORKERS, GatewayOptions(metrics_port=8405)))
    assert metrics["frontend metrics"][:2] == [
        "bind 127.0.0.1:8405", "http-request use-service prometheus-exporter if { path /metrics }"]


@pytest.mark.parametrize("backends", [
    [],
    [Backend("127.0.0.1", 9101, "w0"), Backend("127.0.0.1", 9102, "w0")],
    [Backend("127.0.0.1", 9101, "w 0")],
    [Backend("127.0.0.1", 0, "w0")],
    [Backend("127.0.0.1 x", 9101, "w0")],
])
def test_backends_haproxy_could_not_name_or_reach_are_refused(backends):
    with pytest.raises(InvalidSettings):
        render_config("127.0.0.1", 8080, backends)


@pytest.mark.parametrize("field", ["server_maxconn", "server_maxqueue", "queue_timeout_ms", "threads",
                                   "check_fall"])
def test_options_below_one_are_refused(field):
    with pytest.raises(InvalidSettings, match=field):
        GatewayOptions(**{field: 0})


@pytest.mark.parametrize("options", [GatewayOptions(),
                                     GatewayOptions(log_requests=True, metrics_port=18405, threads=2)])
def test_haproxy_accepts_the_rendered_config(tmp_path: Path, options):
    config = tmp_path / "gateway.cfg"
    config.write_text(render_config("127.0.0.1", 18404, WORKERS + [Backend("::1", 9103, "adserver-1-w2")],
                                    options))
    check_config(config)


def test_haproxy_rejects_a_broken_config_with_its_own_words(tmp_path: Path):
    config = tmp_path / "gateway.cfg"
    config.write_text(render_config("127.0.0.1", 18404, WORKERS).replace("balance hash", "balance hashh"))
    with pytest.raises(PlatformError, match=r"gateway.cfg:\d+\] : balance"):
        check_config(config)


def test_a_missing_haproxy_names_how_to_install_it(tmp_path: Path):
    with pytest.raises(PlatformError, match="apt-get install haproxy"):
        find_haproxy(search_path=str(tmp_path), fallback=tmp_path / "haproxy")
