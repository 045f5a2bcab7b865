"""`adserve serve ads --workers 2`: the command's tier end to end on the real platform. Workers forked from one
parent behind HAProxy serve under their own server ids, and SIGTERM stops the gateway and every worker."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from infra.platform.process import port_in_use, wait_until
from schemas import topics
from tests.integration.test_ad_server import _decoded, _ids, _request, publish


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid and stat[0] != "Z":
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_command_serves_through_the_gateway_from_forked_workers_and_stops_them_all(platform, tmp_path):
    placement = f"tier-{uuid.uuid4().hex[:8]}"
    base = _ids()
    publish(platform.kafka_bootstrap, placement, [{"id": base, "bid": 5_000_000}])
    # Three consecutive ports below the kernel's ephemeral range (32768-60999 here), where no outgoing connection
    # of the tier's own clients can take a worker's port between this check and the worker's bind.
    rng = random.Random()
    port = rng.randrange(20_000, 32_000)
    while any(port_in_use("127.0.0.1", p) for p in (port, port + 1, port + 2)):
        port = rng.randrange(20_000, 32_000)
    server_id = f"tier-{uuid.uuid4().hex[:6]}"
    log = (tmp_path / "tier.log").open("w")
    tier = subprocess.Popen([sys.executable, "-m", "adserve", "serve", "ads", "--workers", "2", "--port", str(port),
                             "--server-id", server_id, "--dev"], stdout=log, stderr=subprocess.STDOUT,
                            env=os.environ | platform.as_env(), cwd=Path(__file__).parents[2])
    gateway = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(gateway) and all(_ready(f"http://127.0.0.1:{p}") for p in (port + 1, port + 2)),
                   timeout_s=180, interval_s=0.5, what="the tier's gateway and both workers to be ready",
                   failed=lambda: None if tier.poll() is None else (tmp_path / "tier.log").read_text())
        children = _children(tier.pid)
        workers = [pid for pid in children if b"haproxy" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(workers) == 2 and len(children) == 3  # two workers and HAProxy
        answers = [_post(f"{gateway}/v1/ads", _request(placement, f"user-{i}")) for i in range(12)]
        assert all(status == 200 for status, _ in answers)
        assert all(a["slots"][0].get("ad_id") == base + 1 for _, a in answers)
        status, bad = _post(f"{gateway}/v1/ads", {"placement": placement, "slots": [{"position": "first"}]})
        assert status == 400 and bad["field"] == "slots[0].position"
    finally:
        tier.send_signal(signal.SIGTERM)
        tier.wait(60)
        log.close()
    assert tier.returncode == 0, (tmp_path / "tier.log").read_text()[-3000:]
    assert not any(port_in_use("127.0.0.1", p) for p in (port, port + 1, port + 2))
    assert not any(_alive(pid) for pid in children)
    request_ids = {a["request_id"] for _, a in answers}
    served = {r["server_id"] for r in _decoded(platform, topics.AD_SERVED) if r["request_id"] in request_ids}
    assert served <= {f"{server_id}-w0", f"{server_id}-w1"} and served  # each worker logs under its own id
