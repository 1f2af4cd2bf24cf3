// `%openprogram diff --widget`: the comparison of two lines side by side, drawn from the
// data openprogram_magics/diff_widget.py syncs (`view`): A's side left, B's right, one
// pair per row; a pair's row opens and closes on a click (`opened`: row indexes), and
// the unchanged calls are hidden until "show unchanged calls" is ticked (`show_same`).
// Everything is local (the kernel may be busy); a live model is told what changed so the state is
// saved.  The same code draws a saved view without a kernel (renderSaved).
// Stable hooks for browser tests: .op-diffw, .op-diffw-row[data-state][data-index]
// (.op-open when open), .op-diffw-same (the toggle), .op-diffw-side-a / -b.

const COLORS = { "-": ["#fee2e2", "#991b1b"], "+": ["#dcfce7", "#166534"] };

function el(tag, cls, text, parent) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (parent) parent.appendChild(e);
  return e;
}

// One side of a section's diff: the lines both have and this side's own ("-" A, "+" B).
function side(parent, title, lines, sign) {
  const box = el("div", "op-diffw-section", null, parent);
  el("b", null, title, box);
  const pre = el("pre", null, null, box);
  lines.forEach((line) => {
    const mark = line.slice(0, 1);
    if ((mark === "-" || mark === "+") && mark !== sign) return;
    const span = el("span", null, "-+ ".includes(mark) ? line.slice(1) : line, pre);
    if (COLORS[mark]) [span.style.background, span.style.color] = COLORS[mark];
    pre.appendChild(document.createTextNode("\n"));
  });
}

const BADGE = {
  added: "added: only in B",
  removed: "removed: only in A",
  changed: "another answer",
  differs: "differs, the same answer",
};

class DiffView {
  constructor(model, root) {
    this.model = model;
    this.root = el("div", "op-diffw tex2jax_ignore mathjax_ignore", null, root);
    this.onChange = () => this.draw();
    model.on("change:view", this.onChange);
    model.on("change:show_same", this.onChange);
    model.on("change:opened", this.onChange);
    this.draw();
  }

  dispose() {
    this.model.off("change:view", this.onChange);
    this.model.off("change:show_same", this.onChange);
    this.model.off("change:opened", this.onChange);
    this.root.remove();
  }

  save(key, value) {
    this.model.set(key, value);
    if (this.model.save_changes) this.model.save_changes();
  }

  draw() {
    const v = this.model.get("view") || {};
    const rows = v.rows || [];
    const showSame = Boolean(this.model.get("show_same"));
    const opened = new Set(this.model.get("opened") || []);
    const r = this.root;
    r.replaceChildren();
    el("div", "op-diffw-title", v.title, r);
    (v.summary || []).forEach((line) => el("div", "op-diffw-line", line, r));
    el("div", "op-diffw-why", "why", r);
    (v.findings || []).forEach((f) => el("div", "op-diffw-finding", `• ${f}`, r));
    const bar = el("div", "op-diffw-bar", null, r);
    const same = rows.filter((row) => row.state === "same").length;
    const label = el("label", null, null, bar);
    const box = el("input", "op-diffw-same", null, label);
    box.type = "checkbox";
    box.checked = showSame;
    box.addEventListener("change", () => this.save("show_same", box.checked));
    label.appendChild(document.createTextNode(` show unchanged calls (${same})`));
    for (const [text, open] of [["open all", true], ["close all", false]]) {
      const b = el("button", "op-diffw-all", text, bar);
      b.addEventListener("click", () => {
        const shown = rows.map((row, i) => i).filter((i) => showSame || rows[i].state !== "same");
        this.save("opened", open ? shown : []);
      });
    }
    if (v.omitted) el("div", "op-diffw-line", `… ${v.omitted} more rows not shown`, bar);
    const table = el("table", "op-diffw-table", null, r);
    const head = el("tr", null, null, table);
    el("th", null, `A: ${v.a ?? ""}`, head);
    el("th", null, `B: ${v.b ?? ""}`, head);
    rows.forEach((row, i) => {
      if (row.state === "same" && !showSame) return;
      this.drawRow(table, row, i, opened.has(i));
    });
  }

  drawRow(table, row, i, open) {
    const tr = el("tr", `op-diffw-row${open ? " op-open" : ""}`, null, table);
    tr.dataset.state = row.state;
    tr.dataset.index = String(i);
    const td = el("td", "op-diffw-head", null, tr);
    td.colSpan = 2;
    el("span", "op-diffw-caret", open ? "▾ " : "▸ ", td);
    el("b", null, row.path, td);
    el("span", `op-diffw-state op-diffw-${row.state}`, ` ${BADGE[row.state] || row.state}`, td);
    if (row.note) el("div", "op-diffw-note", row.note, td);
    if (row.deltas) el("div", "op-diffw-deltas", row.deltas, td);
    td.addEventListener("click", () => {
      const now = new Set(this.model.get("opened") || []);
      if (now.has(i)) now.delete(i);
      else now.add(i);
      this.save("opened", [...now].sort((x, y) => x - y));
    });
    if (!open) return;
    const body = el("tr", "op-diffw-body", null, table);
    const a = el("td", "op-diffw-side-a", null, body);
    const b = el("td", "op-diffw-side-b", null, body);
    if (row.state === "added") {
      el("i", null, "—", a);
      el("span", null, row.kind, b);
    } else if (row.state === "removed") {
      el("span", null, row.kind, a);
      el("i", null, "—", b);
    }
    for (const [title, lines] of row.sections || []) {
      side(a, title, lines, "-");
      side(b, title, lines, "+");
    }
    if (row.state === "same" && !(row.sections || []).length) {
      el("i", null, "the same on both sides", a);
      el("i", null, "the same on both sides", b);
    }
  }
}

function render({ model, el: root }) {
  const view = new DiffView(model, root);
  return () => view.dispose();
}

// A stand-in for the widget model over the data a notebook saved (the
// application/vnd.openprogram.diff-view+json part, see diff_widget.py).
class SavedModel {
  constructor(data) {
    this.values = {
      view: data.view || {},
      show_same: Boolean(data.show_same),
      opened: data.opened || [],
    };
    this.handlers = new Map();
  }
  get(key) {
    return this.values[key];
  }
  set(key, value) {
    this.values[key] = value;
    (this.handlers.get(`change:${key}`) || []).forEach((f) => f());
  }
  on(name, f) {
    this.handlers.set(name, [...(this.handlers.get(name) || []), f]);
  }
  off(name, f) {
    this.handlers.set(name, (this.handlers.get(name) || []).filter((g) => g !== f));
  }
}

// Draw saved diff data into `root` (no kernel); returns a function that tears it down.
export function renderSaved(root, data) {
  const view = new DiffView(new SavedModel(data || {}), root);
  return () => view.dispose();
}

export default { render };
