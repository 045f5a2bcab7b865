"""`adserve serve ads --reuse-port`: two workers on one port (SO_REUSEPORT), terminated under load the way
Kubernetes ends a pod. /ready answers 503 first while requests are still answered; then the listener closes,
every request was either answered in full or refused before any byte of an answer, the tier exits 0, and the
spend its workers reported equals the expected cost of what they served, every answer in the served log. The
campaign is metered and each worker serves it from a budget slice: each worker's last report hands its slice
back, naming it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from core.spend import SpendDedupe, spend_items
from infra.platform.process import wait_until
from schemas import topics
from streams import kafka
from tests.integration.test_ad_server import (CODEC, _decoded, _filled, _free_port, _ids, _request, publish,
                                              publish_metered)
from tests.raw_http import exchange

DRAIN_DELAY_S = 2.0


def test_sigterm_under_load_turns_ready_to_503_first_answers_or_refuses_every_request_and_reports_all_spend(
        platform, tmp_path):
    placement = f"drain-{uuid.uuid4().hex[:8]}"
    base = _ids()
    publish(platform.kafka_bootstrap, placement, [{"id": base, "bid": 5_000_000}])
    publish_metered(platform.kafka_bootstrap, base, budget_micros=100_000_000_000)  # served only from slices
    port = _free_port()
    server_id = f"drain-{uuid.uuid4().hex[:6]}"
    log = (tmp_path / "tier.log").open("w")
    tier = subprocess.Popen([sys.executable, "-m", "adserve", "serve", "adserver", "--processes", "2", "--reuse-port",
                             "--port", str(port), "--server-id", server_id, "--drain-delay-s", str(DRAIN_DELAY_S),
                             "--dev"], stdout=log, stderr=subprocess.STDOUT, env=os.environ | platform.as_env(),
                            cwd=Path(__file__).parents[2])
    requests: list[tuple[str, int, bytes, dict]] = []
    readiness: list[tuple[bool, str, int, bytes]] = []  # (after SIGTERM, outcome, status, body)
    terminated = threading.Event()
    done = threading.Event()

    def load() -> None:
        n = 0
        while not done.is_set():
            body = _request(placement, f"user-{n}")
            n += 1
            requests.append((*exchange(port, "POST", "/v1/ads", body), body))
            if requests[-1][0] == "refused":
                time.sleep(0.05)  # the tier is closing: no need to count thousands of refusals

    def poll_ready() -> None:
        while not done.is_set():
            readiness.append((terminated.is_set(), *exchange(port, "GET", "/ready")))
            time.sleep(0.05)

    try:
        ready_in_a_row = []  # both workers are ready once many /ready answers in a row are 200

        def ready() -> bool:
            ready_in_a_row.append(exchange(port, "GET", "/ready")[1] == 200)
            return len(ready_in_a_row) >= 20 and all(ready_in_a_row[-20:])
        wait_until(ready, timeout_s=180, interval_s=0.1, what="both workers ready on the shared port",
                   failed=lambda: None if tier.poll() is None else (tmp_path / "tier.log").read_text())
        now = int(time.time() * 1000)
        leases = {f"{server_id}-w{n}": {"lease_id": uuid.uuid4().hex, "server_id": f"{server_id}-w{n}",
                                        "campaign_id": base, "event_time": now, "amount_micros": 1_000_000_000,
                                        "expires_at": now + 30_000} for n in range(2)}
        kafka.produce_all(platform.kafka_bootstrap, topics.BUDGET_LEASES, [
            (worker.encode(), CODEC.encode(topics.record_type(topics.BUDGET_LEASES), lease), now)
            for worker, lease in leases.items()])
        threads = [threading.Thread(target=load) for _ in range(3)] + [threading.Thread(target=poll_ready)]
        for thread in threads:
            thread.start()
        wait_until(lambda: sum(1 for outcome, status, content, _ in requests
                               if status == 200 and _filled(json.loads(content))) >= 50, timeout_s=15,
                   interval_s=0.05, what="50 ads served from the slices under load")
        terminated.set()
        tier.send_signal(signal.SIGTERM)
        tier.wait(60)
        done.set()
        for thread in threads:
            thread.join(60)
    finally:
        done.set()
        if tier.poll() is None:
            tier.kill()
        log.close()
    output = (tmp_path / "tier.log").read_text()
    assert tier.returncode == 0, output[-3000:]

    outcomes = [outcome for outcome, *_ in requests]
    assert "broken" not in outcomes, [r for r in requests if r[0] == "broken"][:3]
    answers = [json.loads(content) for outcome, status, content, _ in requests if status == 200]
    assert {status for outcome, status, *_ in requests if outcome == "answered"} == {200}

    after = [(outcome, status, content) for late, outcome, status, content in readiness if late]
    first_refused = next(i for i, (outcome, *_) in enumerate(after) if outcome == "refused")
    draining = [i for i, (outcome, status, content) in enumerate(after)
                if status == 503 and json.loads(content)["draining"]]
    assert draining and draining[0] < first_refused  # /ready said 503 (draining) before the port closed
    assert all(status in (200, 503) for outcome, status, _ in after[:first_refused])

    served = {r["request_id"]: r for r in _decoded(platform, topics.AD_SERVED)}
    answered_ids = [a["request_id"] for a in answers]
    assert set(answered_ids) <= set(served)  # the served log was flushed before exit
    assert {served[rid]["server_id"] for rid in answered_ids} == {f"{server_id}-w0", f"{server_id}-w1"}
    expected = sum(w["expected_cost_micros"] for rid in answered_ids for w in served[rid]["winners"])
    dedupe = SpendDedupe()
    mine = [r for m in _decoded(platform, topics.BUDGET_SPEND) if m["server_id"].startswith(f"{server_id}-w")
            for r in spend_items(m) if r["campaign_id"] == base]
    reported = sum(r["expected_spend_micros"] for r in mine if dedupe.first_time(r))
    for worker, lease in leases.items():  # each worker's last report, and only it, hands its slice back
        last = max(r["sequence"] for r in mine if r["server_id"] == worker)
        handed_back = [(r["sequence"], r["lease_id"]) for r in mine if r["server_id"] == worker and r.get("released")]
        assert set(handed_back) == {(last, lease["lease_id"])}, (worker, handed_back)
    print(f"{len(answers)} answered, {outcomes.count('refused')} refused, spend served {expected} micros, "
          f"reported {reported} micros")
    assert expected > 0 and reported == expected
