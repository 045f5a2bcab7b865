// The pacing dashboard page: polls the API every 2 s and draws the campaign table, the selected campaign's
// spend-vs-target and p charts, and the fleet panels. Plain JS, no build step; charts with the vendored uPlot.
// What the charts draw is exposed on window.adserveDashboard (the arrays handed to uPlot), and the charts
// themselves on window.adserveCharts, for tests.
"use strict";

(function () {
  const POLL_MS = 2000;
  const PAGE = 100;
  // The table answers "who is off pace, and why": the rest of a campaign (budget, billed, remaining, forecast)
  // is in its panel. Each header says what its column means (title, shown on hover).
  const COLUMNS = [
    ["campaign_id", "campaign", "int", "campaign id"],
    ["advertiser_id", "adv.", "int", "advertiser id"],
    ["state", "budget state", "state",
     "the budget job's state today: OPEN (paced by p), METERED (near its limit: spends only through slices), " +
     "STOPPED (its budget is spent). A status other than ACTIVE in the campaign store is named after it: such a " +
     "campaign enters no auction whatever its budget state"],
    ["participation_probability", "p", "p",
     "participation probability: the share of eligible auctions the campaign enters; blank where it enters none " +
     "(STOPPED, or not ACTIVE in the store)"],
    ["committed_micros", "committed", "money", "billed spend plus served spend not billed yet"],
    ["target_micros", "target now", "money", "what the pacing curve asks for by now"],
    ["pace_ratio", "pace", "ratio", "committed / target now"],
    ["pace", "", "text", "under, on or over pace (within 5 %)"],
    ["under_delivery", "why under", "text", "why the campaign delivers less than its target, when it does"],
  ];
  const view = {
    campaigns: [], total: 0, query: { sort: "campaign_id", order: "asc", offset: 0 },
    selected: null, campaign: null, series: null, fleet: null, fleetRefused: null, polls: 0, error: null,
  };
  window.adserveDashboard = view;
  let spendChart = null;
  let pChart = null;
  let timer = null;
  let generation = 0; // the latest refresh; an older one that finishes late schedules nothing

  const $ = (id) => document.getElementById(id);

  function money(micros) {
    if (micros === null || micros === undefined) return "";
    return "$" + (micros / 1e6).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  }

  // Whether the campaign enters auctions at all: p means nothing for one that does not.
  function inAuctions(campaign) {
    return campaign.state !== "STOPPED" && (campaign.status === null || campaign.status === undefined ||
                                            campaign.status === "ACTIVE");
  }

  function cellText(campaign, name, kind) {
    if (kind === "state") {
      const state = campaign.state || "no state";
      return campaign.status && campaign.status !== "ACTIVE" ? `${state} \u00b7 ${campaign.status.toLowerCase()}` : state;
    }
    if (kind === "p" && !inAuctions(campaign)) return "";
    return cell(campaign[name], kind);
  }

  function cell(value, kind) {
    if (value === null || value === undefined) return "";
    if (kind === "money") return money(value);
    if (kind === "p") return value.toFixed(4);
    if (kind === "ratio") return value.toFixed(2);
    return String(value);
  }

  function clock(minute) {
    const h = Math.floor(minute / 60), m = Math.round(minute % 60);
    return String(h).padStart(2, "0") + ":" + String(m).padStart(2, "0");
  }

  function listUrl() {
    const params = new URLSearchParams();
    const q = view.query;
    const advertiser = $("filter-advertiser").value.trim();
    if (advertiser !== "") params.set("advertiser_id", advertiser);
    if ($("filter-state").value) params.set("state", $("filter-state").value);
    if ($("filter-pace").value) params.set("pace", $("filter-pace").value);
    params.set("sort", q.sort);
    params.set("order", q.order);
    params.set("limit", String(PAGE));
    params.set("offset", String(q.offset));
    return "/v1/pacing/campaigns?" + params.toString();
  }

  // A dashboard with auth takes a bearer token: the operators' token, or an advertiser's API key (its own
  // campaigns). It comes once in the address (#token=...), which is then cleared, or is asked for at the first
  // 401; it is kept for this tab only (sessionStorage).
  const TOKEN_KEY = "adserve-dashboard-token";
  let asked = false;

  function token() {
    const match = location.hash.match(/(?:^#|&)token=([^&]+)/);
    if (match) {
      sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
    return sessionStorage.getItem(TOKEN_KEY);
  }

  async function getJson(url) {
    const bearer = token();
    const response = await fetch(url, { cache: "no-store",
                                        headers: bearer ? { Authorization: "Bearer " + bearer } : {} });
    if (response.status === 401 && !asked) {
      asked = true;
      const entered = window.prompt("This dashboard needs a token: the operators' token, or your advertiser API key");
      if (entered && entered.trim()) {
        sessionStorage.setItem(TOKEN_KEY, entered.trim());
        asked = false;
        return getJson(url);
      }
    }
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || (url + ": HTTP " + response.status));
    return body;
  }

  function renderHead() {
    const row = document.querySelector("#campaigns thead tr");
    row.textContent = "";
    for (const [name, title, kind, meaning] of COLUMNS) {
      const th = document.createElement("th");
      th.textContent = title;
      th.title = meaning;
      th.dataset.column = name;
      if (kind === "text" || kind === "state") th.className = "text";
      if (view.query.sort === name) th.classList.add("sorted-" + view.query.order);
      th.addEventListener("click", () => {
        const q = view.query;
        q.order = q.sort === name && q.order === "asc" ? "desc" : "asc";
        q.sort = name;
        q.offset = 0;
        renderHead();
        refresh();
      });
      row.appendChild(th);
    }
  }

  function renderTable() {
    const body = document.querySelector("#campaigns tbody");
    body.textContent = "";
    for (const campaign of view.campaigns) {
      const tr = document.createElement("tr");
      tr.dataset.campaignId = String(campaign.campaign_id);
      if (campaign.campaign_id === view.selected) tr.className = "selected";
      for (const [name, , kind] of COLUMNS) {
        const td = document.createElement("td");
        td.textContent = cellText(campaign, name, kind);
        if (kind === "text" || kind === "state") td.className = "text";
        if (name === "pace") td.classList.add("pace-" + campaign.pace);
        if (name === "under_delivery") td.classList.add("why");
        tr.appendChild(td);
      }
      tr.addEventListener("click", () => { view.selected = campaign.campaign_id; refresh(); });
      body.appendChild(tr);
    }
    const q = view.query;
    const last = Math.min(q.offset + view.campaigns.length, view.total);
    $("total").textContent = view.total ? `${q.offset + 1}-${last} of ${view.total}` : "no campaigns";
  }

  // Axis labels: compact money ($850, $15k, $1.2M) and p with two decimals; the axis is as wide as its longest
  // label, so no label is cut at the chart's edge.
  function compactMoney(micros) {
    const dollars = micros / 1e6, size = Math.abs(dollars);
    if (size >= 1e6) return "$" + +(dollars / 1e6).toFixed(2) + "M";
    if (size >= 1e3) return "$" + +(dollars / 1e3).toFixed(1) + "k";
    return "$" + +dollars.toFixed(2);
  }

  function axisSize(u, values, axisIdx, cycleNum) {
    const axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size; // settled: uPlot asks until the size stops changing
    u.ctx.font = axis.font[0];
    const widest = (values || []).reduce((w, v) => Math.max(w, u.ctx.measureText(v).width / devicePixelRatio), 0);
    return Math.ceil(widest) + (axis.ticks.size || 10) + (axis.gap || 5) + 8;
  }

  // With the pointer off the chart its legend shows the latest point's values, not empty ones.
  function legendAtLatest(u) {
    if (u.cursor.idx === null || u.cursor.idx === undefined) {
      const last = u.data[0].length - 1;
      if (last >= 0) u.setLegend({ idx: last }, false);
    }
  }

  function chartOptions(title, series, axisValues, extra) {
    const width = Math.max(300, $("detail").clientWidth - 24);
    return Object.assign({
      title, width, height: 200,
      scales: { x: { time: false } },
      axes: [{ label: "local time", values: (u, ticks) => ticks.map(clock), incrs: [15, 30, 60, 120, 180, 240, 360] },
             { values: axisValues, size: axisSize }],
      series: [{ label: "minute", value: (u, v) => (v === null ? "" : clock(v)) }, ...series],
      hooks: { setCursor: [legendAtLatest], setData: [legendAtLatest] },
    }, extra || {});
  }

  // p every minute swings with each 10 s step; drawn minute by minute over a day it fills the chart. The chart
  // draws it in buckets of whole minutes (as many as keep a bucket a few pixels wide): the bucket's mean as the
  // line, its lowest and highest minute as the band around it.
  function pBuckets(minutes, ps, width) {
    const n = minutes.length;
    const size = Math.max(1, Math.ceil(n / Math.max(30, Math.floor(width / 4))));
    const out = { minutes: [], mean: [], low: [], high: [], bucket_minutes: size };
    for (let i = 0; i < n; i += size) {
      let sum = 0, count = 0, low = Infinity, high = -Infinity;
      for (let j = i; j < Math.min(n, i + size); j++) {
        const p = ps[j];
        if (p === null || p === undefined) continue;
        sum += p; count += 1; low = Math.min(low, p); high = Math.max(high, p);
      }
      out.minutes.push(minutes[i]);
      out.mean.push(count ? sum / count : null);
      out.low.push(count ? low : null);
      out.high.push(count ? high : null);
    }
    return out;
  }

  function renderDetail(detail) {
    const series = detail.series || { minutes: [], target: [], committed: [], p: [] };
    const spendData = [series.minutes.slice(), series.target.slice(), series.committed.slice()];
    const band = pBuckets(series.minutes, series.p, Math.max(300, $("detail").clientWidth - 24));
    const pData = [band.minutes, band.mean, band.low, band.high];
    const p4 = (u, v) => (v === null || v === undefined ? "" : v.toFixed(4));
    if (spendChart === null) {
      const moneyAxis = (u, ticks) => ticks.map(compactMoney);
      spendChart = new uPlot(chartOptions("spend vs target (USD)", [
        { label: "target (pacing curve)", stroke: "#7a869a", width: 1.5, dash: [6, 4], value: (u, v) => money(v) },
        { label: "committed", stroke: "#1f6feb", width: 2, value: (u, v) => money(v) },
      ], moneyAxis), spendData, $("spend-chart"));
      pChart = new uPlot(chartOptions("participation probability p", [
        { label: "p (mean)", stroke: "#2da44e", width: 2, value: p4 },
        { label: "lowest", stroke: "rgba(45,164,78,0.35)", width: 1, value: p4 },
        { label: "highest", stroke: "rgba(45,164,78,0.35)", width: 1, value: p4 },
      ], (u, ticks) => ticks.map((t) => t.toFixed(2)),
      { bands: [{ series: [3, 2], fill: "rgba(45,164,78,0.15)" }], scales: { x: { time: false }, y: { range: [0, 1] } } }),
      pData, $("p-chart"));
      window.adserveCharts = { spend: spendChart, p: pChart }; // the uPlot objects, for tests (not serialisable)
    } else {
      spendChart.setData(spendData);
      pChart.setData(pData);
    }
    const moves = series.p_moves_by_hour || [];
    const busiest = moves.reduce((best, m, h) => (m > moves[best] ? h : best), 0);
    $("p-moves").textContent = (band.bucket_minutes > 1 ? `p in ${band.bucket_minutes}-minute buckets. ` : "") +
      (moves.length
        ? `p moved (sum of |change|) at most ${moves[busiest].toFixed(3)} in an hour (${String(busiest).padStart(2, "0")}:00), ` +
          `${moves.reduce((a, b) => a + b, 0).toFixed(3)} over the day`
        : "");
    const row = detail.campaign;
    $("detail-title").textContent = `campaign ${row.campaign_id}: ${row.state || "no state"}` +
      (row.status && row.status !== "ACTIVE" ? `, ${row.status.toLowerCase()} in the store` : "") +
      (row.under_delivery ? ` (under: ${row.under_delivery})` : "") +
      (detail.series_error ? ` - ${detail.series_error}` : "");
    $("spend-caption").textContent = `budget ${money(row.daily_budget_micros)} \u00b7 target now ` +
      `${money(row.target_micros)} \u00b7 committed ${money(row.committed_micros)} \u00b7 billed ` +
      `${money(row.billed_micros)} \u00b7 remaining ${money(row.remaining_micros)} \u00b7 forecast at day end ` +
      `${money(row.forecast_micros)}`;
    view.campaign = row;
    view.series = {
      campaign_id: row.campaign_id, minutes: spendChart.data[0], target: spendChart.data[1],
      committed: spendChart.data[2], p: series.p.slice(),
      p_band: { minutes: pChart.data[0], mean: pChart.data[1], low: pChart.data[2], high: pChart.data[3] },
    };
  }

  function renderFleet(fleet) {
    view.fleet = fleet;
    $("fleet-reason").textContent = fleet.reason || "";
    const holder = $("fleet-panels");
    holder.textContent = "";
    for (const panel of fleet.panels) {
      const div = document.createElement("div");
      div.className = "panel";
      div.dataset.panel = panel.name;
      const title = document.createElement("div");
      title.className = "title";
      title.textContent = panel.title;
      div.appendChild(title);
      if (panel.error) {
        const error = document.createElement("div");
        error.className = "error";
        error.textContent = panel.error;
        div.appendChild(error);
      }
      for (const s of panel.series) {
        const value = document.createElement("div");
        value.className = "value";
        const labels = Object.values(s.labels).join(" ");
        value.textContent = (labels ? labels + ": " : "") + formatUnit(s.value, panel.unit);
        div.appendChild(value);
      }
      if (!panel.error && panel.series.length === 0) {
        const none = document.createElement("div");
        none.className = "value";
        none.textContent = "no data";
        div.appendChild(none);
      }
      holder.appendChild(div);
    }
  }

  function formatUnit(value, unit) {
    if (value === null || value === undefined) return "-";
    if (unit === "percentunit") return (value * 100).toFixed(1) + " %";
    if (unit === "s") return value < 1 ? (value * 1000).toFixed(1) + " ms" : value.toFixed(1) + " s";
    if (unit === "reqps") return value.toFixed(1) + "/s";
    return value.toFixed(3);
  }

  async function refresh() {
    clearTimeout(timer);
    const mine = ++generation;
    try {
      const list = await getJson(listUrl());
      if (mine !== generation) return;
      view.campaigns = list.campaigns;
      view.total = list.total;
      if (view.selected === null && view.campaigns.length) view.selected = view.campaigns[0].campaign_id;
      renderTable();
      const [detail, fleet] = await Promise.all([
        view.selected === null ? null : getJson("/v1/pacing/campaigns/" + view.selected),
        // the fleet is the operators' (an advertiser's key gets 403): its refusal is the panel's reason, and a
        // page that was refused once does not ask again
        view.fleetRefused ? { panels: [], reason: view.fleetRefused }
          : getJson("/v1/fleet").catch((e) => ({ panels: [], reason: (view.fleetRefused = String(e.message || e)) })),
      ]);
      if (mine !== generation) return;
      if (detail) renderDetail(detail);
      renderFleet(fleet);
      view.polls += 1;
      view.error = null;
      $("status").textContent = "updated " + new Date().toLocaleTimeString();
      $("status").className = "status";
    } catch (e) {
      view.error = String(e.message || e);
      $("status").textContent = view.error;
      $("status").className = "status error";
    } finally {
      if (mine === generation) timer = setTimeout(refresh, POLL_MS);
    }
  }

  function start() {
    renderHead();
    for (const id of ["filter-advertiser", "filter-state", "filter-pace"]) {
      $(id).addEventListener("change", () => { view.query.offset = 0; refresh(); });
    }
    $("page-prev").addEventListener("click", () => {
      view.query.offset = Math.max(0, view.query.offset - PAGE);
      refresh();
    });
    $("page-next").addEventListener("click", () => {
      if (view.query.offset + PAGE < view.total) { view.query.offset += PAGE; refresh(); }
    });
    refresh();
  }

  start();
})();
