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
