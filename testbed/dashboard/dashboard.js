// The demo dashboard: one WebSocket to the demo (/fleet: agents, writes, propagation, the
// replica list) and one to each replica's /feed (its own connections, seq, rates, lag).
"use strict";

const COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280"];
const WINDOW = 300; // points kept per series (one per second)
const state = { fleet: null, feeds: {}, sockets: {}, series: {} };

function push(name, t, v) {
  const s = state.series[name] || (state.series[name] = []);
  s.push([t, v]);
  if (s.length > WINDOW) s.shift();
}

function text(id, value) {
  const el = document.getElementById(id);
  if (el) el.textContent = value;
}

function openFeed(replica) {
  if (state.sockets[replica.name]) return;
  const ws = new WebSocket(replica.feed);
  state.sockets[replica.name] = ws;
  ws.onmessage = (ev) => { state.feeds[replica.name] = JSON.parse(ev.data); };
  ws.onclose = () => {
    delete state.sockets[replica.name];
    delete state.feeds[replica.name];
    // A killed replica stays down; a live one is retried.
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
    for (const r of state.fleet.replicas) if (r.alive) openFeed(r);
    render();
  };
  ws.onclose = () => setTimeout(openFleet, 2000);
}

function sum(obj) { return Object.values(obj || {}).reduce((a, b) => a + b, 0); }

function render() {
  const f = state.fleet;
  const t = f.elapsed;
  text("phase", f.phase);
  text("elapsed", f.elapsed.toFixed(0));
  text("agents", f.agents);
  text("in-sync", f.in_sync);
  text("writes", f.writes);
  text("prop-p50", f.propagation_p50_ms.toFixed(1));
  text("prop-p99", f.propagation_p99_ms.toFixed(1));
  text("feeds", Object.keys(state.sockets).length);
  const rows = [];
  const live = [];
  let total = 0, felixRate = 0;
  f.replicas.forEach((r, i) => {
    const s = state.feeds[r.name];
    const up = r.alive && s;
    const conns = up ? s.connections : 0;
    if (up) { live.push(conns); total += conns; felixRate += s.updates_per_s.felix || 0; }
    push(`conn:${r.name}`, t, conns);
    push(`upd:${r.name}`, t, up ? sum(s.updates_per_s) : 0);
    const cell = (v) => `<td>${v}</td>`;
    rows.push(`<tr class="${r.alive ? "" : "down"}" id="row-${r.name}">` +
      `<td>${r.name}${r.alive ? "" : " (killed)"}</td><td>${r.address}</td>` +
      `<td id="conn-${r.name}">${up ? conns : "-"}</td>` +
      cell(up ? sum(s.sessions["typha-gob"]) : "-") + cell(up ? sum(s.sessions.grpc) : "-") +
      cell(up ? s.seq.felix : "-") + cell(up ? s.updates_per_s.felix : "-") +
      cell(up ? s.lag_p50_ms : "-") + cell(up ? s.lag_p99_ms : "-") +
      cell(up ? (s.bytes_per_s / 1024).toFixed(1) : "-") + "</tr>");
  });
  document.getElementById("replicas").innerHTML = rows.join("");
  text("total-connections", total);
  text("spread", live.length ? Math.max(...live) - Math.min(...live) : "-");
  text("updates-per-s", live.length ? (felixRate / live.length).toFixed(1) : "-");
  push("insync", t, f.agents ? (100 * f.in_sync) / f.agents : 0);
  push("p50", t, f.propagation_p50_ms);
  push("p99", t, f.propagation_p99_ms);
  const names = f.replicas.map((r) => r.name);
  plot("plot-connections", names.map((n) => `conn:${n}`));
  plot("plot-updates", names.map((n) => `upd:${n}`));
  plot("plot-convergence", ["insync"], 100);
  plot("plot-propagation", ["p50", "p99"]);
  document.getElementById("legend-connections").innerHTML = names.map((n, i) =>
    `<span><i style="background:${COLORS[i % COLORS.length]}"></i>${n}</span>`).join("");
  const v = f.verdict;
  if (v) {
    const el = document.getElementById("verdict");
    el.className = v.converged ? "ok" : "bad";
    el.textContent = `${v.converged ? "CONVERGED" : "NOT CONVERGED"}: ${v.agents} agents, ` +
      `${v.keys_checked} keys checked, ${v.writes} writes, propagation p50 ` +
      `${v.propagation.p50_ms} ms p99 ${v.propagation.p99_ms} ms, ` +
      `replica kills survived ${v.replica_kills_survived}/${v.replica_kills}`;
  }
}

function plot(id, names, yMaxFixed) {
  const canvas = document.getElementById(id);
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== w * devicePixelRatio) {
    canvas.width = w * devicePixelRatio;
    canvas.height = h * devicePixelRatio;
  }
  const g = canvas.getContext("2d");
  g.setTransform(devicePixelRatio, 0, 0, devicePixelRatio, 0, 0);
  g.clearRect(0, 0, w, h);
  const all = names.flatMap((n) => state.series[n] || []);
  if (!all.length) return;
  const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]), t0 + 1);
  const yMax = yMaxFixed || Math.max(1, ...all.map((p) => p[1])) * 1.1;
  const L = 40, B = 18, T = 6;
  g.strokeStyle = "#d5d9e0";
  g.fillStyle = "#5b6474";
  g.font = "11px system-ui";
  for (let k = 0; k <= 4; k++) {
    const y = T + ((h - T - B) * k) / 4;
    g.beginPath(); g.moveTo(L, y); g.lineTo(w, y); g.stroke();
    g.fillText((yMax * (1 - k / 4)).toFixed(yMax < 10 ? 1 : 0), 2, y + 4);
  }
  g.fillText(`${t0.toFixed(0)} s`, L, h - 4);
  g.fillText(`${t1.toFixed(0)} s`, w - 40, h - 4);
  names.forEach((n, i) => {
    const s = state.series[n] || [];
    g.strokeStyle = COLORS[i % COLORS.length];
    g.lineWidth = 2;
    g.beginPath();
    s.forEach(([t, v], j) => {
      const x = L + ((w - L) * (t - t0)) / (t1 - t0);
      const y = T + (h - T - B) * (1 - v / yMax);
      if (j) g.lineTo(x, y); else g.moveTo(x, y);
    });
    g.stroke();
  });
}

openFleet();
