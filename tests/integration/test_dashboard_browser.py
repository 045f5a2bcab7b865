"""The dashboard page in headless Chromium (selenium, /usr/bin/chromedriver) over the real platform: it loads with
no console error, its table lists exactly the campaigns the API returns, the selected campaign's chart data
(window.adserveDashboard.series, the arrays handed to uPlot) equals the API's series, and minutes the budget job
writes later appear on the page by its own polling (bounded waits, no timing assertions)."""
from __future__ import annotations

import pytest

from infra.browser import headless_chromium
from tests.integration.dashboard_world import WAIT_S, DashboardWorld, dashboard_world

SERIES_KEYS = ("minutes", "target", "committed", "p")


@pytest.fixture
def world(platform, fresh_topics):
    world = dashboard_world(platform, fresh_topics)
    yield world
    world.close()


@pytest.fixture
def browser():
    driver = headless_chromium(console_log=True)
    yield driver
    driver.quit()


def page_state(browser) -> dict:
    return browser.execute_script("return JSON.parse(JSON.stringify(window.adserveDashboard || null));")


def listed_rows(browser) -> list[int]:
    """The table's campaign ids, read in one script call: the page re-renders the table on every poll, so rows found
    by one WebDriver call may be gone by the next."""
    return [int(i) for i in browser.execute_script(
        'return Array.from(document.querySelectorAll("#campaigns tbody tr"), r => r.dataset.campaignId);')]


def wait_until(browser, what: str, check):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT_S, poll_frequency=0.2).until(lambda driver: check(), message=what)


def console_errors(browser) -> list[str]:
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def api_series(world, campaign_id: int) -> dict:
    series = world.get(f"/v1/pacing/campaigns/{campaign_id}")[1]["series"]
    return {key: series[key] for key in SERIES_KEYS}


def drawn_series(browser, campaign_id: int) -> dict | None:
    state = page_state(browser)
    series = state and state.get("series")
    if not series or series["campaign_id"] != campaign_id:
        return None
    return {key: series[key] for key in SERIES_KEYS}


def test_the_page_shows_the_apis_campaigns_and_plots_the_selected_campaigns_series_live(world, browser):
    browser.get(world.url + "/")
    wait_until(browser, "a first poll", lambda: (page_state(browser) or {}).get("polls", 0) >= 1)

    listed = world.get("/v1/pacing/campaigns?sort=campaign_id&order=asc&limit=100&offset=0")[1]
    assert listed_rows(browser) == \
        [row["campaign_id"] for row in listed["campaigns"]] == sorted(world.ids)
    assert [c["campaign_id"] for c in page_state(browser)["campaigns"]] == sorted(world.ids)

    # found and clicked in one script call, for the same reason as listed_rows
    browser.execute_script("document.querySelector(arguments[0]).click();",
                           f'#campaigns tbody tr[data-campaign-id="{world.on_pace}"]')
    drawn = wait_until(browser, "the selected campaign's series",
                       lambda: drawn_series(browser, world.on_pace))
    assert drawn == api_series(world, world.on_pace)
    assert drawn["minutes"] == list(range(600, 630))

    world.write_minutes(world.on_pace, range(630, 636))
    later = wait_until(browser, "the minutes written after the page loaded",
                       lambda: (s := drawn_series(browser, world.on_pace)) and s["minutes"][-1] == 635 and s)
    assert later == api_series(world, world.on_pace)
    assert console_errors(browser) == []


LAYOUT = """
const spend = window.adserveCharts.spend, axis = spend.axes[1];
spend.ctx.font = axis.font[0];
const labels = axis._values || [];
const widest = Math.max(0, ...labels.map(v => spend.ctx.measureText(v).width / devicePixelRatio));
const box = spend.root.getBoundingClientRect(), plot = spend.over.getBoundingClientRect();
const panel = document.getElementById("campaigns-panel").getBoundingClientRect();
const table = document.getElementById("campaigns");
const lastHead = document.querySelector("#campaigns thead th:last-child"), last = lastHead.getBoundingClientRect();
const cells = Array.from(document.querySelectorAll("#campaigns tbody tr"), r => [
  Number(r.dataset.campaignId), r.querySelector('td:nth-child(4)').textContent]);
return {labels, widest, labels_left: plot.left - axis.ticks.size - axis.gap - widest, box_left: box.left,
        panel_right: panel.right, last_right: last.right, last_text: lastHead.textContent,
        scroll: [table.parentElement.scrollWidth, table.parentElement.clientWidth], window_width: window.innerWidth,
        p_cells: Object.fromEntries(cells)};
"""


def test_at_1280_px_the_axis_labels_sit_inside_their_chart_and_the_table_fits_its_panel(world, browser):
    from tests.integration.dashboard_world import DAY, T0_MS

    # a whole day of a $15,000 campaign whose p swings every minute, as a flapping controller's does
    big = 15_000 * 1_000_000
    world.store.write({"campaign_id": world.audience, "budget_day": DAY, "minute": m, "budget_micros": big,
                       "state": "OPEN", "participation_probability": 0.9 if m % 2 else 0.1,
                       "target_micros": big * m // 1439, "committed_micros": big * m // 1500,
                       "billed_micros": big * m // 1600, "event_time": T0_MS + m * 60_000} for m in range(1440))
    browser.set_window_size(1280, 900)
    browser.get(world.url + "/")
    wait_until(browser, "a first poll with the charts drawn",
               lambda: browser.execute_script("return !!window.adserveCharts && window.adserveDashboard.polls >= 1"))
    browser.execute_script("document.querySelector(arguments[0]).click();",
                           f'#campaigns tbody tr[data-campaign-id="{world.audience}"]')
    wait_until(browser, "the selected campaign's series", lambda: drawn_series(browser, world.audience))
    layout = browser.execute_script(LAYOUT)
    assert layout["window_width"] <= 1280
    assert any(label.startswith("$1") and label.endswith("k") for label in layout["labels"]), layout["labels"]
    assert layout["labels_left"] >= layout["box_left"], layout  # the longest label starts inside the chart's box
    assert layout["last_text"] == "why under" and layout["last_right"] <= layout["panel_right"], layout
    assert layout["scroll"][0] <= layout["scroll"][1], layout  # nothing to scroll to
    # p is blank where the campaign enters no auction: STOPPED, or PAUSED in the store
    assert layout["p_cells"][str(world.spent)] == "" and layout["p_cells"][str(world.paused)] == ""
    assert layout["p_cells"][str(world.on_pace)] != ""
    # the p chart draws the minutes in buckets: each bucket's mean, lowest and highest of the API's p
    state = page_state(browser)["series"]
    band, api = state["p_band"], api_series(world, world.audience)
    assert 60 <= len(band["minutes"]) < 1440  # a day of minutes in buckets
    size = band["minutes"][1] - band["minutes"][0] if len(band["minutes"]) > 1 else len(api["minutes"])
    for i, start in enumerate(band["minutes"]):
        ps = [p for m, p in zip(api["minutes"], api["p"]) if start <= m < start + size]
        assert band["low"][i] == min(ps) and band["high"][i] == max(ps)
        assert abs(band["mean"][i] - sum(ps) / len(ps)) < 1e-9
    legend = browser.execute_script(
        "return Array.from(document.querySelectorAll('#spend-chart .u-legend .u-value'), e => e.textContent);")
    assert legend and all(value for value in legend), legend  # the latest point's values, with no pointer on it
    assert console_errors(browser) == []


def test_sorting_and_filtering_on_the_page_list_what_the_api_lists(world, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(world.url + "/")
    wait_until(browser, "a first poll", lambda: (page_state(browser) or {}).get("polls", 0) >= 1)

    def listed_on_page() -> list[int]:
        return listed_rows(browser)

    browser.find_element(By.CSS_SELECTOR, 'th[data-column="committed_micros"]').click()
    browser.find_element(By.CSS_SELECTOR, 'th[data-column="committed_micros"]').click()  # again: descending
    expected = [r["campaign_id"] for r in
                world.get("/v1/pacing/campaigns?sort=committed_micros&order=desc")[1]["campaigns"]]
    wait_until(browser, "the table sorted by committed spend, descending", lambda: listed_on_page() == expected)

    Select(browser.find_element(By.ID, "filter-pace")).select_by_value("under")
    expected = [r["campaign_id"] for r in world.get("/v1/pacing/campaigns?pace=under")[1]["campaigns"]]
    wait_until(browser, "only the under-pacing campaign", lambda: listed_on_page() == expected == [world.audience])
    assert console_errors(browser) == []


def test_with_auth_the_page_takes_an_advertisers_key_from_its_address_and_lists_only_its_campaigns(
        platform, fresh_topics, browser):
    from serving.dashboard.auth import DashboardAuth

    ops, key = "operators-token-for-the-browser", "ak_browser_advertiser_a"
    advertisers: dict[str, int] = {}

    async def lookup(candidate: str) -> int | None:
        return advertisers.get(candidate)
    world = DashboardWorld(platform, fresh_topics, DashboardAuth(ops, lookup), token=ops)
    advertisers[key] = world.advertiser_a
    try:
        world.publish_campaigns()
        world.publish_states(*world.initial_states())
        world.start()
        world.wait_loaded()  # as the operator: all four
        browser.get(world.url + "/#token=" + key)
        wait_until(browser, "a first poll", lambda: (page_state(browser) or {}).get("polls", 0) >= 1)
        assert listed_rows(browser) == sorted([world.on_pace, world.audience])  # advertiser a's only
        assert "token" not in browser.current_url  # taken from the address, then cleared from it
        assert page_state(browser)["fleetRefused"] == "the fleet panels are the operators'"
        # the one refusal Chromium logs: the fleet, asked once
        assert [e for e in console_errors(browser) if not ("/v1/fleet" in e and "403" in e)] == []
    finally:
        world.close()
