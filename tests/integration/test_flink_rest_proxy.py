"""`adserve jobs list` against a Flink REST endpoint given only by ADSERVE_FLINK_REST_URL, behind a real HAProxy
that asks for HTTP basic authentication (as a cluster's authenticating ingress does): with the username and
password from ADSERVE_FLINK_USERNAME / ADSERVE_FLINK_PASSWORD it lists what the cluster's REST API lists; without
them, or with a wrong password, it fails naming the URL and the refusal. The platform's own Flink address is
made unusable for the command, so nothing but the given URL can have answered."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from infra.gateway import check_config, find_haproxy, free_port
from infra.platform.process import port_in_use
from jobs import deploy

USER, PASSWORD = "flink-ops", "a long proxy secret"


@pytest.fixture
def proxy(platform, tmp_path):
    """HAProxy on a free port in front of the platform's Flink REST API, basic auth required."""
    port = free_port()
    config = tmp_path / "flink-proxy.cfg"
    config.write_text(f"""
global
    log stderr format raw local0
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
userlist flink_operators
    user {USER} insecure-password "{PASSWORD}"
frontend flink_rest
    bind 127.0.0.1:{port}
    http-request auth realm flink unless {{ http_auth(flink_operators) }}
    default_backend jobmanager
backend jobmanager
    server jm {platform.host}:{platform.flink_rest_port}
""")
    check_config(config)
    process = subprocess.Popen([str(find_haproxy()), "-db", "-f", str(config)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not port_in_use("127.0.0.1", port):
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "HAProxy did not listen within 10 s"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _jobs_list(platform, url: str, **credentials: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in (os.environ | platform.as_env()).items() if not k.startswith("ADSERVE_FLINK_")}
    env |= {"ADSERVE_FLINK_REST_URL": url, "ADSERVE_FLINK_REST_PORT": str(free_port())}  # the platform's: unused
    env |= {f"ADSERVE_FLINK_{k.upper()}": v for k, v in credentials.items()}
    return subprocess.run([sys.executable, "-m", "adserve", "jobs", "list", "--all"], capture_output=True, text=True,
                          timeout=120, env=env)


def test_jobs_list_reads_the_cluster_at_the_given_url_through_an_authenticating_proxy(platform, proxy):
    listed = _jobs_list(platform, proxy, username=USER, password=PASSWORD)
    assert listed.returncode == 0, listed.stderr[-2000:]
    expected = {j.job_id for j in deploy.list_jobs(platform.flink_rest_url)}
    shown = {line.split()[0] for line in listed.stdout.splitlines() if line and line != "no jobs"}
    assert shown == expected, listed.stdout

    for credentials in ({}, {"username": USER, "password": "wrong"}):
        refused = _jobs_list(platform, proxy, **credentials)
        assert refused.returncode != 0
        assert proxy in refused.stderr and "401" in refused.stderr, refused.stderr[-2000:]
    assert PASSWORD not in refused.stderr + refused.stdout
