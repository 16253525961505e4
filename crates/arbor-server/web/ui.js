// Shared by the web view's modules: DOM helpers, the /v1 client (bearer token from this
// browser's storage), and how numbers, times and states read. Every text goes in through
// textContent (el's `text`), never as HTML.

export const $ = (id) => document.getElementById(id);

export function token() { return localStorage.getItem("arbor.token") || ""; }

export function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (token()) h["Authorization"] = "Bearer " + token();
  return h;
}

export function askToken() {
  const d = $("token-dialog");
  if (!d.open) { d.returnValue = ""; $("token-input").value = token(); d.showModal(); }
}

// One request; a failure throws an Error carrying the server's `kind` and `field`.
export async function api(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const resp = await fetch(path, init);
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
  if (resp.status === 401) askToken();
  if (!resp.ok) {
    const e = data && data.error ? data.error : {};
    throw Object.assign(new Error(e.message || resp.statusText), { status: resp.status, kind: e.kind, field: e.field });
  }
  return data;
}

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) node.append(c);
  return node;
}

const fmt = new Intl.NumberFormat();
export function tokens(n) { return fmt.format(n || 0); }

// Micro-units of the spec's currency as units: 188400 as "0.1884" (at least two decimals).
export function money(micros) {
  const units = Math.floor(micros / 1e6), frac = String(micros % 1e6).padStart(6, "0");
  return fmt.format(units) + "." + frac.replace(/0{1,4}$/, (z) => z.slice(0, Math.max(0, 2 - (6 - z.length))));
}

export function duration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
}

export function live(node) { return word(node) === "working" || word(node) === "needs-input"; }

export function elapsed(node) {
  return duration((live(node) ? Date.now() : node.updated_at) - node.created_at);
}

// The state word a person reads.
export function word(node) {
  switch (node.status) {
    case "suspended": return "needs-input";
    case "running": case "idle": case "queued": return "working";
    case "succeeded": return "done";
    default: return "failed";
  }
}

const LABEL = { "needs-input": "Needs input", working: "Working", done: "Done", failed: "" };
export function label(node) {
  const w = word(node);
  return w === "failed" ? node.status[0].toUpperCase() + node.status.slice(1) : LABEL[w];
}

export function shortId(id) { return String(id).slice(0, 8); }

export function when(ms) {
  const d = new Date(ms);
  const today = new Date();
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  return d.toDateString() === today.toDateString() ? time : d.toLocaleDateString() + " " + time;
}
