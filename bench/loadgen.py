"""Load generators for `adserve bench serve`: vegeta (a peer's tool) and the project's own aiohttp generator.

vegeta (github.com/tsenart/vegeta, Go) sends at a constant rate whatever the
server does, so its latencies carry no coordinated omission. The bench builds
it once from the Go module proxy into the platform's tools folder
(`$ADSERVE_HOME/tools/bin/vegeta`, pinned to VEGETA_VERSION) unless a vegeta
is already on the PATH.

The aiohttp generator is the same-run baseline: Poisson arrivals at the rate,
each latency measured from the request's scheduled send time."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import AdserveError

VEGETA_MODULE = "github.com/tsenart/vegeta/v12"
VEGETA_VERSION = "v12.13.0"


class LoadGeneratorMissing(AdserveError):
    """vegeta is neither on the PATH nor buildable (no Go toolchain)."""


def vegeta_binary(tools_dir: Path, log=print) -> Path:
    """vegeta from the PATH, or from `tools_dir/bin`, built there with `go install` the first time."""
    on_path = shutil.which("vegeta")
    if on_path:
        return Path(on_path)
    binary = tools_dir / "bin" / "vegeta"
    if binary.exists():
        return binary
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise LoadGeneratorMissing("vegeta is not on the PATH and there is no Go toolchain to build it: install Go "
                                   f"(https://go.dev/dl) or `go install {VEGETA_MODULE}@{VEGETA_VERSION}`")
    log(f"building vegeta {VEGETA_VERSION} from the Go module proxy into {binary.parent} (once, about a minute) ...")
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(binary.parent), "GOFLAGS": "-mod=mod"}
    done = subprocess.run([go, "install", f"{VEGETA_MODULE}@{VEGETA_VERSION}"], env=env, capture_output=True,
                          text=True)
    if done.returncode != 0 or not binary.exists():
        raise LoadGeneratorMissing(f"go install {VEGETA_MODULE}@{VEGETA_VERSION} failed: {done.stderr[-2000:]}")
    return binary


def vegeta_targets(url: str, bodies: list[bytes], path: Path) -> Path:
    """The request bodies as vegeta's JSON targets file (one POST per line, sent in turn)."""
    with path.open("w") as f:
        for body in bodies:
            f.write(json.dumps({"method": "POST", "url": url, "body": base64.b64encode(body).decode(),
                                "header": {"Content-Type": ["application/json"]}}) + "\n")
    return path


def vegeta_attack(binary: Path, targets: Path, rate: float, duration: float, timeout_s: float = 5.0) -> dict[str, Any]:
    """One constant-rate step: vegeta's results reduced to the bench's figures (latencies in ms), with the
    latency of the 503 answers apart (`p99_503_ms`: how fast an overloaded tier refuses)."""
    with tempfile.TemporaryDirectory(prefix="adserve-vegeta-") as folder:
        results = Path(folder) / "results.bin"
        with results.open("wb") as out:
            subprocess.run([str(binary), "attack", "-format=json", f"-targets={targets}", f"-rate={rate:g}/s",
                            f"-duration={duration:g}s", f"-timeout={timeout_s:g}s", "-keepalive=true",
                            "-max-workers=2000"], stdout=out, check=True)
        report = json.loads(subprocess.run([str(binary), "report", "-type=json", str(results)],
                                           capture_output=True, check=True).stdout)
        rows = subprocess.run([str(binary), "encode", "-to=csv", str(results)], capture_output=True,
                              check=True).stdout.decode().splitlines()
    refused = [int(row.split(",")[2]) / 1e6 for row in rows if row.split(",")[1:2] == ["503"]]
    codes = {str(k): int(v) for k, v in (report.get("status_codes") or {}).items()}
    total = int(report.get("requests", 0))
    lat = report.get("latencies", {})
    ok = codes.get("200", 0)
    return {"achieved_rps": round(float(report.get("rate", 0.0)), 1), "requests": total,
            "p50_ms": round(lat.get("50th", 0) / 1e6, 2), "p90_ms": round(lat.get("90th", 0) / 1e6, 2),
            "p99_ms": round(lat.get("99th", 0) / 1e6, 2), "max_ms": round(lat.get("max", 0) / 1e6, 2),
            "non_200_share": round(1 - ok / max(1, total), 4), "status_codes": codes,
            "p99_503_ms": round(float(np.percentile(refused, 99)), 2) if refused else None}


def targets_file(url: str, bodies: list[bytes]) -> Path:
    fd, name = tempfile.mkstemp(prefix="adserve-vegeta-", suffix=".jsonl")
    os.close(fd)
    return vegeta_targets(url, bodies, Path(name))


# ----------------------------------------------------------------------------- the project's own generator

def summary(latencies: list[float], statuses: list[int], elapsed: float) -> dict[str, Any]:
    ok = [lat for lat, st in zip(latencies, statuses) if st == 200]
    return {"achieved_rps": round(len(statuses) / elapsed, 1),
            "p50_ms": round(float(np.percentile(ok, 50)), 2) if ok else None,
            "p99_ms": round(float(np.percentile(ok, 99)), 2) if ok else None,
            "non_200_share": round(1 - len(ok) / max(1, len(statuses)), 4), "requests": len(statuses)}


async def closed_loop(url: str, bodies: list[bytes], clients: int, duration: float) -> dict[str, Any]:
    """`clients` clients sending back to back for `duration` s."""
    import aiohttp

    latencies, statuses = [], []
    stop_at = time.perf_counter() + duration
    counter = iter(range(10**9))

    async def client(session) -> None:
        while time.perf_counter() < stop_at:
            body = bodies[next(counter) % len(bodies)]
            began = time.perf_counter()
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                await r.read()
                statuses.append(r.status)
            latencies.append((time.perf_counter() - began) * 1000)

    began = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return summary(latencies, statuses, time.perf_counter() - began)


async def open_loop(url: str, bodies: list[bytes], rate: float, duration: float) -> dict[str, Any]:
    """Poisson arrivals at `rate` for `duration` s, latency from each request's scheduled send time."""
    import aiohttp

    rng = np.random.default_rng(int(rate))
    gaps = rng.exponential(1 / rate, int(rate * duration * 1.2) + 10)
    schedule = np.cumsum(gaps)
    schedule = schedule[schedule < duration]
    latencies, statuses = [], []

    async def one(session, body: bytes, scheduled: float) -> None:
        try:
            async with session.post(url, data=body, headers={"Content-Type": "application/json"},
                                    timeout=aiohttp.ClientTimeout(total=5)) as r:
                await r.read()
                statuses.append(r.status)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            statuses.append(599)
        latencies.append((time.perf_counter() - scheduled) * 1000)

    tasks = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=512)) as session:
        start = time.perf_counter()
        for i, offset in enumerate(schedule):
            delay = start + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session, bodies[i % len(bodies)], start + offset)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    return summary(latencies, statuses, elapsed)
