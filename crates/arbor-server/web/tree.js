// A run's tree as a tree: every session nested under its parent (ARIA tree, collapsible,
// depth guides), each row its state, name, agent, model, own | subtree tokens (and cost),
// elapsed time and the tools it runs now; a filter keeps the rows in one state (and their
// ancestors, greyed). Keyboard: arrows move and fold, Enter opens the transcript.

import { el, elapsed, label, live, money, tokens, word } from "./ui.js";

const FILTER_STATES = { "needs-input": ["needs-input"], working: ["working"], done: ["done", "failed"] };

function matches(node, filter) {
  return filter === "all" || FILTER_STATES[filter].includes(word(node));
}

// view: { collapsed: Set of ids, filter, focus: id, onOpen(node), onCancel(node, button) }
export function renderTree(host, snap, view) {
  const kids = new Map();
  for (const n of snap.nodes) {
    if (!n.parent_id) continue;
    if (!kids.has(n.parent_id)) kids.set(n.parent_id, []);
    kids.get(n.parent_id).push(n);
  }
  // Which rows show under the filter: a match, or an ancestor of one.
  const shown = new Map();
  const visit = (n) => {
    let any = matches(n, view.filter);
    for (const c of kids.get(n.id) || []) any = visit(c) || any;
    shown.set(n.id, any);
    return any;
  };
  const root = snap.nodes[0];
  if (!root) return;
  visit(root);
  const row = (n, level) => {
    const children = (kids.get(n.id) || []).filter((c) => shown.get(c.id));
    const open = !view.collapsed.has(n.id);
    const item = el("li", {
      role: "treeitem", "aria-level": String(level), "aria-expanded": children.length ? String(open) : null,
      "aria-selected": view.focus === n.id ? "true" : "false", tabindex: "-1",
      "data-id": n.id, "data-depth": String(level - 1), "data-dim": matches(n, view.filter) ? null : "1",
    });
    const guides = [];
    for (let i = 1; i < level; i++) guides.push(el("span", { class: "guide", "aria-hidden": "true" }));
    const toggle = children.length
      ? el("span", { class: "toggle", "aria-hidden": "true", "data-testid": "toggle", text: open ? "▾" : "▸",
          onclick: (e) => { e.stopPropagation(); view.onToggle(n.id); } })
      : el("span", { class: "toggle", "aria-hidden": "true" });
    const cost = n.cost && n.cost.aggregate_micros ? " · " + money(n.cost.aggregate_micros) : "";
    const now = (n.running_tools || []).join(", ");
    item.append(el("div", { class: "row", "data-testid": "node", "data-name": n.name, "data-state": word(n),
      onclick: (e) => {
        view.focus = n.id;
        const item = e.currentTarget.closest("[role=treeitem]");
        for (const i of host.querySelectorAll("[role=treeitem]")) {
          i.tabIndex = i === item ? 0 : -1;
          i.setAttribute("aria-selected", i === item ? "true" : "false");
        }
        view.onOpen(n);
      } },
      el("span", { class: "state", id: "n-" + n.id + "-state", "data-state": word(n), text: label(n) }),
      el("span", { class: "session" }, el("span", { class: "indent" }, ...guides, toggle),
        el("span", { class: "who" },
          el("span", { class: "name", id: "n-" + n.id + "-name", text: n.name }),
          el("span", { class: "agent", text: n.parent_id ? n.agent : n.agent + " · root" }))),
      el("span", { class: "doing", "data-testid": "running-tools", title: now ? "running now" : n.headline,
        text: now ? "⚙ " + now : n.headline }),
      el("span", { class: "model", text: n.model }),
      el("span", { class: "num", "data-testid": "node-tokens",
        title: "own | subtree tokens" + (cost ? ", subtree cost" : ""),
        text: tokens(n.usage.own.total_tokens) + " | " + tokens(n.usage.aggregate.total_tokens) + cost }),
      el("span", { class: "num elapsed", "data-created": n.created_at, "data-updated": n.updated_at,
        "data-live": live(n) ? "1" : "0", text: elapsed(n) }),
      word(n) === "working"
        ? el("button", { class: "danger small", type: "button", "data-testid": "cancel", text: "Cancel",
            "aria-label": "Cancel " + n.name, onclick: (e) => { e.stopPropagation(); view.onCancel(n, e.target); } })
        : el("span")));
    if (children.length && open) {
      item.append(el("ul", { role: "group" }, ...children.map((c) => row(c, level + 1))));
    }
    return item;
  };
  const focusedBefore = host.contains(document.activeElement) ? view.focus : null;
  host.replaceChildren(row(root, 1));
  const items = [...host.querySelectorAll("[role=treeitem]")];
  const current = items.find((i) => i.dataset.id === view.focus) || items[0];
  if (current) current.tabIndex = 0;
  if (focusedBefore && current) current.focus({ preventScroll: true });
  // The filter hid the focused row: the focus is the first row now.
  if (current && current.dataset.id !== view.focus) view.focus = current.dataset.id;
}

// Arrow keys, Home/End, Enter and Space on the tree (WAI-ARIA tree pattern).
export function treeKeys(host, view) {
  host.addEventListener("keydown", (e) => {
    const items = [...host.querySelectorAll("[role=treeitem]")];
    const at = items.indexOf(document.activeElement);
    if (at < 0) return;
    const item = items[at];
    const move = (to) => {
      if (!to) return;
      item.tabIndex = -1;
      to.tabIndex = 0;
      to.focus();
      view.focus = to.dataset.id;
      for (const i of items) i.setAttribute("aria-selected", i === to ? "true" : "false");
    };
    const expanded = item.getAttribute("aria-expanded");
    switch (e.key) {
      case "ArrowDown": move(items[at + 1]); break;
      case "ArrowUp": move(items[at - 1]); break;
      case "Home": move(items[0]); break;
      case "End": move(items[items.length - 1]); break;
      case "ArrowRight":
        if (expanded === "false") view.onToggle(item.dataset.id);
        else if (expanded === "true") move(item.querySelector("[role=treeitem]"));
        break;
      case "ArrowLeft":
        if (expanded === "true") view.onToggle(item.dataset.id);
        else move(item.parentElement.closest("[role=treeitem]"));
        break;
      case "Enter": case " ":
        item.querySelector(".row").click();
        break;
      default: return;
    }
    e.preventDefault();
  });
}
