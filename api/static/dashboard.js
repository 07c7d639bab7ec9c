// The dashboard: reads the query API and draws it. Served as a file under a Content-Security-Policy
// that forbids inline script. Everything the API returns is data: it reaches the page only through
// textContent, setAttribute on attributes named here, dataset and CSSOM numbers — never as markup
// (no innerHTML, outerHTML, insertAdjacentHTML or document.write anywhere in this file).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const SIZE = { minute: 60, hour: 3600, day: 86400 };
// The report ids the API accepts (api/routes/reports.py); links are built only from ids that match.
const REPORT_ID = /^[A-Za-z0-9_.-]{1,100}$/;

const $ = (id) => document.getElementById(id);
const num = (v) => { const n = Number(v); return Number.isFinite(n) ? n : 0; };
const fmt = (v) => (v === null || v === undefined || !Number.isFinite(Number(v))) ? "–" : Number(v).toLocaleString();
const text = (v) => (v === null || v === undefined) ? "" : String(v);
// A url with each character that prints nothing or changes how the rest reads (controls, formats
// such as the right-to-left override, line and paragraph separators; not the joiners nor tag
// characters, which print as part of what they join) shown as its escape, and a backslash as two:
// shown as it is, a url read as another one (reports.render.visible does the same in the reports).
const HIDDEN = /\\|[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;
const SHOWN = (code) => code === 0x200c || code === 0x200d || (code >= 0xe0020 && code < 0xe0080);
const visible = (v) => text(v).replace(HIDDEN, (c) => {
  const code = c.codePointAt(0);
  if (c === "\\") return "\\\\";
  if (SHOWN(code)) return c;
  return code > 0xffff ? `\\U${code.toString(16).padStart(8, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
});

function build(node, attrs, content) {
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  if (content !== undefined) node.textContent = text(content);
  return node;
}
const el = (tag, attrs, content) => build(document.createElement(tag), attrs, content);
const svgEl = (tag, attrs, content) => build(document.createElementNS(SVG_NS, tag), attrs, content);

function errorText(response, body) {
  const detail = body && typeof body === "object" ? body.detail : undefined;
  if (typeof detail === "string") return detail;
  if (detail && typeof detail.message === "string") return detail.message;
  if (detail !== undefined && detail !== null) return JSON.stringify(detail);
  return `HTTP ${response.status}`;
}

// Every request gives up after this long: a stalled API shows an error, not a page waiting for ever.
const REQUEST_TIMEOUT_MS = 15000;

// Aborted by `signal` (a later Show) or after REQUEST_TIMEOUT_MS, whichever comes first: one
// controller, so no browser needs AbortSignal.any or AbortSignal.timeout.
function deadline(signal) {
  const both = new AbortController();
  const timer = setTimeout(() => both.abort(new Error("the API did not answer within 15 s")), REQUEST_TIMEOUT_MS);
  if (signal) {
    if (signal.aborted) both.abort(signal.reason);
    else signal.addEventListener("abort", () => both.abort(signal.reason), { once: true });
  }
  return { signal: both.signal, done: () => clearTimeout(timer) };
}

async function getJSON(path, signal) {
  const limit = deadline(signal);
  let response, body = null;
  try {
    response = await fetch(path, { headers: { Accept: "application/json" }, signal: limit.signal });
    try { body = await response.json(); } catch (e) { /* not JSON: reported below */ }
  } finally {
    limit.done();
  }
  if (limit.signal.aborted) throw limit.signal.reason instanceof Error ? limit.signal.reason : new Error("stopped");
  if (!response.ok) throw new Error(errorText(response, body));
  if (body === null || typeof body !== "object") throw new Error(`unexpected answer from ${path.split("?")[0]}`);
  return body;
}

function windowParams() {
  const g = SIZE[$("granularity").value] ? $("granularity").value : "hour";
  const n = Math.min(2000, Math.max(1, Math.floor(Number($("span").value)) || 48));
  const now = Math.floor(Date.now() / 1000), size = SIZE[g];
  const end = now - (now % size) + size, start = end - n * size;
  const iso = (s) => new Date(s * 1000).toISOString().replace(".000", "");
  return { g, start: iso(start), end: iso(end) };
}

function drawSeries(data, url) {
  const svg = $("chart"), W = svg.clientWidth || 700, H = 260, pad = { l: 46, r: 8, t: 10, b: 26 };
  const pts = Array.isArray(data.series) ? data.series : [];
  const n = pts.length, max = Math.max(4, ...pts.map((p) => num(p.value)));  // whole-number ticks
  const bw = (W - pad.l - pad.r) / Math.max(1, n), y = (v) => H - pad.b - (v / max) * (H - pad.t - pad.b);
  const nodes = [];
  for (let i = 0; i <= 4; i++) {
    const v = max * i / 4, yy = y(v);
    nodes.push(svgEl("line", { class: "grid", x1: pad.l, x2: W - pad.r, y1: yy, y2: yy }));
    nodes.push(svgEl("text", { x: pad.l - 6, y: yy + 4, "text-anchor": "end" }, Math.round(v)));
  }
  pts.forEach((p, i) => {
    const x = pad.l + i * bw + 1, w = Math.max(1, bw - 2), bucket = text(p.bucket);
    const hb = (num(p.batch) / max) * (H - pad.t - pad.b), hs = (num(p.speed) / max) * (H - pad.t - pad.b);
    const batch = svgEl("rect", { class: "batch", x, y: H - pad.b - hb, width: w, height: hb });
    batch.append(svgEl("title", {}, `${bucket}: batch ${fmt(p.batch)}`));
    const speed = svgEl("rect", { class: "speed", x, y: H - pad.b - hb - hs, width: w, height: hs });
    speed.append(svgEl("title", {}, `${bucket}: speed ${fmt(p.speed)}`));
    nodes.push(batch, speed);
    if (i % Math.ceil(n / 8) === 0) {
      nodes.push(svgEl("text", { x, y: H - 8 }, bucket.slice(5, 16).replace("T", " ")));
    }
  });
  const cutoff = data.provenance && data.provenance.cutoff;
  const c = Date.parse(text(cutoff)) / 1000, first = n ? Date.parse(text(pts[0].bucket)) / 1000 : NaN;
  const size = SIZE[data.granularity];
  if (cutoff && Number.isFinite(c) && Number.isFinite(first) && size) {
    const idx = (c - first) / size;
    if (idx >= 0 && idx <= n) {
      const x = pad.l + idx * bw, right = x > W - 60;
      nodes.push(svgEl("line", { id: "cutoff-line", x1: x, x2: x, y1: pad.t, y2: H - pad.b }));
      nodes.push(svgEl("text", { class: "cutoff", x: right ? x - 4 : x + 4, y: pad.t + 10,
                                 "text-anchor": right ? "end" : "start" }, "cutoff"));
    }
  }
  svg.replaceChildren(...nodes);
  svg.dataset.url = url;  // which url the chart shows (as data, for tests and tools)
}

function topRow(r, max) {
  const link = el("a", { href: "#" }, visible(r.url));
  link.dataset.url = text(r.url);
  link.addEventListener("click", (ev) => { ev.preventDefault(); $("url").value = link.dataset.url; loadSeries(); });
  const bars = el("td", { class: "bars" });
  for (const [cls, value] of [["bar", r.batch], ["bar s", r.speed]]) {
    const bar = el("span", { class: cls });
    bar.style.width = `${Math.max(0, 60 * num(value) / max)}px`;  // CSSOM, allowed by the CSP
    bars.append(bar);
  }
  const tr = el("tr");
  const url = el("td", { class: "url" });
  url.append(link);
  tr.append(url, el("td", { class: "n" }, fmt(r.value)), el("td", { class: "n" }, fmt(r.batch)),
            el("td", { class: "n" }, fmt(r.speed)), bars);
  return tr;
}

// The one "Show" whose answers may reach the page: an earlier one's, answered later, are dropped
// (its requests are aborted), so the chart never shows another URL than the one asked for last.
let shown = null;

async function loadSeries() {
  if (shown) shown.abort();
  const mine = new AbortController(), signal = mine.signal;
  shown = mine;
  const current = () => shown === mine;
  const { g, start, end } = windowParams(), asked = $("url").value, url = encodeURIComponent(asked);
  const range = `granularity=${g}&start=${encodeURIComponent(start)}&end=${encodeURIComponent(end)}`;
  $("pv-error").textContent = ""; $("uv-error").textContent = ""; $("top-error").textContent = "";
  try {
    const pv = await getJSON(`/api/v1/views/page_views?url=${url}&${range}`, signal);
    if (!current()) return;
    const complete = pv.provenance && pv.provenance.complete;
    $("pv-total").textContent = `— ${fmt(pv.total)} in the window${complete ? "" : " (incomplete)"}`;
    const reasons = pv.provenance && Array.isArray(pv.provenance.reasons) ? pv.provenance.reasons : [];
    $("pv-error").textContent = complete ? "" : reasons.map(text).join(" ");
    drawSeries(pv, asked);
  } catch (e) {
    if (!current()) return;
    $("pv-error").textContent = e.message; $("chart").replaceChildren(); delete $("chart").dataset.url;
  }
  try {
    const uv = await getJSON(`/api/v1/views/unique_visitors?url=${url}&${range}`, signal);
    if (!current()) return;
    $("uv-total").textContent = (uv.exact ? "" : "≈ ") + fmt(Math.round(num(uv.total)));
    $("uv-kind").textContent = uv.exact ? "over the window (exact)" : "over the window (HyperLogLog estimate)";
    const last = (Array.isArray(uv.series) ? uv.series : []).filter((b) => num(b.value) > 0).pop();
    $("uv-last").textContent = last ? (last.exact ? "" : "≈ ") + fmt(Math.round(num(last.value))) : "0";
  } catch (e) { if (!current()) return; $("uv-error").textContent = e.message; }
  try {
    const top = await getJSON(`/api/v1/views/top_pages?${range}&limit=10`, signal);
    if (!current()) return;
    $("top-window").textContent = `— ${start.slice(0, 16).replace("T", " ")} to ${end.slice(0, 16).replace("T", " ")}`;
    const rows = Array.isArray(top.rows) ? top.rows : [];
    const max = Math.max(1, ...rows.map((r) => num(r.value)));
    $("top").querySelector("tbody").replaceChildren(...rows.map((r) => topRow(r, max)));
  } catch (e) { if (current()) $("top-error").textContent = e.message; }
}

function reportItem(r) {
  const li = el("li");
  // A same-origin path built here from a validated id, never a URL taken from the answer.
  li.append(el("a", { href: `/api/v1/reports/${encodeURIComponent(r.id)}/html` }, r.id));
  const w = r.window;
  if (w && typeof w === "object") li.append(" ", el("span", { class: "muted" }, `${text(w.start)} → ${text(w.end)}`));
  return li;
}

function viewRow(v) {
  const state = ["serving", "building", "replaying", "retired"].includes(v.state) ? v.state : "unknown";
  const keys = Array.isArray(v.keys) ? v.keys.map(text).join(", ") : "";
  const tr = el("tr", { "data-view": text(v.name) });
  tr.append(el("td", {}, v.name), el("td", { class: `state-${state}` }, state), el("td", {}, keys),
    el("td", { class: "muted" }, v.reason || ""));
  return tr;
}

// A store that could not be read is said so, never shown as "none yet" or "not running"; when the
// status cannot be read at all, what it said before is not left on screen as if current.
function showStatus(st) {
  const batch = st.batch, speed = st.speed;
  const unreadable = (part) => part && typeof part === "object" && typeof part.error === "string";
  if (unreadable(batch)) {
    $("st-version").textContent = "cannot be read"; $("st-cutoff").textContent = "–";
  } else {
    $("st-version").textContent = batch && batch.version ? `v${text(batch.version)}` : "none yet";
    $("st-cutoff").textContent = batch && batch.cutoff ? text(batch.cutoff).replace("T", " ").replace("Z", "") : "–";
  }
  if (unreadable(speed)) {
    $("st-fresh").textContent = "cannot be read"; $("st-lag").textContent = "–";
  } else {
    $("st-fresh").textContent = speed && speed.freshness_s !== null && speed.freshness_s !== undefined
      ? `${fmt(speed.freshness_s)}s ago` : "not running";
    $("st-lag").textContent = speed ? fmt(speed.records_behind) : "–";
  }
  $("st-error").textContent = [batch, speed].filter(unreadable).map((p) => text(p.error)).join("; ");
}

let statusLoading = false;  // one round at a time: a stalled API does not pile up requests

async function loadStatus() {
  if (statusLoading) return;
  statusLoading = true;
  try { await statusRound(); } finally { statusLoading = false; }
}

async function statusRound() {
  try {
    showStatus(await getJSON("/api/v1/status"));
  } catch (e) {
    for (const id of ["st-version", "st-cutoff", "st-fresh", "st-lag"]) $(id).textContent = "–";
    $("st-error").textContent = `status cannot be read: ${e.message}`;
  }
  try {
    const rep = await getJSON("/api/v1/reports");
    const valid = (Array.isArray(rep.reports) ? rep.reports : [])
      .filter((r) => r && typeof r.id === "string" && REPORT_ID.test(r.id) && !/^\.+$/.test(r.id));
    if (valid.length) $("reports").replaceChildren(...valid.slice(0, 8).map(reportItem));
  } catch (e) { /* no reports */ }
  try {
    const listed = await getJSON("/api/v1/views");
    const views = (Array.isArray(listed.views) ? listed.views : []).filter((v) => v && typeof v === "object");
    $("views").tBodies[0].replaceChildren(...views.map(viewRow));
  } catch (e) { /* views are best effort */ }
}

$("go").addEventListener("click", loadSeries);
loadStatus(); loadSeries();
setInterval(loadStatus, 10000);
