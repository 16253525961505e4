// arbor's web view: a thin client of the /v1 API. It lists the runs, follows one run's
// tree over SSE (/v1/runs/{id}/events, whole-tree snapshots, resumed with Last-Event-ID
// after a drop), and acts through the same API a host uses: approve or reject a call, resume
// the tree, cancel a run, read a transcript. Every text is put in with textContent.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { run: null, snapshot: null, stream: null, drawer: null, busy: new Set() };

function token() { return localStorage.getItem("arbor.token") || ""; }
function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (token()) h["Authorization"] = "Bearer " + token();
  return h;
}

async function api(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const resp = await fetch(path, init);
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
  if (resp.status === 401) askToken();
  if (!resp.ok) {
    const message = data && data.error ? data.error.message : resp.statusText;
    throw Object.assign(new Error(message), { status: resp.status, body: data });
  }
  return data;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

const fmt = new Intl.NumberFormat();
function tokens(n) { return fmt.format(n || 0); }
// Micro-units of the spec's currency as units: 188400 as "0.1884" (at least two decimals).
function money(micros) {
  const units = Math.floor(micros / 1e6), frac = String(micros % 1e6).padStart(6, "0");
  return fmt.format(units) + "." + frac.replace(/0{1,4}$/, (z) => z.slice(0, Math.max(0, 2 - (6 - z.length))));
}
function elapsed(node) {
  const end = word(node) === "working" || word(node) === "needs-input" ? Date.now() : node.updated_at;
  const s = Math.max(0, Math.round((end - node.created_at) / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
}

// The state word a person reads.
function word(node) {
  switch (node.status) {
    case "suspended": return "needs-input";
    case "running": case "idle": case "queued": return "working";
    case "succeeded": return "done";
    default: return "failed";
  }
}
const LABEL = { "needs-input": "Needs input", working: "Working", done: "Done", failed: "" };
function label(node) {
  const w = word(node);
  return w === "failed" ? node.status[0].toUpperCase() + node.status.slice(1) : LABEL[w];
}

// ---- runs list ----
async function loadRuns() {
  let list;
  try { list = await api("GET", "/v1/runs"); } catch (_) { return; }
  const ol = $("runs");
  ol.replaceChildren(...list.runs.map((r) => el("li", {
    "data-testid": "run", "data-id": r.id, "aria-current": state.run === r.id ? "true" : "false",
    onclick: () => { location.hash = "run=" + r.id; },
  },
    el("div", { class: "title" }, el("span", { class: "state", "data-state": word(r), text: label(r) }),
      el("span", { text: r.name })),
    el("div", { class: "sub", text: r.headline || r.id }))));
  $("no-runs").hidden = list.runs.length > 0;
}

// ---- one run's tree, over SSE ----
function follow(id) {
  if (state.stream) state.stream.abort();
  state.run = id;
  state.snapshot = null;
  state.approvalsKey = null;
  // Another run: the drawer showed a session of the last one.
  state.drawer = null;
  $("drawer").hidden = true;
  const ctrl = new AbortController();
  state.stream = ctrl;
  let last = null;
  let backoff = 500;
  const conn = (s) => { $("conn").dataset.state = s; $("conn").textContent = s === "live" ? "live" : s; };
  (async () => {
    while (!ctrl.signal.aborted) {
      // The server ends the stream once the tree has ended (`end`, reason finished): the
      // view then looks again now and then (a message or a resume may start it again).
      let ended = false;
      try {
        const h = headers({ Accept: "text/event-stream" });
        if (last) h["Last-Event-ID"] = last;
        const resp = await fetch("/v1/runs/" + id + "/events", { headers: h, signal: ctrl.signal });
        if (resp.status === 401) { askToken(); throw new Error("unauthorized"); }
        if (!resp.ok || !resp.body) throw new Error("status " + resp.status);
        conn("live");
        backoff = 500;
        const reader = resp.body.getReader();
        const decoder = new TextDecoder();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += decoder.decode(value, { stream: true });
          let at;
          while ((at = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, at);
            buf = buf.slice(at + 2);
            let evId = null, type = "message", data = "";
            for (const line of block.split("\n")) {
              if (line.startsWith("id:")) evId = line.slice(3).trim();
              else if (line.startsWith("event:")) type = line.slice(6).trim();
              else if (line.startsWith("data:")) data += line.slice(5).trimStart();
            }
            if (evId) last = evId;
            if (type === "tree" && data) render(JSON.parse(data));
            if (type === "end" && data) ended = JSON.parse(data).reason === "finished";
          }
        }
      } catch (_) { /* reconnect below */ }
      if (ctrl.signal.aborted) return;
      if (ended) {
        conn("ended");
        await new Promise((r) => setTimeout(r, 5000));
        continue;
      }
      conn("reconnecting");
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 5000);
    }
  })();
}

function render(snap) {
  state.snapshot = snap;
  $("pick").hidden = true;
  $("run").hidden = false;
  const root = snap.nodes[0];
  $("run-name").textContent = root.name;
  $("run-headline").textContent = root.headline;
  $("run-status").textContent = label(root);
  $("run-status").dataset.state = word(root);
  if (word(root) === "done") markCut(snap.root_id || root.id);
  // A run a crash interrupted goes on from here, as `arbor resume` continues it.
  $("run-resume").hidden = root.status !== "interrupted";
  $("run-resume").onclick = () => resumeRun(snap.root_id || root.id);
  $("root-tokens").textContent = tokens(root.usage.own.total_tokens);
  $("tree-tokens").textContent = tokens(root.usage.aggregate.total_tokens);
  const cost = root.cost ? root.cost.aggregate_micros : 0;
  $("tree-cost-row").hidden = cost === 0;
  $("tree-cost").textContent = cost ? money(cost) : "";
  // Each budget pool, root first: spent of its limit, and what work in flight holds.
  const pools = snap.pools || [];
  $("budget-row").hidden = pools.length === 0;
  $("budget").replaceChildren(...pools.map((p) => {
    const owner = snap.nodes.find((n) => n.id === p.session);
    const parts = [];
    if (p.budget.max_tree_tokens != null) parts.push(tokens(p.spent.tokens) + " / " +
      tokens(p.budget.max_tree_tokens) + " tokens (" + tokens(p.reserved.tokens) + " reserved)");
    if (p.budget.max_tree_cost_micros != null) parts.push(money(p.spent.cost) + " / " +
      money(p.budget.max_tree_cost_micros) + " (" + money(p.reserved.cost) + " reserved)");
    return el("div", { class: "pool", "data-testid": "pool",
      text: (owner ? owner.name : p.session) + ": " + parts.join("; ") + (p.open ? "" : " · closed") });
  }));
  $("run-count").textContent = snap.nodes.length;

  const names = new Map(snap.nodes.map((n) => [n.id, n.name]));
  const path = (n) => {
    const parts = [];
    for (let p = n.parent_id; p; ) {
      const parent = snap.nodes.find((x) => x.id === p);
      if (!parent) break;
      parts.unshift(parent.name);
      p = parent.parent_id;
    }
    return parts.join(" › ");
  };
  const groups = { "needs-input": [], working: [], done: [] };
  for (const n of snap.nodes) groups[word(n) === "failed" ? "done" : word(n)].push(n);
  const row = (n) => el("li", {
    class: "node", "data-testid": "node", "data-name": n.name, "data-state": word(n),
    onclick: () => openDrawer(n),
  },
    el("span", { class: "state", "data-state": word(n), text: label(n) }),
    el("div", {}, el("div", { class: "name", text: n.name }),
      el("div", { class: "path", text: n.parent_id ? path(n) : (n.agent + " · root") })),
    el("span", { class: "what", text: n.headline }),
    el("span", { class: "num", title: "own | subtree tokens" + (n.cost && n.cost.aggregate_micros
        ? " (subtree cost " + money(n.cost.aggregate_micros) + ")" : ""),
      text: tokens(n.usage.own.total_tokens) + " | " + tokens(n.usage.aggregate.total_tokens) }),
    el("span", { class: "model", text: n.model }),
    el("span", { class: "num elapsed", "data-created": n.created_at, "data-updated": n.updated_at,
      "data-live": word(n) === "working" || word(n) === "needs-input" ? "1" : "0", text: elapsed(n) }),
    word(n) === "working"
      ? el("button", { class: "danger", type: "button", "data-testid": "cancel", text: "Cancel",
          onclick: (e) => { e.stopPropagation(); cancel(n, e.target); } })
      : el("span"));
  $("needs-nodes").replaceChildren(...groups["needs-input"].map(row));
  $("working-nodes").replaceChildren(...groups.working.map(row));
  $("done-nodes").replaceChildren(...groups.done.map(row));
  const pending = snap.approvals.flatMap((s) => s.pending.map((p) => ({ s, p })));
  $("needs-count").textContent = pending.length ? "· " + pending.length + " waiting" : "";
  $("working-count").textContent = groups.working.length ? "· " + groups.working.length : "";
  $("done-count").textContent = groups.done.length ? "· " + groups.done.length : "";
  // Cards are rebuilt only when what waits changed: a reason being typed stays.
  const key = pending.map(({ p }) => p.id).join(",");
  if (key !== state.approvalsKey) {
    state.approvalsKey = key;
    $("approvals").replaceChildren(...pending.map(({ s, p }) => approvalCard(snap, s, p, names)));
  }
  if (state.drawer) loadTranscript(state.drawer);
  loadRuns();
}

async function resumeRun(id) {
  const btn = $("run-resume");
  btn.disabled = true;
  try { await api("POST", "/v1/runs/" + id + "/resume"); }
  catch (e) { alert("Not resumed: " + e.message); }
  finally { btn.disabled = false; }
}

// A finished run whose answer the provider cut off at its output cap says so.
async function markCut(id) {
  let run;
  try { run = await api("GET", "/v1/runs/" + id); } catch (_) { return; }
  if (state.snapshot && run.result && run.result.stop_reason === "completed_truncated") {
    $("run-status").textContent = label(state.snapshot.nodes[0]) + " · answer cut off";
    $("run-status").dataset.truncated = "1";
  }
}

// Elapsed times tick while nothing changes.
function tick() {
  for (const span of document.querySelectorAll(".elapsed[data-live='1']")) {
    span.textContent = elapsed({
      status: "running", created_at: Number(span.dataset.created), updated_at: Number(span.dataset.updated),
    });
  }
}

// A question an agent asked (ask_human): its choices as buttons, or a box for the answer;
// Decline rejects it. The answer is recorded once, then the tree goes on.
function questionCard(snap, s, p, names) {
  const busy = state.busy.has(p.id);
  const send = async (decision, btn) => {
    state.busy.add(p.id);
    btn.disabled = true;
    const body = { decisions: [Object.assign({ id: p.id }, decision)], by: "web view" };
    try {
      const left = await api("POST", "/v1/sessions/" + snap.root_id + "/approvals", body);
      if (left.pending.length === 0) {
        await api("POST", "/v1/runs/" + snap.root_id + "/resume").catch(() => {});
      }
    } catch (e) {
      alert("The answer was not recorded: " + e.message);
      btn.disabled = false;
    } finally {
      state.busy.delete(p.id);
    }
  };
  const q = p.question;
  const answerBox = el("input", { type: "text", "data-testid": "answer-input", placeholder: "Your answer" });
  const answers = q.choices.length
    ? q.choices.map((c) => el("button", { type: "button", "data-testid": "choice", disabled: busy, text: c,
        onclick: (e) => send({ answer: c }, e.target) }))
    : [answerBox, el("button", { type: "button", "data-testid": "answer", disabled: busy, text: "Answer",
        onclick: (e) => { if (answerBox.value.trim()) send({ answer: answerBox.value.trim() }, e.target); } })];
  return el("div", { class: "approval question", "data-testid": "question", "data-tool": p.tool },
    el("div", { class: "ask" },
      el("span", {}, el("span", { class: "tool", text: "question" }),
        el("span", { class: "who", text: "  from " + (p.path.length ? p.path.join(" › ") : names.get(s.session_id) || "root") })),
      el("code", { class: "who", text: p.id.slice(0, 16) + "…" })),
    el("p", { class: "question-text", "data-testid": "question-text", text: q.question }),
    el("div", { class: "actions" }, ...answers,
      el("button", { type: "button", class: "danger", "data-testid": "decline", disabled: busy, text: "Decline",
        onclick: (e) => send({ verdict: "reject_once" }, e.target) })));
}

function approvalCard(snap, s, p, names) {
  if (p.question) return questionCard(snap, s, p, names);
  const reason = el("input", { type: "text", placeholder: "Reason (optional; the model reads it on reject)" });
  const forRun = el("input", { type: "checkbox", title: "Also later calls of this tool on this path, for the run" });
  const busy = state.busy.has(p.id);
  const decide = async (allow, btn) => {
    state.busy.add(p.id);
    btn.disabled = true;
    const verdict = (allow ? "allow" : "reject") + (forRun.checked ? "_for_run" : "_once");
    const body = { decisions: [{ id: p.id, verdict }], by: "web view" };
    if (reason.value.trim()) body.decisions[0].reason = reason.value.trim();
    try {
      const left = await api("POST", "/v1/sessions/" + snap.root_id + "/approvals", body);
      if (left.pending.length === 0) {
        await api("POST", "/v1/runs/" + snap.root_id + "/resume").catch(() => {});
      }
    } catch (e) {
      alert("The decision was not recorded: " + e.message);
    } finally {
      state.busy.delete(p.id);
    }
  };
  return el("div", { class: "approval", "data-testid": "approval", "data-tool": p.tool },
    el("div", { class: "ask" },
      el("span", {}, el("span", { class: "tool", text: p.tool }),
        el("span", { class: "who", text: "  asked by " + (p.path.length ? p.path.join(" › ") : names.get(s.session_id) || "root") })),
      el("code", { class: "who", text: p.id.slice(0, 16) + "…" })),
    el("pre", { text: JSON.stringify(p.arguments, null, 2) }),
    el("div", { class: "actions" },
      el("button", { type: "button", "data-testid": "approve", disabled: busy, text: "Approve",
        onclick: (e) => decide(true, e.target) }),
      el("button", { type: "button", class: "danger", "data-testid": "reject", disabled: busy, text: "Reject",
        onclick: (e) => decide(false, e.target) }),
      el("label", { class: "who" }, forRun, " for the run"),
      reason));
}

async function cancel(node, btn) {
  btn.disabled = true;
  try { await api("POST", "/v1/sessions/" + node.id + "/cancel"); }
  catch (e) { alert("Not cancelled: " + e.message); btn.disabled = false; }
}

// ---- transcript drawer ----
function openDrawer(node) {
  state.drawer = node.id;
  $("drawer").hidden = false;
  $("drawer-title").textContent = node.name;
  $("drawer-sub").textContent = node.id + " · " + node.model;
  loadTranscript(node.id);
}

async function loadTranscript(id) {
  let page;
  try { page = await api("GET", "/v1/sessions/" + id + "/transcript?limit=500"); } catch (_) { return; }
  if (state.drawer !== id) return;
  $("transcript").replaceChildren(...page.entries.map((e) => {
    let text = "";
    if (e.kind === "reasoning") {
      // Folded: the model's thinking opens on a click.
      const thought = e.blocks.map((b) => b.thinking || b.text || "").filter(Boolean).join("\n\n");
      const sealed = e.blocks.filter((b) => b.type === "redacted_thinking").length;
      const summary = "thinking, turn " + e.turn + " (" + tokens(thought.length) + " chars"
        + (sealed ? ", " + sealed + " encrypted by the provider" : "") + ")";
      return el("li", { class: "reasoning" },
        el("div", { class: "kind", text: "#" + e.seq + " reasoning" }),
        el("details", {}, el("summary", { text: summary }), el("pre", { text: thought })));
    }
    if (e.kind === "message") {
      const m = e.message;
      text = (m.role ? m.role + ": " : "") + (m.content || "");
      if (m.tool_calls && m.tool_calls.length) text += "\n→ " + m.tool_calls.map((c) => c.name + " " + JSON.stringify(c.arguments)).join("\n→ ");
    } else if (e.kind === "decision") {
      const who = (e.by || "someone") + (e.tenant ? " (tenant " + e.tenant + ")" : "");
      text = e.verdict + " " + e.tool + " by " + who + " at " + new Date(e.at).toISOString()
        + (e.reason ? ": " + e.reason : "");
    } else {
      const rest = Object.assign({}, e);
      delete rest.seq; delete rest.at; delete rest.run_id; delete rest.kind;
      text = JSON.stringify(rest);
    }
    return el("li", {}, el("div", { class: "kind", text: "#" + e.seq + " " + e.kind.replace(/_/g, " ") }),
      el("pre", { text }));
  }));
}

// ---- token ----
function askToken() {
  const d = $("token-dialog");
  if (!d.open) { $("token-input").value = token(); d.showModal(); }
}

function route() {
  const m = /run=([0-9a-f-]+)/.exec(location.hash);
  if (m && m[1] !== state.run) follow(m[1]);
  loadRuns();
}

document.addEventListener("DOMContentLoaded", () => {
  $("token-button").addEventListener("click", askToken);
  $("token-dialog").addEventListener("close", () => {
    if ($("token-dialog").returnValue === "ok") {
      localStorage.setItem("arbor.token", $("token-input").value.trim());
      if (state.run) follow(state.run);
      loadRuns();
    }
  });
  $("drawer-close").addEventListener("click", () => { state.drawer = null; $("drawer").hidden = true; });
  window.addEventListener("hashchange", route);
  route();
  setInterval(loadRuns, 5000);
  setInterval(tick, 1000);
});
