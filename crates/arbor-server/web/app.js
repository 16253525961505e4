// arbor's web view: a thin client of the /v1 API. It lists the runs (filters, paging) and
// starts one from a named spec; follows one run's tree over SSE (/v1/runs/{id}/events,
// whole-tree snapshots, resumed with Last-Event-ID after a drop) as a tree or a timeline;
// and acts through the same API a host uses: approve, reject or answer what waits, resume,
// cancel, message a kept session, delete a child, read a transcript.

import { $, api, askToken, el, elapsed, headers, label, money, shortId, tokens, when, word } from "./ui.js";
import { renderTree, treeKeys } from "./tree.js";
import { renderTimeline, waitsOf } from "./timeline.js";
import { renderTranscript } from "./transcript.js";
import { changesToggle, reviewBlock } from "./review.js";

const state = {
  run: null, snapshot: null, stream: null, drawer: null, busy: new Set(), approvalsKey: null,
  tab: "tree", cursor: null, shown: 25, listSeq: 0,
  // Each session's transcript read so far, by id: { entries, after } (read on from `after`).
  transcripts: new Map(),
  drawerSeq: 0, listAt: 0, cutChecked: null,
  // The spans each session waited for a person, and the updated_at they were read at.
  waits: new Map(), waitsAt: new Map(),
  tree: { collapsed: new Set(), filter: "all", focus: null, onOpen: null, onCancel: null, onToggle: null },
};

// ---- runs: list, filters, paging, start ----
// The list keeps the pages it has loaded (a refresh reads as many rows again), and a
// response older than the last request is dropped.
function runQuery(cursor, limit) {
  const q = new URLSearchParams({ limit: String(limit) });
  if ($("filter-status").value) q.set("status", $("filter-status").value);
  if ($("filter-spec").value) q.set("spec", $("filter-spec").value);
  const lbl = $("filter-label").value.trim();
  if (lbl) q.set("label", lbl);
  if (cursor) q.set("cursor", cursor);
  return "/v1/runs?" + q;
}

function runRow(r) {
  const labels = Object.entries(r.labels || {}).map(([k, v]) => el("span", { class: "label", text: k + ":" + v }));
  const total = r.usage ? tokens(r.usage.aggregate.total_tokens) + " tok" : "";
  const cost = r.cost && r.cost.aggregate_micros ? " · " + money(r.cost.aggregate_micros) : "";
  return el("li", {
    "data-testid": "run", "data-id": r.id, "aria-current": state.run === r.id ? "true" : "false",
  },
    el("a", { href: "#run=" + r.id, class: "run-link" },
      el("div", { class: "title" }, el("span", { class: "state", "data-state": word(r), text: label(r) }),
        el("span", { class: "spec", "data-testid": "run-spec", text: r.spec || r.name }),
        el("code", { class: "short", text: shortId(r.id) })),
      el("div", { class: "sub", text: r.headline || r.id }),
      el("div", { class: "meta" }, el("span", { text: when(r.created_at) }),
        el("span", { class: "num", text: total + cost }), ...labels)));
}

const PAGE = 25;

async function loadRuns(fresh) {
  const seq = ++state.listSeq;
  if (fresh === true) state.shown = PAGE;
  let list;
  try {
    list = await api("GET", runQuery(null, Math.min(200, Math.max(PAGE, state.shown))));
  } catch (x) {
    if (seq !== state.listSeq) return;
    // A filter the server refuses (a malformed label, say) shows no list, and why.
    $("runs").replaceChildren(el("li", { class: "error", role: "alert", text: x.message }));
    $("runs-more").hidden = true;
    return;
  }
  if (seq !== state.listSeq) return;
  $("runs").replaceChildren(...list.runs.map(runRow));
  state.shown = Math.max(PAGE, list.runs.length);
  state.cursor = list.next_cursor || null;
  $("runs-more").hidden = !state.cursor;
  $("no-runs").hidden = list.runs.length > 0;
}

async function moreRuns() {
  if (!state.cursor) return;
  let list;
  try { list = await api("GET", runQuery(state.cursor, PAGE)); } catch (_) { return; }
  $("runs").append(...list.runs.map(runRow));
  state.shown = $("runs").children.length;
  state.cursor = list.next_cursor || null;
  $("runs-more").hidden = !state.cursor;
}

async function loadSpecs() {
  let specs;
  try { specs = (await api("GET", "/v1/specs")).specs; } catch (_) { return; }
  $("start-spec").replaceChildren(...specs.map((s) => el("option", { value: s, text: s })));
  $("filter-spec").replaceChildren(el("option", { value: "", text: "Any spec" }),
    ...specs.map((s) => el("option", { value: s, text: s })));
  $("start-form").hidden = specs.length === 0;
}

async function startRun(e) {
  e.preventDefault();
  const body = { spec: $("start-spec").value };
  const task = $("start-task").value.trim();
  if (task) body.task = task;
  const err = $("start-error");
  err.hidden = true;
  try {
    const run = await api("POST", "/v1/runs", body);
    $("start-task").value = "";
    location.hash = "run=" + run.root_id;
    loadRuns();
  } catch (x) {
    err.textContent = "Not started: " + x.message + (x.field ? " (" + x.field + ")" : "");
    err.hidden = false;
  }
}

// ---- one run's tree, over SSE ----
function follow(id) {
  if (state.stream) state.stream.abort();
  state.run = id;
  state.snapshot = null;
  state.approvalsKey = null;
  state.tree.collapsed = new Set();
  state.tree.focus = null;
  state.transcripts = new Map();
  state.waits = new Map();
  state.waitsAt = new Map();
  state.cutChecked = null;
  $("transcript").replaceChildren();
  $("run-status").removeAttribute("data-truncated");
  $("run-cancel").disabled = false;
  state.drawer = null;
  $("drawer").hidden = true;
  const ctrl = new AbortController();
  state.stream = ctrl;
  let last = null;
  let backoff = 500;
  const conn = (s) => { $("conn").dataset.state = s; $("conn").textContent = s; };
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
  const rootId = snap.root_id || root.id;
  $("run-name").textContent = root.name;
  $("run-headline").textContent = root.headline;
  $("run-status").textContent = label(root)
    + ($("run-status").dataset.truncated === "1" && word(root) === "done" ? " · answer cut off" : "");
  $("run-status").dataset.state = word(root);
  if (word(root) === "done" && state.cutChecked !== rootId) { state.cutChecked = rootId; markCut(rootId); }
  // A run a crash interrupted goes on from here, as `arbor resume` continues it; so does one
  // that waits with every call decided (decided elsewhere, say, and not resumed).
  const decided = root.status === "suspended" && snap.approvals.every((s) => s.pending.length === 0);
  $("run-resume").hidden = !(root.status === "interrupted" || decided);
  $("run-resume").onclick = () => resumeRun(rootId);
  // A root waiting for a decision has no run to cancel (reject what it waits on instead).
  $("run-cancel").hidden = !["running", "idle", "queued"].includes(root.status);
  $("run-cancel").onclick = (e) => cancel(root, e.target);
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

  // What the filter chips count.
  const counts = { all: snap.nodes.length, "needs-input": 0, working: 0, done: 0 };
  for (const n of snap.nodes) counts[word(n) === "failed" ? "done" : word(n)] += 1;
  for (const chip of document.querySelectorAll(".filters .chip")) {
    chip.querySelector(".count").textContent = String(counts[chip.dataset.filter]);
  }
  drawView();

  const names = new Map(snap.nodes.map((n) => [n.id, n.name]));
  const pending = snap.approvals.flatMap((s) => s.pending.map((p) => ({ s, p })));
  $("needs").hidden = pending.length === 0;
  $("needs-count").textContent = pending.length ? "· " + pending.length + " waiting" : "";
  // Cards are rebuilt only when what waits changed: a reason being typed stays.
  const key = pending.map(({ p }) => p.id).join(",");
  if (key !== state.approvalsKey) {
    state.approvalsKey = key;
    $("approvals").replaceChildren(...pending.map(({ s, p }) => approvalCard(snap, s, p, names)));
  }
  if (state.drawer) loadTranscript(state.drawer);
  // The list follows at most every two seconds (a busy tree sends several snapshots a second).
  if (Date.now() - state.listAt > 2000) { state.listAt = Date.now(); loadRuns(); }
}

function drawView() {
  const snap = state.snapshot;
  if (!snap) return;
  if (state.tab === "tree") { renderTree($("tree"), snap, state.tree); return; }
  const spans = new Map([...state.waits].map(([id, w]) => [id, w.slice()]));
  renderTimeline($("timeline-panel"), snap, spans);
  readWaits(snap);
}

// Reads the transcripts of the sessions that changed since last read (for their past waits),
// then draws the timeline again.
async function readWaits(snap) {
  const stale = snap.nodes.filter((n) => {
    const w = state.waitsAt.get(n.id);
    return w !== n.updated_at;
  });
  if (!stale.length || state.readingWaits) return;
  state.readingWaits = true;
  try {
    for (const n of stale) {
      const entries = await readTranscript(n.id);
      state.waits.set(n.id, waitsOf(entries, n));
      state.waitsAt.set(n.id, n.updated_at);
    }
  } finally {
    state.readingWaits = false;
  }
  if (state.tab === "timeline" && state.snapshot === snap) drawView();
}

function showTab(tab) {
  state.tab = tab;
  for (const [name, panel] of [["tree", "tree-panel"], ["timeline", "timeline-panel"]]) {
    const on = name === tab;
    $("tab-" + name).setAttribute("aria-selected", String(on));
    $("tab-" + name).tabIndex = on ? 0 : -1;
    $(panel).hidden = !on;
  }
  drawView();
}

function setFilter(filter) {
  state.tree.filter = filter;
  for (const chip of document.querySelectorAll(".filters .chip")) {
    chip.setAttribute("aria-pressed", String(chip.dataset.filter === filter));
  }
  if (state.tab !== "tree") showTab("tree"); else drawView();
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
  if (state.run === id && state.snapshot && run.result && run.result.stop_reason === "completed_truncated") {
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

async function decideAndResume(snap, p, decision) {
  state.busy.add(p.id);
  const body = { decisions: [Object.assign({ id: p.id }, decision)], by: "web view" };
  try {
    const left = await api("POST", "/v1/sessions/" + snap.root_id + "/approvals", body);
    if (left.pending.length === 0) {
      await api("POST", "/v1/runs/" + snap.root_id + "/resume").catch(() => {});
    }
    return true;
  } finally {
    state.busy.delete(p.id);
  }
}

// A question an agent asked (ask_human): its choices as buttons, or a box for the answer;
// Decline rejects it. The answer is recorded once, then the tree goes on.
function questionCard(snap, s, p, names) {
  const busy = state.busy.has(p.id);
  const send = async (decision, btn) => {
    const all = [...btn.closest(".actions").querySelectorAll("button")];
    for (const b of all) b.disabled = true;
    try { await decideAndResume(snap, p, decision); }
    catch (e) { alert("The answer was not recorded: " + e.message); for (const b of all) b.disabled = false; }
  };
  const q = p.question;
  const answerBox = el("input", { type: "text", "data-testid": "answer-input", placeholder: "Your answer",
    "aria-label": "Your answer" });
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
  const reason = el("input", { type: "text", placeholder: "Reason (optional; the model reads it on reject)",
    "aria-label": "Reason" });
  const forRun = el("input", { type: "checkbox", title: "Also later calls of this tool on this path, for the run" });
  const busy = state.busy.has(p.id);
  const buttons = [];
  const decide = async (allow) => {
    const verdict = (allow ? "allow" : "reject") + (forRun.checked ? "_for_run" : "_once");
    const decision = { verdict };
    if (reason.value.trim()) decision.reason = reason.value.trim();
    for (const b of buttons) b.disabled = true;
    try { await decideAndResume(snap, p, decision); }
    catch (e) {
      alert("The decision was not recorded: " + e.message);
      for (const b of buttons) b.disabled = false;
    }
  };
  // A merge shows what it brings in (files, lines; the hunks on demand) and is approved
  // with Merge: exactly the commit shown is merged, or nothing.
  const review = p.review ? [reviewBlock(p.review)] : [];
  const changes = p.review && p.review.session_id ? changesToggle(p.review.session_id) : null;
  return el("div", { class: "approval", "data-testid": "approval", "data-tool": p.tool },
    el("div", { class: "ask" },
      el("span", {}, el("span", { class: "tool", text: p.tool }),
        el("span", { class: "who", text: "  asked by " + (p.path.length ? p.path.join(" › ") : names.get(s.session_id) || "root") })),
      el("code", { class: "who", text: p.id.slice(0, 16) + "…" })),
    el("pre", { text: JSON.stringify(p.arguments, null, 2) }),
    ...review,
    ...(changes ? [changes.box] : []),
    el("div", { class: "actions" },
      ...(changes ? [changes.toggle] : []),
      ...(buttons.push(
        el("button", { type: "button", "data-testid": "approve", disabled: busy,
          text: p.tool === "merge_child" ? "Merge" : "Approve", onclick: () => decide(true) }),
        el("button", { type: "button", class: "danger", "data-testid": "reject", disabled: busy, text: "Reject",
          onclick: () => decide(false) })), buttons),
      el("label", { class: "who" }, forRun, " for the run"),
      reason));
}

async function cancel(node, btn) {
  btn.disabled = true;
  try { await api("POST", "/v1/sessions/" + node.id + "/cancel"); }
  catch (e) { alert("Not cancelled: " + e.message); btn.disabled = false; }
}

// ---- the drawer: a session's transcript, and what can be done to it ----
function nodeOf(id) { return state.snapshot && state.snapshot.nodes.find((n) => n.id === id); }

function openDrawer(node) {
  if (state.drawer !== node.id) $("transcript").replaceChildren();
  state.drawer = node.id;
  $("drawer").hidden = false;
  $("drawer-title").textContent = node.name;
  $("drawer-sub").textContent = node.id + " · " + node.agent + " · " + node.model;
  $("drawer-note").textContent = "";
  // A session not deleted takes messages (it runs on them); a child can be deleted.
  $("message-form").hidden = node.deleted;
  $("delete-button").hidden = !(node.parent_id && !node.deleted);
  loadTranscript(node.id);
}

// Reads on from where the last read of session `id`'s transcript stopped, every page; the
// whole transcript read so far. One read of a session at a time.
async function readTranscript(id) {
  let t = state.transcripts.get(id);
  if (!t) { t = { entries: [], after: 0, reading: null }; state.transcripts.set(id, t); }
  if (t.reading) return t.reading;
  t.reading = (async () => {
    try {
      for (;;) {
        const page = await api("GET", "/v1/sessions/" + id + "/transcript?limit=500&after=" + t.after);
        t.entries.push(...page.entries);
        if (page.entries.length) t.after = page.entries[page.entries.length - 1].seq;
        if (page.next_after === undefined || page.next_after === null) break;
      }
    } catch (_) { /* kept what was read */ }
    t.reading = null;
    return t.entries;
  })();
  return t.reading;
}

async function loadTranscript(id) {
  const seq = ++state.drawerSeq;
  const entries = await readTranscript(id);
  if (state.drawer !== id || seq !== state.drawerSeq) return;
  // What the reader opened stays open.
  const open = new Set([...$("transcript").querySelectorAll("details[open]")].map((d) => d.dataset.key));
  renderTranscript($("transcript"), entries, id, state.snapshot, openDrawer);
  for (const d of $("transcript").querySelectorAll("details")) if (open.has(d.dataset.key)) d.open = true;
}

async function sendMessage(e) {
  e.preventDefault();
  const text = $("message-text").value.trim();
  if (!text || !state.drawer) return;
  try {
    await api("POST", "/v1/sessions/" + state.drawer + "/messages", { text });
    $("message-text").value = "";
    $("drawer-note").textContent = "Sent.";
  } catch (x) {
    $("drawer-note").textContent = "Not sent: " + x.message;
  }
}

// Deleting a child names what will stop: it and each descendant still working.
function askDelete() {
  const node = nodeOf(state.drawer);
  if (!node) return;
  const below = [];
  const walk = (id) => {
    for (const n of state.snapshot.nodes) if (n.parent_id === id) { below.push(n); walk(n.id); }
  };
  walk(node.id);
  const stops = [node, ...below].filter((n) => ["running", "idle", "queued", "suspended"].includes(n.status));
  state.deleting = node.id;
  $("delete-dialog").returnValue = "";
  $("delete-title").textContent = "Delete " + node.name + "?";
  $("delete-what").textContent = stops.length
    ? "Its transcript stays readable. These stop now:"
    : "Nothing of it is working; its transcript stays readable.";
  $("delete-stops").replaceChildren(...stops.map((n) => el("li", { text: n.name + " (" + label(n) + ")" })));
  $("delete-dialog").showModal();
}

async function confirmDelete() {
  const id = state.deleting;
  state.deleting = null;
  if ($("delete-dialog").returnValue !== "ok" || !id) return;
  try {
    const done = await api("DELETE", "/v1/sessions/" + id + "?reason=" + encodeURIComponent("deleted in the web view"));
    const names = done.stopped.map((s) => s.name).join(", ");
    $("drawer-note").textContent = "Deleted" + (names ? "; stopped " + names : "") + ".";
    $("delete-button").hidden = true;
  } catch (x) {
    $("drawer-note").textContent = "Not deleted: " + x.message;
  }
}

function route() {
  const m = /run=([0-9a-f-]+)/.exec(location.hash);
  if (m && m[1] !== state.run) follow(m[1]);
  loadRuns();
}

function start() {
  state.tree.onOpen = openDrawer;
  state.tree.onCancel = cancel;
  state.tree.onToggle = (id) => {
    if (state.tree.collapsed.has(id)) state.tree.collapsed.delete(id); else state.tree.collapsed.add(id);
    state.tree.focus = id;
    drawView();
    const item = $("tree").querySelector("[data-id='" + id + "']");
    if (item) item.focus();
  };
  treeKeys($("tree"), state.tree);
  $("token-button").addEventListener("click", askToken);
  $("token-dialog").addEventListener("close", () => {
    if ($("token-dialog").returnValue === "ok") {
      localStorage.setItem("arbor.token", $("token-input").value.trim());
      if (state.run) follow(state.run);
      loadSpecs();
      loadRuns();
    }
  });
  $("drawer-close").addEventListener("click", () => { state.drawer = null; $("drawer").hidden = true; });
  $("start-form").addEventListener("submit", startRun);
  $("message-form").addEventListener("submit", sendMessage);
  $("delete-button").addEventListener("click", askDelete);
  $("delete-dialog").addEventListener("close", confirmDelete);
  $("runs-more").addEventListener("click", moreRuns);
  for (const id of ["filter-status", "filter-spec"]) $(id).addEventListener("change", () => loadRuns(true));
  $("filter-label").addEventListener("input", () => {
    clearTimeout(state.labelTimer);
    state.labelTimer = setTimeout(() => loadRuns(true), 250);
  });
  $("tab-tree").addEventListener("click", () => showTab("tree"));
  $("tab-timeline").addEventListener("click", () => showTab("timeline"));
  for (const tab of ["tab-tree", "tab-timeline"]) {
    $(tab).addEventListener("keydown", (e) => {
      if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
      const next = state.tab === "tree" ? "timeline" : "tree";
      showTab(next);
      $("tab-" + next).focus();
    });
  }
  for (const chip of document.querySelectorAll(".filters .chip")) {
    chip.addEventListener("click", () => setFilter(chip.dataset.filter));
  }
  window.addEventListener("hashchange", route);
  loadSpecs();
  route();
  setInterval(loadRuns, 5000);
  setInterval(tick, 1000);
  // The timeline's live bars grow with time.
  setInterval(() => { if (state.tab === "timeline") drawView(); }, 1000);
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
else start();
