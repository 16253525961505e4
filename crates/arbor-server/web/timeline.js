// A run's timeline: a waterfall of the tree's sessions over time, nested in tree order, each
// bar from its start to its end (to now while it runs), a wait for a person shaded from when
// it began; an axis of elapsed time from the root's start.

import { duration, el, label, live, word } from "./ui.js";

// An axis label: tenths of a second below ten seconds.
function tickLabel(ms) { return ms < 10000 ? (ms / 1000).toFixed(1) + "s" : duration(ms); }

// Entries a session's transcript gets from elsewhere while it waits: they do not end a wait.
const WHILE_WAITING = new Set(["decision", "inbox_received", "usage_attributed", "cost_attributed", "renamed"]);

// The spans a session waited for a person, from its transcript: from a run's stop on
// `suspended` to that run's next entry of its own (its resume going on), or to `null` while it
// still waits. The node clamps a span to its record: one no longer suspended ended by then.
export function waitsOf(entries, node) {
  const out = [];
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    if (e.kind !== "run_finished" || e.status !== "suspended") continue;
    const next = entries.slice(i + 1).find((x) => x.run_id === e.run_id && !WHILE_WAITING.has(x.kind));
    let to = next ? next.at : null;
    if (to === null && node && node.status !== "suspended") to = node.updated_at;
    out.push([e.at, to]);
  }
  return out;
}

// waits: session id -> [[from, to or null]] (what waitsOf read; absent: not read yet).
export function renderTimeline(host, snap, waits) {
  const nodes = snap.nodes;
  if (!nodes.length) return;
  const now = Date.now();
  const start = Math.min(...nodes.map((n) => n.created_at));
  const end = Math.max(...nodes.map((n) => (live(n) ? now : n.updated_at)), start + 1);
  const span = end - start;
  const pct = (t) => ((t - start) / span) * 100;
  const axis = el("div", { class: "axis", "aria-hidden": "true" },
    ...[0, 0.25, 0.5, 0.75, 1].map((f) => el("span", { style: null, class: "tick", "data-at": String(f * 100),
      text: tickLabel(f * span) })));
  const rows = nodes.map((n) => {
    const stop = live(n) ? now : n.updated_at;
    const left = Math.min(pct(n.created_at), 100);
    const width = Math.min(Math.max(pct(stop) - left, 0.4), 100 - left);
    const bar = el("span", { class: "tl-bar", "data-state": word(n), "data-testid": "bar" });
    bar.style.left = left + "%";
    bar.style.width = width + "%";
    const parts = [bar];
    const spans = (waits && waits.get(n.id)) || [];
    // Waiting now, before its transcript was read: since its record last changed.
    if (n.status === "suspended" && !spans.some(([, to]) => to === null)) spans.push([n.updated_at, null]);
    for (const [from, to] of spans) {
      const wait = el("span", { class: "wait", "data-testid": "wait",
        title: to === null ? "waiting for a decision" : "waited " + duration(to - from) + " for a decision" });
      const from_ = Math.min(pct(from), 100);
      wait.style.left = from_ + "%";
      wait.style.width = Math.min(Math.max(pct(to === null ? now : to) - from_, 0.4), 100 - from_) + "%";
      parts.push(wait);
    }
    const name = el("span", { class: "tl-name", text: n.name });
    name.style.paddingLeft = (n.depth * 14) + "px";
    return el("li", { class: "tl-row", "data-testid": "timeline-row", "data-name": n.name,
      "aria-label": n.name + ": " + label(n) + ", " + duration(stop - n.created_at)
        + ", from " + duration(n.created_at - start) },
      name, el("span", { class: "track" }, ...parts));
  });
  for (const t of axis.children) t.style.left = t.dataset.at + "%";
  host.replaceChildren(el("div", { class: "tl-axis-row" }, el("span", { class: "tl-name" }), axis),
    el("ol", { class: "timeline", "aria-label": "Timeline" }, ...rows));
}
