"""The fault matrix's invariants (bench.fault_checks) on hand-made phases: each count moves when, and only when,
its rule is broken."""
from __future__ import annotations

from bench.fault_checks import Answer, Beacon, PhaseRecord, acknowledged, row

CAMPAIGNS = {1: {"role": "capped", "budget_micros": 10_000, "capped": True},
             2: {"role": "open", "budget_micros": 10_000, "capped": False}}


def _billed(campaign_id: int, at: int, spend: int, impressions: int, absorbed: int = 0) -> dict:
    return {"campaign_id": campaign_id, "event_time": at, "budget_day": "2026-12-03", "billed_spend_micros": spend,
            "billed_impressions": impressions, "billed_clicks": 0, "absorbed_overspend_micros": absorbed,
            "invalid_credit_micros": 0, "joined_clicks": 0}


def _phase(**changes) -> PhaseRecord:
    phase = PhaseRecord("kafka", CAMPAIGNS, recovery_s=20.0, recovery_bound_s=90.0,
                        beacons=[Beacon("i1", 1, 1_000, 204), Beacon("i2", 1, 1_000, 204),
                                 Beacon("i3", 2, 500, 204), Beacon("i4", 2, 500, None)],
                        billed=[_billed(1, 10_000, 1_000, 1), _billed(1, 20_000, 2_000, 2),
                                _billed(2, 20_000, 500, 1)])
    for name, value in changes.items():
        setattr(phase, name, value)
    return phase


def test_a_phase_billed_as_acknowledged_holds_every_invariant():
    r = row(_phase(), freshness_bound_s=10)
    assert r["held"] and r["lost_events"] == r["double_billed_events"] == 0
    assert r["beacons_acknowledged"] == 3 and r["beacons_refused"] == 1


def test_an_acknowledged_beacon_never_billed_is_lost():
    phase = _phase(billed=[_billed(1, 20_000, 2_000, 2)])
    r = row(phase, 10)
    assert r["lost_events"] == 1 and r["double_billed_events"] == 0 and not r["held"]


def test_a_beacon_counted_twice_is_double_billed():
    phase = _phase(billed=[_billed(1, 20_000, 3_000, 3), _billed(2, 20_000, 500, 1)])
    assert row(phase, 10)["double_billed_events"] == 1


def test_a_beacon_acknowledged_twice_counts_once():
    assert acknowledged([Beacon("i1", 1, 1_000, 204), Beacon("i1", 1, 1_000, 204)]) == {1: {"events": 1,
                                                                                           "micros": 1_000}}


def test_billing_above_the_budget_counts_its_micros():
    phase = _phase(billed=[_billed(1, 20_000, 12_500, 2), _billed(2, 20_000, 500, 1)])
    assert row(phase, 10)["billed_above_budget_micros"] == 2_500


def test_absorbed_overspend_within_the_outstanding_slices_holds_and_beyond_them_counts():
    within = _phase(billed=[_billed(1, 20_000, 2_000, 2, absorbed=300), _billed(2, 20_000, 500, 1)],
                    slices_at_fault_micros=300)
    beyond = _phase(billed=[_billed(1, 20_000, 2_000, 2, absorbed=300), _billed(2, 20_000, 500, 1)],
                    slices_at_fault_micros=100)
    assert row(within, 10)["overspend_beyond_slices_micros"] == 0
    assert row(beyond, 10)["overspend_beyond_slices_micros"] == 200


def test_a_paused_campaign_served_after_the_freshness_bound_is_counted_and_within_it_is_not():
    phase = _phase(paused_at_s={2: 100.0},
                   answers=[Answer(105.0, 105.1, "a", 200, (2,)), Answer(111.0, 111.1, "a", 200, (2,)),
                            Answer(112.0, 112.1, "a", 200, (1,))])
    assert row(phase, 10)["paused_served_after_bound"] == 1


def test_with_redis_down_a_capped_campaign_served_is_counted_and_uncapped_ones_must_serve():
    served_capped = _phase(redis_down=(100.0, 110.0), answers=[Answer(101.0, 101.1, "a", 200, (1, 2))])
    only_uncapped = _phase(redis_down=(100.0, 110.0), answers=[Answer(101.0, 101.1, "a", 200, (2,))])
    nothing_served = _phase(redis_down=(100.0, 110.0), answers=[Answer(101.0, 101.1, "a", 200, ())])
    assert row(served_capped, 10)["capped_served_without_redis"] == 1
    assert row(only_uncapped, 10)["held"] and row(only_uncapped, 10)["uncapped_served_without_redis"] == 1
    assert not row(nothing_served, 10)["held"]


def test_a_5xx_counts_unless_it_is_a_503_for_overload_and_a_refused_connection_is_no_answer():
    phase = _phase(answers=[Answer(1.0, 1.1, "a", 503, (), overloaded=True), Answer(1.0, 1.1, "a", None),
                            Answer(1.0, 1.1, "a", 500), Answer(1.0, 1.1, "a", 503, (), overloaded=False)],
                   beacons=[*_phase().beacons, Beacon("i9", 2, 500, 502)])
    assert row(phase, 10)["server_errors"] == 3


def test_recovery_at_or_past_the_bound_or_never_breaks_the_row():
    assert not row(_phase(recovery_s=90.0), 10)["held"]
    assert not row(_phase(recovery_s=None), 10)["held"]


def test_the_evidence_counts_what_the_phase_exercised():
    campaigns = {1: {"role": "paused", "budget_micros": 10_000}, 2: {"role": "capped", "budget_micros": 10_000},
                 3: {"role": "metered", "budget_micros": 2_000}}
    phase = PhaseRecord("redis", campaigns, paused_at_s={1: 100.0},
                        answers=[Answer(98.0, 98.1, "a", 200, (1, 2)), Answer(101.0, 101.1, "a", 200, (1, 3))],
                        billed=[_billed(3, 20_000, 2_000, 2, absorbed=100)])
    r = row(phase, 10)
    assert (r["paused_served_before_pause"], r["capped_served"]) == (1, 1)
    assert (r["metered_spend_micros"], r["metered_budget_micros"]) == (2_100, 2_000)


def test_an_impression_id_served_for_two_requests_is_counted_and_a_resend_of_one_request_is_not():
    resent = _phase(beacons=[Beacon("i1", 1, 1_000, 204, request=4), Beacon("i1", 1, 1_000, 204, request=4),
                             Beacon("i2", 1, 1_000, 204, request=5)])
    shared = _phase(beacons=[Beacon("i1", 1, 1_000, 204, request=4), Beacon("i1", 1, 1_000, 204, request=5)])
    assert row(resent, 10)["shared_impression_ids"] == 0
    assert row(resent, 10)["request_ids_served_twice"] == 1  # requests 4 and 5 share a request id; both served
    assert row(shared, 10)["shared_impression_ids"] == 1 and not row(shared, 10)["held"]
