// A session's transcript as people read it: messages as a chat, each tool call a card (its
// name, arguments, result and status, the result found by its call id), a spawn's card
// linking to the child it made, approvals and decisions with who and when, usage and the
// model's thinking folded, runs started and ended as dividers.

import { el, tokens, when } from "./ui.js";

function pre(text, cls) { return el("pre", { class: cls, text }); }

function json(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

// session: whose transcript; snap: the tree (to link a spawn to its child); open(node):
// opens a child's transcript.
export function renderTranscript(ol, entries, session, snap, open) {
  // Each result pairs with its call in the nearest assistant message before it (call ids
  // repeat across turns with some providers): keyed by that message's seq and the call id.
  const results = new Map();
  let asked = null;
  for (const e of entries) {
    if (e.kind !== "message") continue;
    if (e.message.role === "assistant") asked = e.seq;
    else if (e.message.role === "tool" && asked !== null) results.set(asked + "/" + e.message.call_id, e.message);
  }
  const carded = new Set();
  let lastAsked = null;
  const byCall = new Map();
  for (const n of (snap && snap.nodes) || []) {
    if (n.spawned_by && n.spawned_by.call_id) byCall.set(n.spawned_by.session + "/" + n.spawned_by.call_id, n);
  }
  const items = [];
  for (const e of entries) {
    const head = (text) => el("div", { class: "kind", text: "#" + e.seq + " " + text + " · " + when(e.at) });
    if (e.kind === "message") {
      const m = e.message;
      if (m.role === "tool") {
        if (carded.has(m.call_id + "@" + lastAsked)) continue;
        // A result whose call is on an earlier page.
        items.push(el("li", { class: "msg tool", "data-role": "tool" }, head("tool " + m.name),
          pre((m.is_error ? "error: " : "") + m.content)));
        continue;
      }
      lastAsked = e.seq;
      const cards = (m.tool_calls || []).map((c) => {
        carded.add(c.id + "@" + e.seq);
        const r = results.get(e.seq + "/" + c.id);
        const status = r ? (r.is_error ? "error" : "ok") : "pending";
        const child = byCall.get(session + "/" + c.id);
        return el("div", { class: "card", "data-testid": "tool-card", "data-tool": c.name, "data-status": status },
          el("div", { class: "card-head" }, el("span", { class: "tool", text: c.name }),
            el("span", { class: "status", "data-status": status, text: status }),
            child ? el("button", { type: "button", class: "link", "data-testid": "open-child",
              text: "open " + child.name + " →", onclick: () => open(child) }) : null),
          el("details", { class: "args", "data-key": e.seq + "/" + c.id }, el("summary", { text: "arguments" }),
            pre(json(c.arguments))),
          r ? pre(r.content, "result") : el("div", { class: "muted", text: "no result yet" }));
      });
      items.push(el("li", { class: "msg " + m.role, "data-role": m.role },
        head(m.role), m.content ? el("div", { class: "bubble", text: m.content }) : null, ...cards));
    } else if (e.kind === "inbox_received") {
      // A message that reached the session (from its parent, a child, or the host).
      const m = e.message || e;
      items.push(el("li", { class: "msg inbox", "data-role": "inbox" },
        head("message from " + (m.from_name || m.relationship || "someone")),
        el("div", { class: "bubble", text: m.text })));
    } else if (e.kind === "decision") {
      const who = (e.by || "someone") + (e.tenant ? " (tenant " + e.tenant + ")" : "");
      items.push(el("li", { class: "decision", "data-testid": "decision" }, head("decision"),
        el("div", { text: e.verdict + " " + e.tool + " by " + who + " at " + new Date(e.at).toISOString()
          + (e.reason ? ": " + e.reason : "") })));
    } else if (e.kind === "reasoning") {
      const thought = e.blocks.map((b) => b.thinking || b.text || "").filter(Boolean).join("\n\n");
      const sealed = e.blocks.filter((b) => b.type === "redacted_thinking").length;
      const summary = "thinking, turn " + e.turn + " (" + tokens(thought.length) + " chars"
        + (sealed ? ", " + sealed + " encrypted by the provider" : "") + ")";
      items.push(el("li", { class: "reasoning" }, head("reasoning"),
        el("details", { "data-key": String(e.seq) }, el("summary", { text: summary }), pre(thought))));
    } else if (e.kind === "usage") {
      const u = e.usage;
      items.push(el("li", { class: "usage" }, el("details", { "data-key": String(e.seq) },
        el("summary", { text: "usage, turn " + e.turn + ": " + tokens(u.total_tokens) + " tokens" }),
        pre(json(u)))));
    } else if (e.kind === "run_started" || e.kind === "run_finished") {
      const text = e.kind === "run_started"
        ? "run started · " + e.agent + " · " + e.model
        : "run finished · " + e.status + (e.stop_reason ? " (" + e.stop_reason + ")" : "")
          + (e.error ? ": " + e.error : "");
      items.push(el("li", { class: "divider", "data-kind": e.kind, text }));
    } else {
      const rest = Object.assign({}, e);
      delete rest.seq; delete rest.at; delete rest.run_id; delete rest.kind;
      items.push(el("li", { class: "other" }, el("details", { "data-key": String(e.seq) },
        el("summary", { text: "#" + e.seq + " " + e.kind.replace(/_/g, " ") }), pre(json(rest)))));
    }
  }
  ol.replaceChildren(...items);
}
