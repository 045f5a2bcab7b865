"""The Grafana dashboard of the serving fleet, generated from the fleet panel list (serving.dashboard.panels.PANELS),
so a panel is defined once: same title, PromQL expression, unit and description in Grafana as on the project's
own dashboard.

`dashboard` is pure (panels in, the dashboard's JSON model out). `python -m infra.platform.grafana --write`
writes it to infra/grafana/adserve-dashboard.json, the file to import into Grafana (docs/monitoring.md); a unit
test keeps that file equal to what the generator makes."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from infra.platform.settings import REPO_ROOT

DASHBOARD_PATH = REPO_ROOT / "infra" / "grafana" / "adserve-dashboard.json"
DASHBOARD_UID = "adserve-fleet"
SCHEMA_VERSION = 39  # Grafana 10/11's dashboard JSON model
COLUMNS = 2  # panels per row
PANEL_WIDTH, PANEL_HEIGHT = 12, 8  # of Grafana's 24-column grid
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}  # chosen on import, through the variable below


def _legend(by: Sequence[str]) -> str:
    return " ".join("{{" + label + "}}" for label in by) if by else "__auto"


def panel_json(panel: Any, panel_id: int) -> dict[str, Any]:
    """One time-series panel of the dashboard for one serving.dashboard.panels.Panel."""
    column, row = (panel_id - 1) % COLUMNS, (panel_id - 1) // COLUMNS
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"x": column * PANEL_WIDTH, "y": row * PANEL_HEIGHT, "w": PANEL_WIDTH, "h": PANEL_HEIGHT},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "none"}},
        "targets": [{"refId": "A", "datasource": DATASOURCE, "expr": panel.expression,
                     "legendFormat": _legend(panel.by), "range": True}],
    }


def dashboard(panels: Sequence[Any]) -> dict[str, Any]:
    """The dashboard's JSON model: one panel per entry, in the list's order, two to a row."""
    return {
        "uid": DASHBOARD_UID,
        "title": "adserve fleet",
        "description": "Generated from serving/dashboard/panels.py by infra/platform/grafana.py; do not edit by hand.",
        "tags": ["adserve"],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "utc",
        "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                 "query": "prometheus", "current": {}, "hide": 0}]},
        "annotations": {"list": []},
        "panels": [panel_json(panel, index) for index, panel in enumerate(panels, start=1)],
    }


def render(panels: Sequence[Any]) -> str:
    return json.dumps(dashboard(panels), indent=2, ensure_ascii=False) + "\n"


def fleet_panels() -> Sequence[Any]:
    from serving.dashboard.panels import PANELS

    return PANELS


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m infra.platform.grafana",
                                     description="the Grafana dashboard of the fleet panels, as JSON")
    parser.add_argument("--write", nargs="?", const=str(DASHBOARD_PATH), metavar="PATH",
                        help=f"write it to PATH (default {DASHBOARD_PATH.relative_to(REPO_ROOT)}) instead of stdout")
    args = parser.parse_args(argv)
    text = render(fleet_panels())
    if args.write is None:
        print(text, end="")
        return
    path = Path(args.write)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
