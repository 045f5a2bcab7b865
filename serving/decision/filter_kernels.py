"""Compiled (numba) passes of the candidate filters (serving.decision.filters). Pure: arrays in, arrays out.

`static_checks` runs the per-candidate checks in their order (campaign known, status, flight, daypart, frequency,
hidden advertiser), counts each candidate once under the first check it fails, and collects the campaigns the
survivors belong to; `coin_and_budget` then flips the pacing coin (one uniform per campaign, drawn by the caller
in the order of `static_checks`' campaign rows, so the random stream is the one the array path uses) and applies
the budget state. Both read the campaign table's hot fields at each candidate's campaign row directly: no gathered
copy, no temporary array per check."""
from __future__ import annotations

import numba as nb
import numpy as np

# Indices of the counts `static_checks` returns, in check order.
UNKNOWN, STATUS, FLIGHT, DAYPART, FREQUENCY, HIDDEN = range(6)
CHECKS = 6
FREQUENCY_NONE, FREQUENCY_UNAVAILABLE, FREQUENCY_RECORD = 0, 1, 2


@nb.njit(cache=True, nogil=True)
def _member(sorted_values, value) -> bool:
    if sorted_values.shape[0] == 0:
        return False
    i = np.searchsorted(sorted_values, value)
    return i < sorted_values.shape[0] and sorted_values[i] == value


@nb.njit(cache=True, nogil=True)
def static_checks(crow, hot, active, request, slot_of, results):
    """results = (keep, coin, counts): keep[j]: candidate j (campaign row crow[j], -1 if unknown) passes every
    check; counts[check] += the candidates that failed it first. coin[j]: for a kept candidate, the position of
    its campaign among the survivors' distinct campaign rows in ascending order (whose uniform it flips).
    hot: the campaign table's hot records (status, flight, caps, ids), read at each candidate's row; active: the
    status that serves. request = (now, daypart_ok, frequency_mode, capped_ids, hidden_ids): daypart_ok per
    candidate, or empty when no campaign has dayparts; capped_ids / hidden_ids: sorted campaign / advertiser ids.
    slot_of: scratch of one int32 per campaign row, -1 on entry and again on return.
    Returns the survivors' distinct campaign rows, ascending, and their campaign ids, ascending (the budget
    job's eligible set)."""
    now, daypart_ok, frequency_mode, capped_ids, hidden_ids = request
    keep, coin, counts = results
    n = crow.shape[0]
    dayparted = daypart_ok.shape[0] > 0
    distinct = np.empty(n, np.int64)
    found = 0
    for j in range(n):
        c = crow[j]
        keep[j] = False
        if c < 0:
            counts[UNKNOWN] += 1
            continue
        campaign = hot[c]
        if campaign.status != active:
            counts[STATUS] += 1
            continue
        if not (campaign.flight_start <= now and now < campaign.flight_end):
            counts[FLIGHT] += 1
            continue
        if dayparted and not daypart_ok[j]:
            counts[DAYPART] += 1
            continue
        if frequency_mode == FREQUENCY_UNAVAILABLE:
            if campaign.cap_per_day > 0 or campaign.cap_per_week > 0:
                counts[FREQUENCY] += 1
                continue
        elif frequency_mode == FREQUENCY_RECORD and _member(capped_ids, campaign.campaign_id):
            counts[FREQUENCY] += 1
            continue
        if _member(hidden_ids, campaign.advertiser_id):
            counts[HIDDEN] += 1
            continue
        keep[j] = True
        if slot_of[c] < 0:
            slot_of[c] = found
            distinct[found] = c
            found += 1
    rows = np.sort(distinct[:found])
    ids = np.empty(found, np.int64)
    for i in range(found):
        slot_of[rows[i]] = i
        ids[i] = hot[rows[i]].campaign_id
    for j in range(n):
        if keep[j]:
            coin[j] = slot_of[crow[j]]
    for i in range(found):
        slot_of[rows[i]] = -1
    return rows, np.sort(ids)


@nb.njit(cache=True, nogil=True)
def coin_and_budget(crow, keep, coin, uniforms, hot, budget_states, served, short):
    """For each kept candidate: its campaign's coin (uniforms[coin[j]]) entered with probability p
    (hot: the campaign table's hot records, participation among them), and its budget state allows serving
    (budget_states = (OPEN, METERED): OPEN, or METERED with a slice held). served[j]: both; short[j]: entered
    but METERED without a slice. Returns (candidates the budget refused, those that lost the coin with the
    budget allowing them)."""
    open_state, metered_state = budget_states
    refused_budget = 0
    lost_coin = 0
    for j in range(crow.shape[0]):
        served[j] = False
        short[j] = False
        if not keep[j]:
            continue
        c = crow[j]
        campaign = hot[c]
        entered = uniforms[coin[j]] < campaign.participation
        state = campaign.budget_state
        budget_ok = state == open_state or (state == metered_state and campaign.slice_held)
        if not budget_ok:
            refused_budget += 1
        elif not entered:
            lost_coin += 1
        served[j] = entered and budget_ok
        short[j] = entered and state == metered_state and not campaign.slice_held
    return refused_budget, lost_coin
