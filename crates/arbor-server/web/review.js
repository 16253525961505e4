// What a person sees of a call waiting for them beyond its arguments (its review: a
// merge_child's files and lines), and a coding child's change itself (files and hunks, read
// by pages from /v1/sessions/{id}/diff). Every text goes in through textContent.

import { api, el } from "./ui.js";

// The review's summary and its files, as the card shows them.
export function reviewBlock(review) {
  const files = (review.files || []).map((f) =>
    el("li", { "data-testid": "review-file" },
      el("code", { text: f.path }),
      el("span", { class: "added", text: " +" + (f.added == null ? "bin" : f.added) }),
      el("span", { class: "removed", text: " -" + (f.removed == null ? "bin" : f.removed) })));
  const more = (review.files_total || 0) > files.length
    ? [el("li", { class: "who", text: "… " + (review.files_total - files.length) + " more" })] : [];
  return el("div", { class: "review", "data-testid": "review" },
    el("p", { class: "summary", "data-testid": "review-summary", text: review.summary || "" }),
    el("ul", { class: "files" }, ...files, ...more));
}

// A patch as lines, each marked as added, removed, a hunk's head or context.
function patchLines(text) {
  return text.split("\n").map((line) => {
    const kind = line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ")
      ? "file" : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add"
      : line.startsWith("-") ? "del" : "ctx";
    return el("span", { class: "line " + kind, text: line + "\n" });
  });
}

// A button that shows (and hides) the change of the coding child `session`, reading its
// patch a page at a time ("More" reads on).
export function changesToggle(session) {
  const box = el("div", { class: "changes", "data-testid": "changes", hidden: true });
  let next = 0;
  let reading = false;
  const more = el("button", { type: "button", "data-testid": "changes-more", text: "More", hidden: true });
  const pre = el("pre", { class: "patch", "data-testid": "patch" });
  const note = el("p", { class: "who" });
  const read = async () => {
    if (reading) return;
    reading = true;
    more.disabled = true;
    try {
      const d = await api("GET", "/v1/sessions/" + session + "/diff?max_bytes=65536&offset=" + next);
      if (next === 0) note.textContent = d.branch + " at " + d.tip.slice(0, 12) + ": "
        + d.files_total + " files, +" + d.added + " -" + d.removed;
      pre.append(...patchLines(d.patch));
      next = d.next_offset == null ? null : d.next_offset;
      more.hidden = next == null;
    } catch (e) {
      pre.append(el("span", { class: "line hunk", text: "No more to show: " + e.message + "\n" }));
    } finally { more.disabled = false; reading = false; }
  };
  more.onclick = read;
  box.append(note, pre, more);
  const toggle = el("button", { type: "button", "data-testid": "show-changes", text: "Show changes",
    onclick: () => {
      box.hidden = !box.hidden;
      toggle.textContent = box.hidden ? "Show changes" : "Hide changes";
      if (!box.hidden && next === 0 && !pre.childNodes.length) read();
    } });
  return { toggle, box };
}
