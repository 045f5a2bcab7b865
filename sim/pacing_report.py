"""The simulated day's figures, its text report and its HTML picture. Pure: takes what `run_day` returned,
reads no clock and writes nothing. Each figure's definition, and why it is measured that way, is in
docs/pacing.md ("The figures")."""
from __future__ import annotations

import html
import math
from pathlib import PurePath
from typing import Any

import numpy as np

from sim.day_reports import summary_line as reports_line
from sim.pacing_day import DOLLAR
from core.billing import SIZE_CLASSES, size_class
from core.pacing import p_moves_by_hour


def _hour_targets(day_pacing, budget_micros: int) -> np.ndarray | None:
    """The job's cumulative target at each hour boundary, from its per-minute points."""
    if day_pacing is None or not day_pacing.points:
        return None
    minutes = np.array([p.minute for p in day_pacing.points])
    targets = np.array([p.target_micros for p in day_pacing.points], dtype=np.float64)
    bounds = np.arange(0, 1441, 60)
    return np.interp(bounds, minutes, targets, left=0.0, right=float(budget_micros))


def _special(c) -> str:
    """The scripted change a campaign goes through in the day, if any."""
    return "paused" if c.name == "medium-1" else "lowered" if c.name == "medium-2" else \
        "raised" if c.name == "medium-0" else "launched" if c.launch_s else ""


SPIKE_HOUR = 20  # the simulated day's evening spike: p is meant to move then


def _campaign_row(campaign_id: int, day, day_pacing) -> dict[str, Any]:
    """One campaign's figures: delivery, overspend, its state at the end and its hourly curve errors."""
    c = day.campaign
    final_p = next((p for p in day.p_by_minute[::-1] if not math.isnan(p)), math.nan)
    final_state = next((s for s in day.state_by_minute[::-1] if s), "")
    special = _special(c)
    seen = day.p_by_minute[~np.isnan(day.p_by_minute)]
    throttled = float(np.mean(seen < 0.999)) if len(seen) else 0.0  # share of the day it was held below p = 1
    allowed = special not in ("paused", "lowered") and (final_state == "STOPPED" or throttled >= 0.5)
    errors: dict[str, tuple[float, float] | None] = dict.fromkeys(CURVE_ERRORS)
    targets = _hour_targets(day_pacing, c.budget_micros)
    expected_h = day.expected_by_minute.reshape(24, 60).sum(axis=1)
    if targets is not None and size_class(c.planned_budget_micros) != "small" and allowed:
        target_h = np.diff(targets)
        big = target_h >= 0.02 * c.budget_micros
        level = day.bill.billed_micros / max(1.0, float(expected_h.sum()))
        spend = {"hour_error": level * expected_h, "hour_error_expected": expected_h,
                 "hour_error_billed": day.billed_by_minute.reshape(24, 60).sum(axis=1)}
        if big.any():
            errors = {k: (float(np.abs(v[big] - target_h[big]).sum()), float(target_h[big].sum()))
                      for k, v in spend.items()}
    return {
        "campaign_id": campaign_id, "name": c.name, "class": size_class(c.planned_budget_micros),
        "budget_micros": c.budget_micros, "billed_micros": day.bill.billed_micros,
        "absorbed_micros": day.bill.absorbed_micros, "expected_micros": int(day.expected_by_minute.sum()),
        "served": int(day.served_by_minute.sum()), "clicks": day.clicks, "final_p": final_p,
        "final_state": final_state, "throttled_share": round(throttled, 3), "traffic_allowed": allowed,
        "special": special,
        "delivery_pct": 100 * day.bill.billed_micros / c.budget_micros if c.budget_micros else 0.0,
        **errors, "stopped_after_lower_s": day.stopped_after_lower_s,
        "hourly_expected_micros": [int(v) for v in expected_h],
        "hourly_target_micros": None if targets is None else [int(v) for v in np.diff(targets)],
        "billed_above_budget_micros": day.bill.billed_above_micros,
        "p_moves_by_hour": (moves := p_moves_by_hour(range(len(day.p_by_minute)), day.p_by_minute)),
        "p_moves_max_per_hour": max(m for h, m in enumerate(moves) if h != SPIKE_HOUR)}


def _by_class(per_campaign: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    classes = {}
    for name in SIZE_CLASSES:
        rows = [r for r in per_campaign if r["class"] == name]
        allowed = [r for r in rows if r["traffic_allowed"]]
        billed = sum(r["billed_micros"] for r in rows)
        absorbed = sum(r["absorbed_micros"] for r in rows)
        classes[name] = {
            "campaigns": len(rows), "traffic_allowed": len(allowed),
            "delivery_pct": _pct(sum(r["billed_micros"] for r in allowed), sum(r["budget_micros"] for r in allowed)),
            "min_delivery_pct": min((r["delivery_pct"] for r in allowed), default=None),
            "billed_usd": billed / DOLLAR, "absorbed_usd": absorbed / DOLLAR, "absorbed_pct": _pct(absorbed, billed),
            **_curve_errors(rows)}
    return classes


def figures(result: dict[str, Any]) -> dict[str, Any]:
    days, pacing = result["days"], result["pacing"]
    per_campaign = [_campaign_row(campaign_id, day, pacing.get(campaign_id)) for campaign_id, day in days.items()]
    classes = _by_class(per_campaign)
    paced = [r for r in per_campaign if r["class"] != "small"]
    small = [r for r in per_campaign if r["class"] == "small"]
    allowed = [r for r in per_campaign if r["traffic_allowed"]]
    lowered = [r for r in per_campaign if r["special"] == "lowered"]
    launched = [_launched(days[r["campaign_id"]], r) for r in per_campaign if r["special"] == "launched"]
    return {
        "campaigns": len(per_campaign),
        "requests": result["requests"], "filled_slots": result["filled_slots"],
        "overspend_pct_paced": _pct(sum(r["absorbed_micros"] for r in paced), sum(r["billed_micros"] for r in paced)),
        "max_overspend_clicks_small": max((r["absorbed_micros"] / (2 * DOLLAR) for r in small), default=0.0),
        "billed_above_budget_micros": sum(r["billed_above_budget_micros"] for r in per_campaign),
        "delivery_pct": _pct(sum(r["billed_micros"] for r in allowed), sum(r["budget_micros"] for r in allowed)),
        "campaigns_delivering_95_to_102_pct": _pct(sum(1 for r in allowed if 95 <= r["delivery_pct"] <= 102),
                                                   len(allowed)),
        **_curve_errors(paced),
        "p_moves_max_per_hour_large": max((r["p_moves_max_per_hour"] for r in per_campaign
                                           if r["class"] == "large" and r["traffic_allowed"]), default=None),
        "lowered_stopped_serving_after_s": lowered[0]["stopped_after_lower_s"] if lowered else None,
        "launched": launched[0] if launched else None, "last_week": result.get("last_week"),
        "billed_by": (result.get("billing") or {}).get("by", "core.billing"),
        "billing_recount_mismatches": len((result.get("billing") or {}).get("recount_mismatches") or []),
        "billing": result.get("billing"),
        **reports_figures(result.get("reports")), "dashboard": result.get("dashboard"),
        "by_class": classes, "per_campaign": per_campaign,
        "budget_scale": round(result.get("budget_scale", 1.0), 4),
        "wall_s": round(result["wall_s"], 1), "day_wall_s": round(result.get("day_wall_s", result["wall_s"]), 1),
        "waited_for_job_s": round(result["waited_s"], 1),
        "lead_s": result["lead_s"], "servers": result["servers"]}


def reports_figures(reports: dict[str, Any] | None) -> dict[str, Any]:
    """The daily reports against the recount (sim.day_reports): whether they are equal (None: not checked),
    the campaigns compared and every difference."""
    reports = reports or {}
    return {"reports_equal_recount": reports.get("reports_equal_recount"),
            "report_campaigns": reports.get("report_campaigns", 0),
            "report_differences": reports.get("report_differences") or [],
            "reports_error": reports.get("reports_error")}


def dashboard_lines(dashboard: dict[str, Any] | None) -> list[str]:
    """Where the day's pacing dashboard served and its screenshot, or why there is none."""
    if not dashboard:
        return ["pacing dashboard: not started (--no-dashboard)"]
    if not dashboard.get("url"):
        return [f"pacing dashboard: not served ({dashboard.get('error')})"]
    listed = (f"answered at the end of the day with {dashboard.get('campaigns_listed', 0)} campaigns"
              if dashboard.get("answered") else f"did not answer at the end of the day ({dashboard.get('error')})")
    shot = (f"screenshot: {dashboard['screenshot']} (campaign {dashboard.get('selected_campaign')} selected)"
            if dashboard.get("screenshot") else f"no screenshot: {dashboard.get('screenshot_error')}")
    lines = [f"pacing dashboard: {dashboard['url']} (live while the day ran; {listed})", f"  {shot}"]
    if dashboard.get("fleet_error"):
        lines.append(f"  fleet panels: not evaluated ({dashboard['fleet_error']})")
    elif "fleet_with_data" in dashboard:
        with_data, without = dashboard["fleet_with_data"], dashboard.get("fleet_without_data") or []
        lines.append(f"  fleet panels: {len(with_data)} of {len(with_data) + len(without)} with data"
                     + (f"; none for {', '.join(without)}" if without else ""))
    return lines


def _launched(day, row: dict[str, Any]) -> dict[str, Any]:
    """The new campaign's start: p in its first ten minutes, then its hours in money against the target."""
    start = day.campaign.launch_s // 60
    level = row["billed_micros"] / max(1, row["expected_micros"])
    hours = range(day.campaign.launch_s // 3600, 24)
    targets = row["hourly_target_micros"] or [0] * 24
    return {"campaign_id": row["campaign_id"], "name": row["name"], "launch_minute": start,
            "budget_micros": row["budget_micros"], "delivery_pct": round(row["delivery_pct"], 3),
            "p_first_minutes": [None if math.isnan(p) else round(float(p), 4)
                                for p in day.p_by_minute[start:start + 10]],
            "hourly_money_micros": [int(level * row["hourly_expected_micros"][h]) for h in hours],
            "hourly_target_micros": [int(targets[h]) for h in hours]}


CURVE_ERRORS = {"hour_error": "curve_error_pct_hourly", "hour_error_expected": "curve_error_pct_hourly_expected",
                "hour_error_billed": "curve_error_pct_hourly_billed"}  # per campaign (error, target) -> figure


def _curve_errors(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each hourly curve-error figure over these campaigns: their errors summed over their targets."""
    out = {}
    for key, figure in CURVE_ERRORS.items():
        pairs = [r[key] for r in rows if r[key]]
        out[figure] = _pct(sum(e for e, _ in pairs), sum(t for _, t in pairs)) if pairs else None
    return out


def _pct(part: float, whole: float) -> float | None:
    return round(100.0 * part / whole, 3) if whole else None


def text(f: dict[str, Any]) -> str:
    lines = [f"simulated day: {f['campaigns']} campaigns, {f['requests']:,} requests, {f['filled_slots']:,} ads "
             f"served, {f['servers']} ad servers, budget job in Flink ({f['wall_s']:.0f} s)",
             f"budgets at {100 * f.get('budget_scale', 1.0):g} % of the full-size day's (size classes by the "
             "full-size budget)" if f.get("budget_scale", 1.0) != 1.0 else "the full-size day", "",
             f"{'class':<8}{'campaigns':>10}{'delivery':>11}{'min':>8}{'billed $':>13}{'absorbed $':>12}"
             f"{'absorbed %':>12}{'curve err %':>13}"]
    for name, c in f["by_class"].items():
        lines.append(f"{name:<8}{c['campaigns']:>10}{_fmt(c['delivery_pct'], '%'):>11}"
                     f"{_fmt(c['min_delivery_pct'], '%'):>8}{c['billed_usd']:>13,.2f}{c['absorbed_usd']:>12,.2f}"
                     f"{_fmt(c['absorbed_pct'], ''):>12}{_fmt(c['curve_error_pct_hourly'], ''):>13}")
    lines += ["",
              f"delivery where traffic allowed: {_fmt(f['delivery_pct'], '%')} of budget "
              f"({_fmt(f['campaigns_delivering_95_to_102_pct'], '%')} of those campaigns within 95-102 %)",
              f"absorbed overspend, paced campaigns: {_fmt(f['overspend_pct_paced'], '%')} of spend; small campaigns: "
              f"at most {f['max_overspend_clicks_small']:.1f} clicks",
              f"billed above a budget: {f['billed_above_budget_micros']} micros (billed by {f['billed_by']}; "
              f"campaigns whose totals differ from the recount of the same beacons: "
              f"{f['billing_recount_mismatches']})",
              f"hourly spend-to-curve error (paced, weighted): {_fmt(f['curve_error_pct_hourly'], '%')} "
              f"(in expected cost: {_fmt(f['curve_error_pct_hourly_expected'], '%')}, in clicks billed: "
              f"{_fmt(f['curve_error_pct_hourly_billed'], '%')})",
              f"p moved, large campaigns: at most {_fmt(f['p_moves_max_per_hour_large'], '')} (sum of |change|) in "
              f"an hour outside {SPIKE_HOUR}:00-{SPIKE_HOUR + 1}:00",
              reports_line(f),
              f"budget lowered below spend at 16:00: served for {f['lowered_stopped_serving_after_s']} s more"]
    launched = f.get("launched")
    if launched:
        ps = [p for p in launched["p_first_minutes"] if p is not None]
        first_hour = (launched["hourly_money_micros"] or [0])[0], (launched["hourly_target_micros"] or [0])[0]
        lines.append(f"new campaign at {launched['launch_minute'] // 60:02d}:{launched['launch_minute'] % 60:02d} "
                     f"(${launched['budget_micros'] / DOLLAR:,.0f}, no history): p "
                     f"{' -> '.join(f'{p:g}' for p in ps[:4])} over its first minutes, first hour "
                     f"${first_hour[0] / DOLLAR:,.2f} against a target of ${first_hour[1] / DOLLAR:,.2f}, "
                     f"delivered {launched['delivery_pct']:.1f} %")
    lines += dashboard_lines(f.get("dashboard"))
    return "\n".join(lines)


def _fmt(value, unit: str) -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


# ------------------------------------------------------------------ the picture


def _polyline(xs, ys, width, height, y_max, color, dash="") -> str:
    points = " ".join(f"{x * width / 1440:.1f},{height - (y / y_max) * height if y_max else height:.1f}"
                      for x, y in zip(xs, ys) if not (isinstance(y, float) and math.isnan(y)))
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.5" {dash} points="{points}"/>'


def picture(result: dict[str, Any], f: dict[str, Any]) -> str:
    """An HTML page: per campaign, cumulative spend against the job's target curve, and p over the day."""
    days, pacing = result["days"], result["pacing"]
    wanted = ("large-50k", "large-10k-b", "medium-0", "medium-2", "small-0", "launched-15h")
    panels = []
    for day in days.values():
        c = day.campaign
        if c.name not in wanted:
            continue
        minutes = np.arange(1440)
        expected = np.cumsum(day.expected_by_minute) / DOLLAR
        billed = np.cumsum(day.billed_by_minute) / DOLLAR
        points = pacing.get(c.campaign_id).points if pacing.get(c.campaign_id) else []
        target = np.interp(minutes, [p.minute for p in points], [p.target_micros / DOLLAR for p in points]) \
            if points else np.full(1440, math.nan)
        y_max = max(float(np.nanmax(target)) if points else 0, float(expected.max()), float(billed.max()), 1.0) * 1.05
        w, h = 720, 180
        spend_svg = (f'<svg width="{w}" height="{h}" style="background:#fafafa">'
                     + _polyline(minutes, target, w, h, y_max, "#888", 'stroke-dasharray="4 3"')
                     + _polyline(minutes, expected, w, h, y_max, "#1f77b4")
                     + _polyline(minutes, billed, w, h, y_max, "#2ca02c")
                     + "".join(f'<line x1="{x * w / 24}" y1="0" x2="{x * w / 24}" y2="{h}" stroke="#ddd"/>'
                               for x in range(0, 25, 3)) + "</svg>")
        p_svg = (f'<svg width="{w}" height="80" style="background:#fafafa">'
                 + _polyline(minutes, day.p_by_minute, w, 80, 1.0, "#d62728") + "</svg>")
        row = next(r for r in f["per_campaign"] if r["campaign_id"] == c.campaign_id)
        panels.append(
            f"<h3>{html.escape(c.name)}: budget ${c.budget_micros / DOLLAR:,.0f} ({row['special'] or c.bid_type}), "
            f"billed ${row['billed_micros'] / DOLLAR:,.2f}, absorbed ${row['absorbed_micros'] / DOLLAR:,.2f}</h3>"
            f"<p>cumulative spend: <span style='color:#888'>target curve (dashed)</span>, "
            f"<span style='color:#1f77b4'>expected cost served</span>, <span style='color:#2ca02c'>billed</span>; "
            f"y up to ${y_max:,.0f}; grid every 3 h</p>{spend_svg}"
            f"<p>participation probability p (0-1) as the servers saw it</p>{p_svg}")
    body = "\n".join(panels)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>adserve simulate</title></head>"
            f"<body style='font-family:sans-serif'><h1>A simulated day through the budget job</h1>"
            f"<pre>{html.escape(text(f))}</pre>{_dashboard_html(f.get('dashboard'))}{body}</body></html>")


def _dashboard_html(dashboard: dict[str, Any] | None) -> str:
    """The pacing dashboard's address and its end-of-day screenshot (next to this page in the out folder)."""
    if not dashboard or not dashboard.get("url"):
        return ""
    url = html.escape(dashboard["url"])
    again = html.escape(f"adserve serve dashboard --dev --state-topic {dashboard.get('state_topic')} "
                        f"--campaigns-topic {dashboard.get('campaigns_topic')}")
    out = (f"<h2>Pacing dashboard</h2><p>Served live while the day ran at <a href='{url}'>{url}</a>; it stops with "
           f"the run, and <code>{again}</code> serves the day's topics again.</p>")
    if dashboard.get("screenshot"):
        name = html.escape(PurePath(dashboard["screenshot"]).name)
        out += (f"<p>At the end of the day, campaign {dashboard.get('selected_campaign')} selected:</p>"
                f"<a href='{name}'><img src='{name}' alt='the pacing dashboard at the end of the day' "
                "style='max-width:100%;border:1px solid #ccc'></a>")
    else:
        out += f"<p>No screenshot: {html.escape(str(dashboard.get('screenshot_error')))}</p>"
    return out
