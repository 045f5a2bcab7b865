"""What `adserve simulate` reports around its day, without servers: the campaign its dashboard screenshot
selects, the reports-against-recount figures and line, the dashboard's lines, the failures that make the day
exit 1, and the dashboard's port and switch."""
from __future__ import annotations

import pytest

from adserve.cli import build_parser
from adserve.pacing_cli import dashboard_port, money_failures
from infra import browser
from infra.platform.settings import PlatformSettings
from sim.day_reports import day_recount, summary_line, verdict
from sim import day_watch
from sim.day_watch import showcase_campaign
from sim.pacing_report import dashboard_lines, reports_figures

DAY = "2026-03-10"


def _args(*argv: str):
    return build_parser().parse_args(["simulate", *argv])


def test_the_screenshot_selects_the_largest_budget_and_the_smallest_id_of_equals():
    assert showcase_campaign({7: 20_000_000, 3: 50_000_000_000, 5: 50_000_000_000}) == 3
    assert showcase_campaign({}) is None


def test_without_chromium_the_screenshot_says_so_and_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "no-chromium")
    reason = day_watch.screenshot("http://127.0.0.1:1/", tmp_path / "dashboard.png", 7)
    assert reason == f"{tmp_path / 'no-chromium'} is missing: no screenshot (install chromium and chromium-driver)"
    assert not (tmp_path / "dashboard.png").exists()


def test_the_recount_of_the_day_keeps_that_days_records_in_the_reports_fields():
    recount = {(1, DAY): {"billed_spend_micros": 5_000_000, "billed_clicks": 3, "billed_impressions": 0,
                          "absorbed_overspend_micros": 9},
               (1, "2026-03-11"): {"billed_spend_micros": 1, "billed_clicks": 1, "billed_impressions": 0},
               (2, DAY): {"billed_spend_micros": 400_000, "billed_impressions": 1_000}}
    assert day_recount(recount, DAY) == {
        1: {"billed_impressions": 0, "billed_clicks": 3, "billed_spend_micros": 5_000_000},
        2: {"billed_impressions": 1_000, "billed_clicks": 0, "billed_spend_micros": 400_000}}


def test_reports_equal_the_recount_only_with_no_difference_and_no_error():
    assert verdict([1, 2, 2], [])["reports_equal_recount"] is True
    assert verdict([1, 2], [], "OperationalError: no store")["reports_equal_recount"] is False
    different = verdict([1, 2], [{"campaign_id": 2, "field": "billed_clicks", "report": 4, "recount": 5}])
    assert different["reports_equal_recount"] is False and different["report_campaigns"] == 2


def test_the_reports_line_says_equal_different_or_not_checked():
    assert summary_line(verdict([1, 2, 3], [])) == "reports equal the recount: 3 campaigns, 0 differences"
    line = summary_line(verdict([1, 2], [{"campaign_id": 2, "field": "billed_clicks", "report": 4, "recount": 5}]))
    assert line == ("REPORTS DIFFER FROM THE RECOUNT: 1 differences over 2 campaigns (campaign 2 billed_clicks: "
                    "report 4, recount 5)")
    assert summary_line(verdict([1], [], "OperationalError: no store")) == \
        "REPORTS NOT CHECKED AGAINST THE RECOUNT: OperationalError: no store"
    assert summary_line(reports_figures(None)) == "reports against the recount: not checked"


def _figures(**reports) -> dict:
    return {"billed_above_budget_micros": 0, "billing_recount_mismatches": 0, **reports_figures(reports or None)}


def test_the_day_fails_when_its_reports_differ_from_or_were_not_compared_with_the_recount():
    assert money_failures(_figures(**verdict([1, 2], []))) == []
    assert money_failures(_figures()) == ["reports against the recount: not checked"]
    differing = money_failures(_figures(**verdict([1], [{"campaign_id": 1, "field": "billed_spend_micros",
                                                          "report": 1, "recount": 2}])))
    assert len(differing) == 1 and differing[0].startswith("REPORTS DIFFER FROM THE RECOUNT")
    money = {**_figures(**verdict([1], [])), "billed_above_budget_micros": 7, "billing_recount_mismatches": 1}
    assert money_failures(money) == ["7 micros billed above a budget",
                                     "1 campaigns' billed totals differ from the recount"]


def test_the_dashboard_lines_give_its_address_and_screenshot_or_why_not():
    served = {"url": "http://127.0.0.1:18092/", "answered": True, "campaigns_listed": 30, "selected_campaign": 9,
              "screenshot": "simulate-out/dashboard.png", "screenshot_error": None}
    assert dashboard_lines(served) == [
        "pacing dashboard: http://127.0.0.1:18092/ (live while the day ran; answered at the end of the day with 30 "
        "campaigns)", "  screenshot: simulate-out/dashboard.png (campaign 9 selected)"]
    no_chromium = {**served, "screenshot": None, "screenshot_error": "/usr/bin/chromium is missing: no screenshot"}
    assert dashboard_lines(no_chromium)[1] == "  no screenshot: /usr/bin/chromium is missing: no screenshot"
    assert dashboard_lines(None) == ["pacing dashboard: not started (--no-dashboard)"]
    assert dashboard_lines({"url": None, "error": "port taken"}) == ["pacing dashboard: not served (port taken)"]
    fleet = {**served, "fleet_with_data": ["requests_per_second", "fill_rate"],
             "fleet_without_data": ["calibration_ratio"]}
    assert dashboard_lines(fleet)[2] == "  fleet panels: 2 of 3 with data; none for calibration_ratio"
    assert dashboard_lines({**served, "fleet_error": "no Prometheus"})[2] == \
        "  fleet panels: not evaluated (no Prometheus)"


def test_the_dashboard_serves_on_the_platforms_port_unless_told_otherwise():
    settings = PlatformSettings.from_env({"ADSERVE_HOME": "/tmp/x"})
    assert dashboard_port(_args(), settings) == settings.dashboard_port == 18092
    assert dashboard_port(_args("--dashboard-port", "0"), settings) == 0
    assert dashboard_port(_args(), PlatformSettings.from_env({"ADSERVE_DASHBOARD_PORT": "28092"})) == 28092
    with pytest.raises(SystemExit, match="--dashboard-port must be 0-65535"):
        dashboard_port(_args("--dashboard-port", "70000"), settings)
    assert not _args().no_dashboard and _args("--no-dashboard").no_dashboard
