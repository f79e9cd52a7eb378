// The demo dashboard.  The demo keeps the run's history (one point a second) and serves it:
// the page loads /history.json when it opens, then takes each new point from the demo's
// /fleet WebSocket, so a page opened late draws the whole run.  The replica table is live
// from each replica's own /feed WebSocket (connections, sessions, seq, rates, lag, watches).
"use strict";

const COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280"];
// Markers are drawn one pixel wide in these exact colours (tests look for them).
const MARKERS = { kill: "#d62828", restart: "#1b998b" };
const KEEP = 7200; // points kept (two hours at one a second)
const state = { fleet: null, feeds: {}, sockets: {}, points: [], events: [], loading: null };

function text(id, value) {
  const el = document.getElementById(id);
  if (el) el.textContent = value;
}

function escape(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

// -- history: loaded once, then extended point by point; a gap reloads it ------------------

async function loadHistory() {
  if (state.loading) return state.loading;
  state.loading = (async () => {
    try {
      const h = await (await fetch("/history.json", { cache: "no-store" })).json();
      state.points = h.points.slice(-KEEP);
      state.events = h.events;
    } finally {
      state.loading = null;
    }
    if (state.fleet) render();
  })();
  return state.loading;
}

function addPoint(p) {
  const last = state.points.length ? state.points[state.points.length - 1].i : -1;
  if (p.i <= last) return;
  if (p.i !== last + 1) { loadHistory(); return; }
  state.points.push(p);
  if (state.points.length > KEEP) state.points.shift();
}

// -- the WebSockets ------------------------------------------------------------------------

function openFeed(replica) {
  if (state.sockets[replica.name]) return;
  const ws = new WebSocket(replica.feed);
  state.sockets[replica.name] = ws;
  ws.onmessage = (ev) => { state.feeds[replica.name] = JSON.parse(ev.data); };
  ws.onclose = () => {
    delete state.sockets[replica.name];
    delete state.feeds[replica.name];
    // A killed replica's feed is opened again once the demo says it is back.
    setTimeout(() => { if (isAlive(replica.name)) openFeed(replica); }, 2000);
  };
}

function isAlive(name) {
  const r = state.fleet && state.fleet.replicas.find((x) => x.name === name);
  return !!(r && r.alive);
}

function openFleet() {
  const ws = new WebSocket(`ws://${location.host}/fleet`);
  ws.onmessage = (ev) => {
    state.fleet = JSON.parse(ev.data);
    state.events = state.fleet.events;
    if (state.fleet.point) addPoint(state.fleet.point);
    for (const r of state.fleet.replicas) if (r.alive) openFeed(r);
    render();
  };
  ws.onclose = () => setTimeout(openFleet, 2000);
}

// -- rendering -------------------------------------------------------------------------------

function sum(obj) { return Object.values(obj || {}).reduce((a, b) => a + b, 0); }

function watchCell(w) {
  if (!w) return `<td class="watches">-</td>`;
  const title = `longest silence ${w.max_silent_s} s`;
  if (w.stale.length) {
    return `<td class="watches stale" title="${title}">${w.stale.length} stale of ${w.count}: ` +
      `${escape(w.stale.join(", "))}</td>`;
  }
  return `<td class="watches ok" title="${title}">${w.count} ok</td>`;
}

function render() {
  const f = state.fleet;
  text("phase", f.phase);
  text("elapsed", f.elapsed.toFixed(0));
  text("agents", f.agents);
  text("in-sync", f.in_sync);
  text("writes", f.writes);
  text("prop-p50", f.propagation_p50_ms.toFixed(1));
  text("prop-p99", f.propagation_p99_ms.toFixed(1));
  text("feeds", Object.keys(state.sockets).length);
  const starts = Object.entries(f.starts || {});
  text("start-bytes", starts.length ? starts.map(([m, s]) =>
    `${m} ${(s.bytes / 1024 / s.count).toFixed(1)}`).join(" \u00b7 ") : "-");
  const rows = [];
  const live = [];
  let total = 0, felixRate = 0;
  f.replicas.forEach((r) => {
    const s = state.feeds[r.name];
    const up = r.alive && s;
    const conns = up ? s.connections : 0;
    if (up) { live.push(conns); total += conns; felixRate += s.updates_per_s.felix || 0; }
    const cell = (v) => `<td>${v}</td>`;
    const state_ = r.alive ? (r.restarts ? ` (restarted ${r.restarts}\u00d7)` : "") : " (killed)";
    rows.push(`<tr class="${r.alive ? "" : "down"}" id="row-${r.name}">` +
      `<td>${r.name}${state_}</td><td>${r.address}</td>` +
      `<td id="conn-${r.name}">${up ? conns : "-"}</td>` +
      cell(up ? sum(s.sessions["typha-gob"]) : "-") + cell(up ? sum(s.sessions.grpc) : "-") +
      cell(up ? s.seq.felix : "-") + cell(up ? s.updates_per_s.felix : "-") +
      cell(up ? s.lag_p50_ms : "-") + cell(up ? s.lag_p99_ms : "-") +
      cell(up ? (s.bytes_per_s / 1024).toFixed(1) : "-") +
      `<td id="cpu-${r.name}">${r.alive ? r.cpu_percent.toFixed(1) : "-"}</td>` +
      `<td id="rss-${r.name}">${r.alive ? r.rss_mib.toFixed(0) : "-"}</td>` +
      `<td id="reconnects-${r.name}">${r.reconnects}</td>` +
      watchCell(up ? s.watches : null).replace("<td ", `<td id="watches-${r.name}" `) + "</tr>");
  });
  document.getElementById("replicas").innerHTML = rows.join("");
  text("total-connections", total);
  text("spread", live.length ? Math.max(...live) - Math.min(...live) : "-");
  text("updates-per-s", live.length ? (felixRate / live.length).toFixed(1) : "-");

  const names = f.replicas.map((r) => r.name);
  const per = (key) => names.map((n) => ({
    label: n, values: state.points.map((p) => [p.elapsed, p.replicas[n] ? p.replicas[n][key] : 0]),
  }));
  plot("plot-connections", per("connections"));
  plot("plot-updates", per("updates_per_s"));
  plot("plot-convergence", [{ label: "agents in sync", values: state.points.map((p) =>
    [p.elapsed, p.agents ? (100 * p.in_sync) / p.agents : 0]) }], 100);
  plot("plot-propagation", [
    { label: "p50", values: state.points.map((p) => [p.elapsed, p.propagation_p50_ms]) },
    { label: "p99", values: state.points.map((p) => [p.elapsed, p.propagation_p99_ms]) }]);
  plot("plot-cpu", per("cpu_percent"));
  plot("plot-rss", per("rss_mib"));
  document.getElementById("events").innerHTML = state.events.length
    ? state.events.map((e) => `<span class="event ${e.kind}"><i style="background:` +
      `${MARKERS[e.kind]}"></i>${e.elapsed.toFixed(1)} s: ${e.kind} ${escape(e.replica)}` +
      `${e.ready_after_s === undefined ? "" : ` (ready after ${e.ready_after_s.toFixed(1)} s)`}</span>`)
      .join("")
    : "none yet";
  renderVerdict(f.verdict);
}

function renderVerdict(v) {
  if (!v) return;
  const el = document.getElementById("verdict");
  el.className = v.converged ? "ok" : "bad";
  const p = v.propagation;
  const head = `${v.converged ? "CONVERGED" : "NOT CONVERGED"}: ${v.agents} agents, ` +
    `${v.keys_checked} keys checked (missing ${v.missing}, extra ${v.extra}, differing ` +
    `${v.differing}), ${v.writes} writes (${v.write_errors} failed), propagation p50 ` +
    `${p.p50_ms} ms p99 ${p.p99_ms} ms, replica kills survived ` +
    `${v.replica_kills_survived}/${v.replica_kills}, restarts ${v.replica_restarts}`;
  const lines = v.replicas.map((r) => `<li>${escape(r.name)} ${r.alive ? "alive" : "killed"}: ` +
    `${r.connections} connections, ${r.reconnects} reconnects, cpu ${r.cpu_s} s, ` +
    `rss ${r.rss_mib} MiB</li>`);
  el.innerHTML = `<div id="verdict-head">${escape(head)}</div><ul>${lines.join("")}</ul>`;
}

function plot(id, series, yMaxFixed) {
  const canvas = document.getElementById(id);
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== w * devicePixelRatio) {
    canvas.width = w * devicePixelRatio;
    canvas.height = h * devicePixelRatio;
  }
  const g = canvas.getContext("2d");
  g.setTransform(devicePixelRatio, 0, 0, devicePixelRatio, 0, 0);
  g.clearRect(0, 0, w, h);
  const legend = document.getElementById(`legend-${id.slice(5)}`);
  if (legend) {
    legend.innerHTML = series.map((s, i) =>
      `<span><i style="background:${COLORS[i % COLORS.length]}"></i>${escape(s.label)}</span>`)
      .join("");
  }
  const all = series.flatMap((s) => s.values);
  if (!all.length) return;
  const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]), t0 + 1);
  const yMax = yMaxFixed || Math.max(1, ...all.map((p) => p[1])) * 1.1;
  const L = 40, B = 18, T = 6;
  const xOf = (t) => L + ((w - L) * (t - t0)) / (t1 - t0);
  g.strokeStyle = "#d5d9e0";
  g.fillStyle = "#5b6474";
  g.font = "11px system-ui";
  g.lineWidth = 1;
  for (let k = 0; k <= 4; k++) {
    const y = T + ((h - T - B) * k) / 4;
    g.beginPath(); g.moveTo(L, y); g.lineTo(w, y); g.stroke();
    g.fillText((yMax * (1 - k / 4)).toFixed(yMax < 10 ? 1 : 0), 2, y + 4);
  }
  g.fillText(`${t0.toFixed(0)} s`, L, h - 4);
  g.fillText(`${t1.toFixed(0)} s`, w - 40, h - 4);
  for (const e of state.events) {
    if (e.elapsed < t0 || e.elapsed > t1) continue;
    const x = Math.round(xOf(e.elapsed)) + 0.5;
    g.strokeStyle = g.fillStyle = MARKERS[e.kind];
    g.beginPath(); g.moveTo(x, T); g.lineTo(x, h - B); g.stroke();
    g.fillText(`${e.kind} ${e.replica}`, Math.min(x + 3, w - 90), T + 10);
  }
  series.forEach((s, i) => {
    g.strokeStyle = COLORS[i % COLORS.length];
    g.lineWidth = 2;
    g.beginPath();
    s.values.forEach(([t, v], j) => {
      const x = xOf(t);
      const y = T + (h - T - B) * (1 - v / yMax);
      if (j) g.lineTo(x, y); else g.moveTo(x, y);
    });
    g.stroke();
  });
}

loadHistory().then(openFleet, openFleet);
