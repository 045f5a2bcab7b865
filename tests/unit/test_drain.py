"""Every HTTP service drains on SIGTERM (serving.drain), in a process of its own terminated the way Kubernetes
ends a pod: /ready answers 503 draining at once while requests are still answered, a request in flight is
answered in full, then the port refuses connections and the process exits 0. The generic service and the
prediction service's command path (run_prediction_service), no platform."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from infra.platform.process import wait_until
from tests.raw_http import exchange, ready_status

ROOT = Path(__file__).parents[2]

SERVICE = textwrap.dedent("""
    import asyncio, sys
    from aiohttp import web
    from serving.body_limits import application
    from serving.drain import drain_and_close, until_terminated

    release = None

    async def slow(request):
        await release.wait()  # answered only once the test has seen the drain begin
        return web.json_response({"slow": "answered"})

    async def fast(request):
        return web.json_response({"fast": "answered"})

    async def let_go(request):
        release.set()
        return web.json_response({})

    async def main():
        global release
        release = asyncio.Event()
        app = application(1024)
        app.add_routes([web.get("/slow", slow), web.get("/fast", fast), web.get("/release", let_go)])
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", int(sys.argv[1])).start()
        print("listening", flush=True)
        try:
            await until_terminated()
        finally:
            await drain_and_close(runner, float(sys.argv[2]))
            print("drained", flush=True)

    asyncio.run(main())
""")

PREDICTION = textwrap.dedent("""
    import sys
    from serving.model.predictor import ModelPredictor
    from serving.model.service import PredictionService, run_prediction_service
    from tests.tiny_model import tiny_model

    model, snapshot = tiny_model(impressions=3_000)
    run_prediction_service(PredictionService(ModelPredictor(model, snapshot)), port=int(sys.argv[1]),
                           drain_delay_s=float(sys.argv[2]), log=lambda line: print(line, flush=True))
    print("drained", flush=True)
""")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(script: str, port: int, delay_s: float, log: Path) -> subprocess.Popen:
    out = log.open("w")
    process = subprocess.Popen([sys.executable, "-c", script, str(port), str(delay_s)], cwd=ROOT, stdout=out,
                               stderr=subprocess.STDOUT)
    wait_until(lambda: ready_status(port)[1] == 200, timeout_s=120, interval_s=0.1, what="the service ready",
               failed=lambda: None if process.poll() is None else log.read_text())
    return process


def _ready_until_refused(port: int) -> list[tuple[str, int, dict]]:
    """/ready polled until the port refuses connections."""
    seen = []
    while True:
        seen.append(ready_status(port))
        if seen[-1][0] != "answered":
            return seen


def test_sigterm_turns_ready_to_503_answers_what_is_in_flight_then_refuses_and_exits_0(tmp_path):
    port = _free_port()
    service = _start(SERVICE, port, 1.5, tmp_path / "service.log")
    try:
        slow: list = []
        in_flight = threading.Thread(target=lambda: slow.append(exchange(port, "GET", "/slow")))
        in_flight.start()
        service.send_signal(signal.SIGTERM)
        wait_until(lambda: ready_status(port)[1] == 503, timeout_s=30, interval_s=0.02, what="/ready to say 503")
        outcome, status, body = ready_status(port)
        assert (status, body) == (503, {"ready": False, "draining": True})
        assert exchange(port, "GET", "/fast")[:2] == ("answered", 200)  # still served while draining
        assert exchange(port, "GET", "/release")[:2] == ("answered", 200)
        seen = _ready_until_refused(port)
        assert seen[-1][0] == "refused" and all(s[1] == 503 for s in seen[:-1])
        in_flight.join(30)
        assert slow and slow[0][:2] == ("answered", 200)  # the request in flight was answered in full
        assert service.wait(30) == 0
    finally:
        if service.poll() is None:
            service.kill()
    assert "drained" in (tmp_path / "service.log").read_text()


def test_the_prediction_service_drains_on_sigterm_and_exits_0(tmp_path):
    port = _free_port()
    service = _start(PREDICTION, port, 1.0, tmp_path / "prediction.log")
    try:
        service.send_signal(signal.SIGTERM)
        seen = _ready_until_refused(port)
        assert (503, {"ready": False, "draining": True}) in [(s[1], s[2]) for s in seen]
        assert service.wait(60) == 0, (tmp_path / "prediction.log").read_text()
    finally:
        if service.poll() is None:
            service.kill()
    assert "drained" in (tmp_path / "prediction.log").read_text()
