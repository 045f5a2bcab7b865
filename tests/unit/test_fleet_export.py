"""sim.fleet_export: the simulated fleet's metric endpoints. Each registry is served over HTTP on a free port and
announced in the scrape-target folder as the real servers announce theirs; a stopped server's endpoint and file
go away; the simulated tracker counts beacons by type and states 0 rejected tokens for each reason."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from serving.adserver.app import Metrics, count_served
from sim.fleet_export import FleetExport


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def _targets(folder) -> dict[str, list[str]]:
    return {p.name.split("-")[0] + "-" + p.name.split("-")[1]: json.loads(p.read_text())[0]["targets"]
            for p in folder.glob("*.json")}


def test_the_fleet_serves_and_announces_each_servers_metrics_and_the_trackers(tmp_path):
    export = FleetExport(tmp_path)
    try:
        server = Metrics()
        port = export.serve("adserver", server.registry)
        count_served(server, 2, 1, False)
        count_served(server, 2, 2, True)
        export.beacon("IMPRESSION")
        export.beacon("IMPRESSION")
        export.beacon("CLICK")
        page = _metrics(port)
        assert 'adserve_ad_requests_total{outcome="served"} 2.0' in page
        assert 'adserve_slots_total{result="filled"} 3.0' in page and 'adserve_slots_total{result="empty"} 1.0' in page
        assert "adserve_prediction_fallbacks_total 1.0" in page
        targets = _targets(tmp_path)
        assert targets[f"adserver-{port}"] == [f"127.0.0.1:{port}"]
        [(tracker, address)] = [(k, v) for k, v in targets.items() if k.startswith("tracker-")]
        tracker_page = _metrics(int(address[0].rsplit(":", 1)[1]))
        assert 'adserve_tracker_events_total{type="IMPRESSION"} 2.0' in tracker_page
        assert 'adserve_tracker_events_total{type="CLICK"} 1.0' in tracker_page
        assert 'adserve_tracker_rejected_tokens_total{reason="bad_signature"} 0.0' in tracker_page

        export.stop(port)  # the server died: its endpoint and its file go
        assert f"adserver-{port}" not in _targets(tmp_path)
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            _metrics(port)
    finally:
        export.close()
    assert list(tmp_path.glob("*.json")) == []
