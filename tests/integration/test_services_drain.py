"""The tracker, the advertiser API and the pacing dashboard, each started by its command on the real platform
and terminated the way Kubernetes ends a pod: /ready answers 503 draining first, then the port refuses
connections and the process exits 0 (the ad server's drain: test_adserver_drain; the prediction service's:
tests/unit/test_drain.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from infra.platform.process import wait_until
from tests.integration.test_ad_server import _free_port
from tests.raw_http import ready_status

COMMANDS = {
    "tracker": lambda tmp: ["tracker", "--dev", "--spool-dir", str(tmp / "spool")],
    "advertiser-api": lambda tmp: ["advertiser-api"],
    "dashboard": lambda tmp: ["dashboard", "--prometheus-url", ""],
}
# the dashboard's API takes the operators' token (and advertisers' keys from the campaign store)
ENV = {"dashboard": {"ADSERVE_OPS_TOKEN": "operators-token-for-the-drain-test"}}


@pytest.mark.parametrize("service", sorted(COMMANDS))
def test_sigterm_turns_ready_to_503_before_the_port_closes_and_the_service_exits_0(platform, tmp_path, service):
    port = _free_port()
    log = (tmp_path / f"{service}.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "adserve", "serve", *COMMANDS[service](tmp_path),
                                "--port", str(port), "--drain-delay-s", "1.5"], stdout=log, stderr=subprocess.STDOUT,
                               env=os.environ | platform.as_env() | ENV.get(service, {}),
                               cwd=Path(__file__).parents[2])
    try:
        wait_until(lambda: ready_status(port)[1] == 200, timeout_s=120, interval_s=0.2, what=f"the {service} ready",
                   failed=lambda: None if process.poll() is None else (tmp_path / f"{service}.log").read_text())
        process.send_signal(signal.SIGTERM)
        seen = [ready_status(port)]
        while seen[-1][0] == "answered":
            seen.append(ready_status(port))
        assert process.wait(60) == 0, (tmp_path / f"{service}.log").read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    answered = [(status, body) for outcome, status, body in seen if outcome == "answered"]
    assert (503, {"ready": False, "draining": True}) in answered
    first_draining = answered.index((503, {"ready": False, "draining": True}))
    assert all(status == 503 for status, _ in answered[first_draining:])  # never ready again once draining
    assert seen[-1][0] == "refused"


def test_the_dashboard_refuses_to_start_without_the_operators_token_outside_development_mode(platform):
    environ = {k: v for k, v in (os.environ | platform.as_env()).items()
               if k not in ("ADSERVE_OPS_TOKEN", "ADSERVE_DEV")}
    done = subprocess.run([sys.executable, "-m", "adserve", "serve", "dashboard", "--port", str(_free_port())],
                          capture_output=True, text=True, timeout=60, env=environ, cwd=Path(__file__).parents[2])
    assert done.returncode == 2 and "ADSERVE_OPS_TOKEN is not set" in done.stderr
