// The pacing dashboard page: polls the API every 2 s and draws the campaign table, the selected campaign's
// spend-vs-target and p charts, and the fleet panels. Plain JS, no build step; charts with the vendored uPlot.
// What the charts draw is exposed on window.adserveDashboard (the arrays handed to uPlot), for tests.
"use strict";

(function () {
  const POLL_MS = 2000;
  const PAGE = 100;
  const COLUMNS = [
    ["campaign_id", "campaign", "int"], ["advertiser_id", "advertiser", "int"], ["status", "status", "text"],
    ["state", "state", "text"], ["participation_probability", "p", "p"], ["daily_budget_micros", "budget", "money"],
    ["target_micros", "target", "money"], ["committed_micros", "committed", "money"],
    ["billed_micros", "billed", "money"], ["remaining_micros", "remaining", "money"],
    ["forecast_micros", "forecast", "money"], ["pace_ratio", "pace ratio", "ratio"], ["pace", "pace", "text"],
    ["under_delivery", "why under", "text"],
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
    for (const [name, title, kind] of COLUMNS) {
      const th = document.createElement("th");
      th.textContent = title;
      th.dataset.column = name;
      if (kind === "text") th.className = "text";
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
        td.textContent = cell(campaign[name], kind);
        if (kind === "text") td.className = "text";
        if (name === "pace") td.classList.add("pace-" + campaign.pace);
        tr.appendChild(td);
      }
      tr.addEventListener("click", () => { view.selected = campaign.campaign_id; refresh(); });
      body.appendChild(tr);
    }
    const q = view.query;
    const last = Math.min(q.offset + view.campaigns.length, view.total);
    $("total").textContent = view.total ? `${q.offset + 1}-${last} of ${view.total}` : "no campaigns";
  }

  function chartOptions(title, series, axisValues) {
    const width = Math.max(300, $("detail").clientWidth - 24);
    return {
      title, width, height: 200,
      scales: { x: { time: false } },
      axes: [{ values: (u, ticks) => ticks.map(clock), incrs: [15, 30, 60, 120, 180, 240, 360] },
             { values: axisValues, size: 70 }],
      series: [{ label: "minute", value: (u, v) => (v === null ? "" : clock(v)) }, ...series],
    };
  }

  function renderDetail(detail) {
    const series = detail.series || { minutes: [], target: [], committed: [], p: [] };
    const spendData = [series.minutes.slice(), series.target.slice(), series.committed.slice()];
    const pData = [series.minutes.slice(), series.p.slice()];
    if (spendChart === null) {
      const moneyAxis = (u, ticks) => ticks.map(money);
      spendChart = new uPlot(chartOptions("spend vs target", [
        { label: "target", stroke: "#7a869a", width: 1.5, dash: [6, 4], value: (u, v) => money(v) },
        { label: "committed", stroke: "#1f6feb", width: 2, value: (u, v) => money(v) },
      ], moneyAxis), spendData, $("spend-chart"));
      pChart = new uPlot(chartOptions("participation probability p", [
        { label: "p", stroke: "#2da44e", width: 2, value: (u, v) => (v === null ? "" : v.toFixed(4)) },
      ], (u, ticks) => ticks.map((t) => t.toFixed(2))), pData, $("p-chart"));
    } else {
      spendChart.setData(spendData);
      pChart.setData(pData);
    }
    const moves = series.p_moves_by_hour || [];
    const busiest = moves.reduce((best, m, h) => (m > moves[best] ? h : best), 0);
    $("p-moves").textContent = moves.length
      ? `p moved (sum of |change|) at most ${moves[busiest].toFixed(3)} in an hour (${String(busiest).padStart(2, "0")}:00), ` +
        `${moves.reduce((a, b) => a + b, 0).toFixed(3)} over the day`
      : "";
    const row = detail.campaign;
    $("detail-title").textContent = `campaign ${row.campaign_id} (${row.state || "no state"}, ` +
      `${money(row.committed_micros)} of ${money(row.target_micros)} target, forecast ${money(row.forecast_micros)}` +
      (row.under_delivery ? `, under: ${row.under_delivery}` : "") + ")" +
      (detail.series_error ? ` - ${detail.series_error}` : "");
    view.campaign = row;
    view.series = {
      campaign_id: row.campaign_id, minutes: spendChart.data[0], target: spendChart.data[1],
      committed: spendChart.data[2], p: pChart.data[1],
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
