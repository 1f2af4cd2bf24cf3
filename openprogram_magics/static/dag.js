// The session DAG, drawn live from the summaries that openprogram_magics/widget.py syncs.
//
// Python lays the graph out (x = column, lane, order = row with nothing folded); this file
// only turns summaries into SVG, re-flows rows when a subtree is folded (locally: the
// kernel may be busy running a cell), and asks the kernel for a node's detail on click.
// Stable hooks for browser tests: g.op-node[data-id][data-kind][data-status], .op-detail,
// .op-detail-doc, .op-detail-messages, .op-toggle, .op-search.

const NS = "http://www.w3.org/2000/svg";
const ROW = 24; // px per row
const COL = 20; // px per column
const R = 7; // node radius
const PAD = 14;
const ANIMATE_MAX_ROWS = 400; // running/HEAD animations repaint the SVG: small graphs only
const KIND_COLORS = {
  root: "#475569",
  turn: "#2563eb",
  reply: "#7c3aed",
  llm: "#9333ea",
  function: "#059669",
  tool: "#0d9488",
  ask_user: "#d97706",
  error: "#dc2626",
};
const LANE_COLORS = ["#64748b", "#e11d48", "#0891b2", "#65a30d", "#c026d3", "#ea580c"];
const OPEN = new Set(["running", "awaiting"]);
const FADED = new Set(["cancelled", "interrupted"]);
const FIELDS = [
  ["doc", "Docstring", "op-detail-doc"],
  ["input", "Inputs", "op-detail-input"],
  ["messages", "Prompt", "op-detail-messages"],
  ["output", "Output", "op-detail-output"],
  ["error", "Error", "op-detail-error"],
  ["traceback", "Traceback", "op-detail-traceback"],
  ["extra", "Other metadata", "op-detail-extra"],
];

function svgEl(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (parent) parent.appendChild(e);
  return e;
}

function htmlEl(tag, cls, text, parent) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (parent) parent.appendChild(e);
  return e;
}

function fmtMs(ms) {
  if (ms === undefined || ms === null) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(2)} s`;
  return `${Math.floor(ms / 60000)}m ${Math.floor((ms % 60000) / 1000)}s`;
}

function points(kind) {
  let pts;
  if (kind === "root") pts = [[0, -R], [R, 0], [0, R], [-R, 0]];
  else if (kind === "reply" || kind === "llm") pts = [[0, -R], [R, R * 0.8], [-R, R * 0.8]];
  else if (kind === "ask_user") {
    const h = R * 0.87;
    pts = [[R, 0], [R / 2, h], [-R / 2, h], [-R, 0], [-R / 2, -h], [R / 2, -h]];
  } else {
    const a = R * 0.41; // error: an octagon
    pts = [[a, -R], [R, -a], [R, a], [a, R], [-a, R], [-R, a], [-R, -a], [-a, -R]];
  }
  return pts.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
}

// One node's shape centred on (0, 0); the kind decides the form, CSS the state styling.
function drawShape(g, kind) {
  const known = kind in KIND_COLORS;
  const fill = known ? KIND_COLORS[kind] : "#e5e7eb";
  const attrs = { class: "op-shape", fill };
  let shape;
  if (kind === "turn") shape = svgEl("circle", { ...attrs, r: R }, g);
  else if (kind === "function" || kind === "tool" || !known) {
    const s = R * 0.85;
    shape = svgEl("rect", { ...attrs, x: -s, y: -s, width: 2 * s, height: 2 * s, rx: 2 }, g);
  } else shape = svgEl("polygon", { ...attrs, points: points(kind) }, g);
  return shape;
}

class DagView {
  constructor(model, el) {
    this.model = model;
    this.nodes = new Map(); // id -> summary
    this.els = new Map(); // id -> {g, label, edge}; made when a node is first shown
    this.stale = new Set(); // ids whose summary changed since their element was drawn
    this.pos = new Map(); // id -> {x, y} of visible nodes
    this.folded = new Set(model.get("folded") || []);
    this.selected = model.get("selected");
    this.headId = model.get("head_id");
    this.lanes = 1;
    this.query = "";
    this.handlers = [];
    this.build(el);
    this.listen("change:summary", () => this.reconcile(model.get("summary") || []));
    this.listen("change:folded", () => this.setFolded(model.get("folded") || []));
    this.listen("change:head_id", () => this.setHead(model.get("head_id")));
    this.listen("change:title", () => this.renderTitle());
    this.listen("change:selected", () => this.markSelected(model.get("selected")));
    this.listen("change:detail", () => this.maybeShowDetail(model.get("detail")));
    this.listen("msg:custom", (msg) => this.onMessage(msg));
    this.reconcile(model.get("summary") || []);
    this.renderTitle();
    if (this.selected) {
      const detail = model.get("detail");
      if (detail && detail.id === this.selected) this.renderDetail(this.selected, detail);
      else this.requestDetail(this.selected);
    }
    requestAnimationFrame(() => this.scrollTo(this.headId));
  }

  listen(event, fn) {
    this.model.on(event, fn);
    this.handlers.push([event, fn]);
  }

  destroy() {
    for (const [event, fn] of this.handlers) this.model.off(event, fn);
  }

  build(el) {
    const root = htmlEl("div", "op-dag", null, el);
    this.root = root;
    const bar = htmlEl("div", "op-toolbar", null, root);
    this.titleEl = htmlEl("span", "op-title", null, bar);
    this.search = htmlEl("input", "op-search", null, bar);
    this.search.type = "search";
    this.search.placeholder = "filter: name, kind or status";
    this.search.addEventListener("input", () => {
      this.query = this.search.value.trim().toLowerCase();
      this.applyFilter();
    });
    this.countEl = htmlEl("span", "op-count", null, bar);
    const body = htmlEl("div", "op-body", null, root);
    this.canvas = htmlEl("div", "op-canvas", null, body);
    this.svg = svgEl("svg", { class: "op-svg", width: 10, height: 10 }, this.canvas);
    this.size = [10, 10];
    this.edgeLayer = svgEl("g", { class: "op-edges" }, this.svg);
    this.nodeLayer = svgEl("g", { class: "op-nodes" }, this.svg);
    this.panel = htmlEl("div", "op-detail op-hidden", null, body);
    this.card = htmlEl("div", "op-card op-hidden", null, root);
    this.nodeLayer.addEventListener("click", (ev) => this.onClick(ev));
    this.nodeLayer.addEventListener("mouseover", (ev) => this.onHover(ev));
    this.nodeLayer.addEventListener("mouseout", () => this.card.classList.add("op-hidden"));
  }

  // -- summaries -> SVG ------------------------------------------------------------------

  reconcile(list) {
    const keep = new Set(list.map((s) => s.id));
    for (const id of [...this.nodes.keys()]) if (!keep.has(id)) this.remove(id);
    this.apply(list, []);
  }

  apply(list, removed) {
    for (const id of removed || []) this.remove(id);
    for (const s of list) {
      const old = this.nodes.get(s.id);
      if (old && JSON.stringify(old) === JSON.stringify(s)) continue;
      this.nodes.set(s.id, s);
      this.stale.add(s.id);
    }
    this.relayout();
  }

  remove(id) {
    const e = this.els.get(id);
    if (e) {
      e.g.remove();
      e.edge.remove();
    }
    this.els.delete(id);
    this.nodes.delete(id);
    this.pos.delete(id);
    this.stale.delete(id);
  }

  drawNode(s) {
    let e = this.els.get(s.id);
    if (!e) {
      const g = svgEl("g", { class: "op-node" }, this.nodeLayer);
      const edge = svgEl("path", { class: "op-edge", fill: "none" }, this.edgeLayer);
      e = { g, edge, label: null, y: null, d: null, lx: null };
      this.els.set(s.id, e);
    }
    const { g } = e;
    g.replaceChildren();
    g.setAttribute("data-id", s.id);
    g.setAttribute("data-kind", s.kind);
    g.setAttribute("data-status", s.status);
    const known = s.kind in KIND_COLORS;
    const isError = s.status === "error" || s.kind === "error";
    const cls = g.classList;
    cls.toggle("op-open", OPEN.has(s.status));
    cls.toggle("op-error", isError);
    cls.toggle("op-faded", FADED.has(s.status));
    cls.toggle("op-unknown", !known);
    cls.toggle("op-flagged", !!(s.flags && s.flags.length));
    cls.toggle("op-head", s.id === this.headId);
    cls.toggle("op-selected", s.id === this.selected);
    cls.toggle("op-dim", !this.matches(s));
    if (s.id === this.headId) svgEl("circle", { class: "op-halo", r: R + 4 }, g);
    drawShape(g, s.kind);
    const mark = isError ? "!" : known ? "" : "?";
    if (mark) svgEl("text", { class: "op-mark", y: 3.5, "text-anchor": "middle" }, g).textContent = mark;
    if (s.kids) {
      const t = svgEl("g", { class: "op-toggle", transform: `translate(${R + 8},0)` }, g);
      svgEl("rect", { x: -5, y: -5, width: 10, height: 10, rx: 2 }, t);
      svgEl("text", { y: 3.5, "text-anchor": "middle" }, t).textContent = this.folded.has(s.id)
        ? "+"
        : "−";
    }
    const label = svgEl("text", { class: "op-label", y: 4 }, g);
    svgEl("tspan", { class: "op-name" }, label).textContent = s.name;
    if (s.kids && this.folded.has(s.id)) {
      svgEl("tspan", { class: "op-badge" }, label).textContent = ` (+${s.desc} folded)`;
    }
    if (s.id === this.headId) svgEl("tspan", { class: "op-head-tag" }, label).textContent = " HEAD";
    const meta = [
      s.status !== "completed" ? s.status : "",
      fmtMs(s.ms),
      s.tokens !== undefined ? `${s.tokens} tok` : "",
      s.preview ? s.preview.slice(0, 70) : "",
    ].filter(Boolean);
    if (meta.length) svgEl("tspan", { class: "op-meta" }, label).textContent = ` ${meta.join(" · ")}`;
    e.label = label;
    e.lx = null;
    e.y = null; // force the transform to be set again
    const color = LANE_COLORS[s.lane % LANE_COLORS.length];
    e.edge.setAttribute("stroke", color);
    e.edge.setAttribute("class", s.caller ? "op-edge op-edge-caller" : "op-edge op-edge-pred");
  }

  // Rows: nodes in `order`, skipping those under a folded (or hidden) caller.  Elements
  // are (re)drawn only for visible nodes: a long session is mostly folded away.
  relayout() {
    const list = [...this.nodes.values()].sort((a, b) => a.order - b.order);
    this.lanes = 1 + list.reduce((m, s) => Math.max(m, s.lane || 0), 0);
    const hidden = new Set();
    let row = 0;
    let cols = 1;
    this.pos.clear();
    for (const s of list) {
      const par = s.caller;
      if (par !== undefined && this.nodes.has(par) && (hidden.has(par) || this.folded.has(par))) {
        hidden.add(s.id);
        const h = this.els.get(s.id);
        if (h && h.y !== -1) h.g.setAttribute("display", "none");
        if (h) h.y = -1;
        continue;
      }
      if (this.stale.has(s.id) || !this.els.has(s.id)) this.drawNode(s);
      this.stale.delete(s.id);
      const e = this.els.get(s.id);
      const y = row++;
      cols = Math.max(cols, s.x + 1);
      this.pos.set(s.id, { x: s.x, y });
      if (e.y !== y || e.x !== s.x) {
        e.g.setAttribute("transform", `translate(${PAD + s.x * COL},${PAD + y * ROW})`);
        if (e.y === -1 || e.y === null) e.g.removeAttribute("display");
        e.y = y;
        e.x = s.x;
      }
      const lx = (Math.max(s.x, this.lanes - 1) - s.x) * COL + R + (s.kids ? 16 : 6);
      if (e.lx !== lx) e.label.setAttribute("x", String(lx));
      e.lx = lx;
    }
    for (const s of list) this.drawEdge(s);
    // Only when the size changes: setting it, even to the same value, makes the browser
    // lay the whole SVG out again (~300 ms at 5,000 nodes), on every live update.
    const size = [PAD * 2 + cols * COL + 560, PAD * 2 + Math.max(row - 1, 0) * ROW + 4];
    if (size[0] !== this.size[0]) this.svg.setAttribute("width", String(size[0]));
    if (size[1] !== this.size[1]) this.svg.setAttribute("height", String(size[1]));
    this.size = size;
    this.visibleRows = row;
    this.root.classList.toggle("op-animate", row <= ANIMATE_MAX_ROWS);
    this.showCount();
  }

  drawEdge(s) {
    const e = this.els.get(s.id);
    if (!e) return;
    const from = s.caller || s.pred;
    const a = from && this.pos.get(from);
    const b = this.pos.get(s.id);
    let d = "";
    if (a && b) {
      const [px, py] = [PAD + a.x * COL, PAD + a.y * ROW];
      const [cx, cy] = [PAD + b.x * COL, PAD + b.y * ROW];
      if (s.caller) d = `M${px} ${py + R} V${cy} H${cx - R}`;
      else if (px === cx || cy <= py) d = `M${px} ${py} L${cx} ${cy}`;
      else {
        const mid = py + ROW / 2;
        d = `M${px} ${py} C${px} ${mid} ${cx} ${mid} ${cx} ${py + ROW} L${cx} ${cy}`;
      }
    }
    if (d !== e.d) {
      if (d) e.edge.setAttribute("d", d);
      else e.edge.removeAttribute("d");
      e.d = d;
    }
  }

  matches(s) {
    const q = this.query;
    return !q || `${s.name} ${s.kind} ${s.status} ${s.preview || ""} ${s.id}`.toLowerCase().includes(q);
  }

  applyFilter() {
    for (const [id, e] of this.els) e.g.classList.toggle("op-dim", !this.matches(this.nodes.get(id)));
    this.showCount();
  }

  showCount() {
    if (!this.query) {
      this.countEl.textContent = `${this.visibleRows} of ${this.nodes.size} nodes shown`;
      return;
    }
    let hits = 0;
    let away = 0;
    for (const s of this.nodes.values()) {
      if (!this.matches(s)) continue;
      hits += 1;
      if (!this.pos.has(s.id)) away += 1;
    }
    const folded = away ? ` (${away} folded away)` : "";
    this.countEl.textContent = `${hits} match${hits === 1 ? "" : "es"}${folded}`;
  }

  renderTitle() {
    this.titleEl.textContent = this.model.get("title") || "session DAG";
  }

  setHead(id) {
    const old = this.headId;
    this.headId = id;
    for (const nid of [old, id]) if (nid && this.nodes.has(nid)) this.stale.add(nid);
    this.relayout();
  }

  setFolded(ids) {
    const next = new Set(ids);
    const changed = [...this.folded, ...next].filter((id) => this.folded.has(id) !== next.has(id));
    this.folded = next;
    for (const id of changed) if (this.nodes.has(id)) this.stale.add(id);
    this.relayout();
  }

  toggleFold(id) {
    const next = new Set(this.folded);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    this.setFolded([...next]);
    this.model.set("folded", [...next]);
    this.model.save_changes();
  }

  scrollTo(id) {
    const p = id && this.pos.get(id);
    if (p) this.canvas.scrollTop = PAD + p.y * ROW - this.canvas.clientHeight / 2;
  }

  // -- interaction -----------------------------------------------------------------------

  onClick(ev) {
    const g = ev.target.closest(".op-node");
    if (!g) return;
    const id = g.getAttribute("data-id");
    if (ev.target.closest(".op-toggle")) this.toggleFold(id);
    else this.select(id);
  }

  onHover(ev) {
    const g = ev.target.closest(".op-node");
    const s = g && this.nodes.get(g.getAttribute("data-id"));
    if (!s) return;
    const c = this.card;
    c.replaceChildren();
    htmlEl("div", "op-card-title", `${s.kind} · ${s.name}`, c);
    const bits = [s.status, fmtMs(s.ms), s.tokens !== undefined ? `${s.tokens} tokens` : ""];
    htmlEl("div", "op-card-meta", bits.filter(Boolean).join(" · "), c);
    if (s.kids) htmlEl("div", "op-card-meta", `${s.kids} calls, ${s.desc} below`, c);
    if (s.flags) htmlEl("div", "op-card-flags", `⚠ ${s.flags.join(", ")}`, c);
    if (s.preview) htmlEl("div", "op-card-preview", s.preview, c);
    const box = this.canvas.getBoundingClientRect();
    const at = g.getBoundingClientRect();
    const host = this.card.parentElement.getBoundingClientRect();
    c.style.left = `${Math.min(at.left - host.left + 24, box.width - 240)}px`;
    c.style.top = `${at.bottom - host.top + 4}px`;
    c.classList.remove("op-hidden");
  }

  select(id) {
    this.markSelected(id);
    this.model.set("selected", id);
    this.model.save_changes();
    this.requestDetail(id);
  }

  requestDetail(id, field) {
    if (field) this.model.send({ type: "more", id, field });
    else {
      this.model.send({ type: "select", id });
      this.panel.classList.remove("op-hidden");
      this.panel.replaceChildren();
      htmlEl("div", "op-detail-loading", "loading… (the kernel answers when it is idle)", this.panel);
    }
  }

  markSelected(id) {
    if (this.selected === id) return;
    const old = this.selected && this.els.get(this.selected);
    if (old) old.g.classList.remove("op-selected");
    this.selected = id;
    const e = id && this.els.get(id);
    if (e) e.g.classList.add("op-selected");
  }

  onMessage(msg) {
    if (!msg || typeof msg !== "object") return;
    if (msg.type === "upsert") this.apply(msg.nodes || [], msg.removed || []);
    else if (msg.type === "detail" && msg.id === this.selected) {
      if (msg.detail) this.renderDetail(msg.id, msg.detail);
      else this.renderError(msg.error || "no detail");
    }
  }

  maybeShowDetail(detail) {
    if (detail && detail.id === this.selected && this.panel.dataset.id !== detail.id) {
      this.renderDetail(detail.id, detail);
    }
  }

  renderError(text) {
    this.panel.classList.remove("op-hidden");
    this.panel.replaceChildren();
    htmlEl("div", "op-detail-error", text, this.panel);
  }

  renderDetail(id, d) {
    const p = this.panel;
    p.classList.remove("op-hidden");
    p.replaceChildren();
    p.dataset.id = id;
    const head = htmlEl("div", "op-detail-head", null, p);
    htmlEl("span", `op-detail-kind op-kind-${d.kind}`, d.kind, head);
    htmlEl("b", "op-detail-name", ` ${d.name ?? ""} `, head);
    htmlEl("span", `op-detail-status op-status-${d.status}`, d.status, head);
    const close = htmlEl("button", "op-detail-close", "×", head);
    close.title = "close";
    close.addEventListener("click", () => p.classList.add("op-hidden"));
    const facts = [
      ["id", d.id],
      ["duration", fmtMs(d.duration_ms)],
      ["model", d.model],
      ["tokens", d.tokens ? `${d.tokens.input} in · ${d.tokens.output} out` : ""],
      ["cost", d.cost !== undefined ? `$${d.cost}` : ""],
      ["seq", d.seq],
      ["turn", d.turn],
    ];
    const dl = htmlEl("dl", "op-detail-facts", null, p);
    for (const [k, v] of facts) {
      if (v === undefined || v === null || v === "") continue;
      htmlEl("dt", null, k, dl);
      htmlEl("dd", null, v, dl);
    }
    for (const [key, title, cls] of FIELDS) {
      if (!d[key]) continue;
      const name = key === "output" && (d.kind === "llm" || d.kind === "reply") ? "Reply" : title;
      const full = d.expanded === key; // already as long as "show more" gets it
      if (key === "messages") this.renderMessages(p, id, d.messages, full);
      else this.renderField(p, id, key, name, cls, d[key], full);
    }
  }

  renderField(parent, id, key, title, cls, field, full) {
    const sec = htmlEl("section", `op-detail-field ${cls}`, null, parent);
    htmlEl("h4", null, title, sec);
    htmlEl("pre", null, field.text, sec);
    if (field.truncated) this.moreButton(sec, id, key, field.text.length, field.length, full);
  }

  renderMessages(parent, id, m, full) {
    const sec = htmlEl("section", "op-detail-field op-detail-messages", null, parent);
    htmlEl("h4", null, `Prompt (${m.count} message${m.count === 1 ? "" : "s"})`, sec);
    m.items.forEach((item, i) => {
      if (m.omitted && i === m.omitted_at) htmlEl("div", "op-msg-gap", `… ${m.omitted} more …`, sec);
      const div = htmlEl("div", `op-msg op-msg-${item.role}`, null, sec);
      htmlEl("div", "op-msg-role", item.role, div);
      htmlEl("pre", null, item.content.text, div);
    });
    if (m.truncated) this.moreButton(sec, id, "messages", null, m.length, full);
  }

  moreButton(sec, id, field, shown, total, full) {
    if (full) {
      // the kernel sends at most 1 MB of a field: another click would get the same text
      const note =
        shown === null
          ? "clipped (the longest the widget shows)"
          : `the first ${shown} of ${total} characters (the most the widget shows)`;
      htmlEl("div", "op-more-note", note, sec);
      return;
    }
    const label = shown === null ? "show more" : `show more (${shown} of ${total} characters)`;
    const b = htmlEl("button", "op-more", label, sec);
    b.dataset.field = field;
    b.addEventListener("click", () => {
      b.disabled = true;
      b.textContent = "loading…";
      this.requestDetail(id, field);
    });
  }
}

export default {
  render({ model, el }) {
    const view = new DagView(model, el);
    return () => view.destroy();
  },
};
