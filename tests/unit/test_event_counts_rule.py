from core import event_counts as rules
from tests.factories import BASE_MS, SMOKE_EVENTS, expected_event_counts


def count_by_hand(events):
    windows: dict[tuple[int, int], rules.Counts] = {}
    for e in events:
        key = (e["campaign_id"], rules.window_start(e["event_time"]))
        windows[key] = windows.get(key, rules.Counts()).add(e)
    return [rules.event_count_record(c, w, counts) for (c, w), counts in windows.items()]


def test_the_worked_example_counts_per_campaign_and_minute():
    key = lambda r: (r["campaign_id"], r["window_start"])  # noqa: E731
    assert sorted(count_by_hand(SMOKE_EVENTS), key=key) == sorted(expected_event_counts(), key=key)


def test_only_the_billable_event_type_adds_its_price():
    click_billed = {"event_type": "IMPRESSION", "billing_type": "CLICK", "price_micros": 1_500_000}
    assert rules.Counts().add(click_billed) == rules.Counts(impressions=1, clicks=0, billable_micros=0)


def test_window_start_is_the_minute_boundary():
    assert rules.window_start(BASE_MS + 59_999) == BASE_MS
    assert rules.window_start(BASE_MS + 60_000) == BASE_MS + 60_000


def test_event_is_late_only_once_the_watermark_passed_its_window():
    assert not rules.is_late(BASE_MS + 10, watermark_ms=BASE_MS + 59_998)
    assert rules.is_late(BASE_MS + 10, watermark_ms=BASE_MS + 59_999)


def test_merge_adds_every_total():
    a, b = rules.Counts(1, 2, 3), rules.Counts(10, 20, 30)
    assert a.merge(b) == rules.Counts(11, 22, 33)


def test_the_first_event_of_a_window_opens_it_with_its_closing_timer():
    event = {"event_time": 1_000, "event_type": "IMPRESSION", "billing_type": "IMPRESSION", "price_micros": 5}
    assert rules.count_event(None, event, watermark_ms=0) == (rules.Counts(1, 0, 5), 59_999)


def test_a_later_event_of_an_open_window_adds_to_it_without_a_new_timer():
    event = {"event_time": 2_000, "event_type": "CLICK", "billing_type": "IMPRESSION", "price_micros": 5}
    assert rules.count_event(rules.Counts(1, 0, 5), event, watermark_ms=0) == (rules.Counts(1, 1, 5), None)


def test_an_event_whose_window_was_emitted_is_late():
    event = {"event_time": 1_000, "event_type": "CLICK", "billing_type": "IMPRESSION", "price_micros": 5}
    assert rules.count_event(None, event, watermark_ms=59_999) == (None, None)


def test_a_window_timer_names_its_window():
    assert rules.window_of_timer(rules.window_timer(120_000)) == 120_000
