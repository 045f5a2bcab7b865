"""The Grafana dashboard generated from the fleet panel list (infra/platform/grafana.py): a dashboard JSON model
Grafana imports, one panel per fleet panel with the same expression, and the committed file up to date."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from infra.platform import grafana
from serving.dashboard.panels import PANELS


@pytest.fixture(scope="module")
def model() -> dict:
    return grafana.dashboard(PANELS)


def test_the_dashboard_has_the_fields_grafana_imports_by(model):
    assert {"uid", "title", "schemaVersion", "panels", "templating", "time"} <= set(model)
    assert isinstance(model["schemaVersion"], int)
    (variable,) = model["templating"]["list"]
    assert (variable["type"], variable["query"], variable["name"]) == ("datasource", "prometheus", "datasource")


def test_each_fleet_panel_is_one_grafana_panel_with_its_expression_title_and_unit(model):
    panels = model["panels"]
    assert [p["targets"][0]["expr"] for p in panels] == [p.expression for p in PANELS]
    assert [(p["title"], p["fieldConfig"]["defaults"]["unit"]) for p in panels] == [(p.title, p.unit) for p in PANELS]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        assert panel["type"] == "timeseries" and panel["datasource"]["type"] == "prometheus"
        assert all(target["refId"] and target["datasource"] == panel["datasource"] for target in panel["targets"])


def test_panels_tile_the_grid_without_overlapping(model):
    cells = set()
    for panel in model["panels"]:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & area, f"panel {panel['title']} overlaps another"
        cells |= area


def test_a_panel_split_by_labels_names_them_in_its_legend():
    split = next(p for p in PANELS if p.by)
    (target,) = grafana.panel_json(split, 1)["targets"]
    assert all("{{" + label + "}}" in target["legendFormat"] for label in split.by)


def test_the_committed_dashboard_file_is_what_the_generator_writes():
    committed = json.loads(grafana.DASHBOARD_PATH.read_text())
    assert committed == json.loads(grafana.render(PANELS)), \
        "infra/grafana/adserve-dashboard.json is stale: run `python -m infra.platform.grafana --write`"


def test_every_panel_expression_is_valid_promql(tmp_path):
    rules = {"groups": [{"name": "panels", "rules": [{"record": f"panel:{p.name}", "expr": p.expression}
                                                      for p in PANELS]}]}
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump(rules))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
