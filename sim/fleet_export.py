"""The simulated fleet's /metrics, as the real servers export them, so the platform's Prometheus scrapes the
simulated day and the dashboard's fleet panels show it.

Each simulated ad server keeps the ad server's own metrics (serving.adserver.app.Metrics: requests by outcome,
slots filled and empty, the decision's latency, fallbacks, the commit-to-applied and index lags) and the
simulated day's beacons are counted by the tracker's (serving.tracker.TrackerMetrics: events by type; rejected
tokens by reason, none in a simulated day, stated as 0). The lags are in the day's own time: a server applies a
change at the simulated instant it happens. Each registry is served over HTTP on a free port of 127.0.0.1 and
announced in the platform's scrape-target folder (serving.scrape_targets) as kind adserver or tracker; `close`
withdraws them. What the simulated day does not run (a prediction service, the training join) exports nothing,
and its panels say so by showing no data."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from serving.scrape_targets import ScrapeTarget
from serving.tracker import STATUS_OF, TrackerMetrics

HOST = "127.0.0.1"


class FleetExport:
    """The simulated fleet's metric endpoints; `targets_dir` None: served but not announced."""

    def __init__(self, targets_dir: Path | None):
        self.targets_dir = targets_dir
        self._served: list[tuple[Any, ScrapeTarget]] = []
        self.tracker = TrackerMetrics()
        for reason in STATUS_OF:  # a simulated day rejects no token: say 0, not nothing
            self.tracker.rejected.labels(reason)
        self.serve("tracker", self.tracker.registry)

    def serve(self, kind: str, registry: CollectorRegistry) -> int:
        """Serve `registry` on a free port and announce it as `kind`; the port."""
        server, _ = start_http_server(0, HOST, registry=registry)
        port = server.server_address[1]
        target = ScrapeTarget(kind, self.targets_dir)
        target.publish(HOST, port)
        self._served.append((server, target))
        return port

    def stop(self, port: int) -> None:
        """Stop serving the registry on `port` and withdraw its target (a server that died)."""
        for served in [x for x in self._served if x[0].server_address[1] == port]:
            self._end(served)
            self._served.remove(served)

    def beacon(self, event_type: str) -> None:
        """One beacon the simulated tracker accepted (IMPRESSION, CLICK)."""
        self.tracker.events.labels(event_type).inc()

    def close(self) -> None:
        for served in self._served:
            self._end(served)
        self._served.clear()

    @staticmethod
    def _end(served: tuple[Any, ScrapeTarget]) -> None:
        server, target = served
        target.withdraw()
        server.shutdown()
        server.server_close()
