// The session DAG, drawn live from the summaries that openprogram_magics/widget.py syncs.
//
// Python lays the graph out (x = column, lane, order = row with nothing folded); this file
// only turns summaries into SVG, re-flows rows when a subtree is folded (locally: the
// kernel may be busy running a cell), and asks the kernel for a node's detail on click.
// A long graph is virtualized: the SVG keeps its full height (so the scrollbar is right)
// but only the rows in or near the viewport have elements, made or reused on scroll.
// Stable hooks for browser tests: g.op-node[data-id][data-kind][data-status], .op-detail,
// .op-detail-doc, .op-detail-messages, .op-toggle, .op-search, .op-older, .op-continue,
// .op-branch[data-lane][data-first] (one per branch: who ran it, when);
// .op-dag[data-rows] is the number of rows laid out (drawn or not), .op-dag[data-older] the
// nodes of the session older than the view holds (a view of its newest window asks for
// them on scroll).

import STYLE from "./style.json";

const NS = "http://www.w3.org/2000/svg";
const ROW = STYLE.row; // px per row (style.json: shared with the static SVG in Python)
const COL = STYLE.col; // px per column
const R = STYLE.radius; // node radius
const PAD = STYLE.pad;
const ANIMATE_MAX_ROWS = 400; // running/HEAD animations repaint the SVG: small graphs only
const VIRTUAL_MIN_ROWS = 400; // from this many rows on, only rows near the viewport are drawn
const OVERSCAN = 20; // rows drawn above and below the viewport
const VIEW_GUESS = 600; // px: the viewport's height while the canvas has no layout yet
const POOL_MAX = 200; // detached node elements kept for reuse
const CANVAS_MAX = 520; // px: .op-canvas max-height in dag.css
const BRANCHES_MAX = 12; // branches named above the canvas (the newest)
const OLDER_AT = 3 * ROW; // px from the top of the canvas where older rows are asked for
const KIND_COLORS = STYLE.kindColors;
const LANE_COLORS = STYLE.laneColors;
// dag.css reads these: one source for the colours of both drawings
const CSS_COLORS = Object.entries(STYLE.colors).map(([k, v]) => [
  `--op-${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`,
  v,
]);
const OPEN = new Set(["running", "awaiting"]);
const FADED = new Set(["cancelled", "interrupted"]);
const TURN_LEVEL = new Set(["turn", "reply"]); // "continue from here" starts a branch there
// what the "continue from here" button dispatches (bubbling, cancelable; detail {source}):
// the notebook extension inserts the cell and cancels it (labextension/src/index.ts)
export const INSERT_CELL_EVENT = "openprogram-insert-cell";
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

function fmtCost(usd) {
  if (usd === undefined || usd === null) return "";
  return usd >= 0.0001 || usd === 0 ? `$${usd.toFixed(4)}` : "<$0.0001";
}

// `text` cut to about `n` characters at a word boundary (the whole text is in the hover
// card and the detail panel).
function clipWords(text, n) {
  if (!text || text.length <= n) return text || "";
  const cut = text.slice(0, n - 1);
  const space = cut.lastIndexOf(" ");
  return `${space > n * 0.6 ? cut.slice(0, space) : cut}…`;
}

// When a turn ran: the time of day, with the date when it is not today.
function fmtAt(at) {
  if (!at) return "";
  const d = new Date(at * 1000);
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (d.toDateString() === new Date().toDateString()) return time;
  return `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${time}`;
}

function fmtMs(ms) {
  if (ms === undefined || ms === null) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(2)} s`;
  return `${Math.floor(ms / 60000)}m ${Math.floor((ms % 60000) / 1000)}s`;
}

// One node's shape centred on (0, 0); the kind decides the form, CSS the state styling.
function drawShape(g, kind) {
  const known = kind in KIND_COLORS;
  const fill = known ? KIND_COLORS[kind] : STYLE.unknownFill;
  const attrs = { class: "op-shape", fill };
  const shape = (known && STYLE.shapes[kind]) || "square";
  if (shape === "circle") return svgEl("circle", { ...attrs, r: R }, g);
  if (shape === "square") {
    const s = R * 0.85;
    return svgEl("rect", { ...attrs, x: -s, y: -s, width: 2 * s, height: 2 * s, rx: 2 }, g);
  }
  const pts = shape.map(([x, y]) => `${(x * R).toFixed(1)},${(y * R).toFixed(1)}`).join(" ");
  return svgEl("polygon", { ...attrs, points: pts }, g);
}

class DagView {
  constructor(model, el) {
    this.model = model;
    this.nodes = new Map(); // id -> summary
    this.rows = []; // ids of the visible nodes (not folded away), top to bottom
    this.pos = new Map(); // id -> {x, y} of visible nodes (y = row)
    this.drawn = new Map(); // id -> {g, label, x, y, lx}: nodes that have an element now
    this.edges = new Map(); // id -> {path, d, cls, stroke}: the edge into that node
    this.pool = []; // detached node elements, reused for rows scrolled into view
    this.stale = new Set(); // drawn ids whose summary changed since they were drawn
    this.span = [0, -1]; // first and last row drawn
    this.folded = new Set(model.get("folded") || []);
    this.selected = model.get("selected");
    this.headId = model.get("head_id");
    this.lanes = 1;
    this.query = "";
    this.cursor = -1; // row of the last search hit shown by Enter
    this.frame = 0;
    this.asked = new Set(); // light rows (index only) whose whole summary was asked for
    this.older = model.get("older") || 0; // nodes older than this view's window
    this.olderAsked = false; // an older window was asked for and has not come yet
    this.handlers = [];
    this.build(el);
    this.listen("change:summary", () => this.reconcile(model.get("summary") || []));
    this.listen("change:folded", () => this.setFolded(model.get("folded") || []));
    this.listen("change:head_id", () => this.setHead(model.get("head_id")));
    this.listen("change:title", () => this.renderTitle());
    this.listen("change:selected", () => this.markSelected(model.get("selected")));
    this.listen("change:detail", () => this.maybeShowDetail(model.get("detail")));
    this.listen("change:older", () => this.setOlder(model.get("older") || 0));
    this.listen("msg:custom", (msg) => this.onMessage(msg));
    this.reconcile(model.get("summary") || []);
    this.renderTitle();
    this.renderOlder();
    if (this.selected) {
      const detail = model.get("detail");
      if (detail && detail.id === this.selected) this.renderDetail(this.selected, detail);
      else this.requestDetail(this.selected);
    }
    // Only a graph taller than its canvas needs scrolling to HEAD; asking the others would
    // force a layout of the whole page per view (a reopened notebook has one per turn).
    if (PAD * 2 + this.rows.length * ROW > CANVAS_MAX) {
      requestAnimationFrame(() => this.scrollTo(this.headId));
    }
  }

  listen(event, fn) {
    this.model.on(event, fn);
    this.handlers.push([event, fn]);
  }

  destroy() {
    for (const [event, fn] of this.handlers) this.model.off(event, fn);
    if (this.resizer) this.resizer.disconnect();
    cancelAnimationFrame(this.frame);
    clearTimeout(this.searchTimer);
    clearTimeout(this.rowsTimer);
  }

  build(el) {
    const root = htmlEl("div", "op-dag", null, el);
    this.root = root;
    for (const [name, value] of CSS_COLORS) root.style.setProperty(name, value);
    const bar = htmlEl("div", "op-toolbar", null, root);
    this.titleEl = htmlEl("span", "op-title", null, bar);
    this.search = htmlEl("input", "op-search", null, bar);
    this.search.type = "search";
    this.search.placeholder = "filter: name, kind or status";
    this.search.title = "Enter: the next match";
    this.search.addEventListener("input", () => {
      this.query = this.search.value.trim().toLowerCase();
      this.cursor = -1;
      this.applyFilter();
      if (!this.matchInView()) this.revealMatch(0);
      this.askSearch();
    });
    this.search.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter") this.revealMatch(this.cursor + 1);
    });
    this.countEl = htmlEl("span", "op-count", null, bar);
    this.olderEl = htmlEl("button", "op-older op-hidden", null, bar);
    this.olderEl.addEventListener("click", () => this.askOlder());
    this.branchesEl = htmlEl("div", "op-branches op-hidden", null, root);
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
    this.canvas.addEventListener(
      "scroll",
      () => {
        this.card.classList.add("op-hidden"); // it described a row that has moved
        this.schedulePaint();
        if (this.canvas.scrollTop < OLDER_AT) this.askOlder();
      },
      { passive: true },
    );
    if (typeof ResizeObserver !== "undefined") {
      this.resizer = new ResizeObserver(() => this.schedulePaint());
      this.resizer.observe(this.canvas);
    }
  }

  // -- summaries -> rows -----------------------------------------------------------------

  reconcile(list) {
    const keep = new Set(list.map((s) => s.id));
    for (const id of [...this.nodes.keys()]) if (!keep.has(id)) this.remove(id);
    this.apply(list, []);
  }

  // A node off-screen only gets its summary stored: it is drawn from it when scrolled to.
  apply(list, removed) {
    for (const id of removed || []) this.remove(id);
    for (const s of list) {
      const old = this.nodes.get(s.id);
      if (old && JSON.stringify(old) === JSON.stringify(s)) continue;
      this.nodes.set(s.id, s);
      if (this.drawn.has(s.id)) this.stale.add(s.id);
    }
    this.relayout();
  }

  remove(id) {
    const e = this.drawn.get(id);
    if (e) this.release(id, e);
    const edge = this.edges.get(id);
    if (edge) edge.path.remove();
    this.edges.delete(id);
    this.nodes.delete(id);
    this.pos.delete(id);
    this.stale.delete(id);
  }

  // Rows: nodes in `order`, skipping those under a folded (or hidden) caller.  Only the
  // row numbers are computed here (no DOM); paint() draws the rows in view.
  relayout() {
    const list = [...this.nodes.values()].sort((a, b) => a.order - b.order);
    this.lanes = 1 + list.reduce((m, s) => Math.max(m, s.lane || 0), 0);
    const hidden = new Set();
    let cols = 1;
    this.rows = [];
    this.pos.clear();
    this.runStarts = new Set(); // turn-level rows that ran in another kernel than the one above
    let run;
    for (const s of list) {
      if (s.caller !== undefined) continue;
      if (s.light) run = undefined; // not read yet: no boundary is claimed across it
      if (s.light || !s.run) continue;
      if (run !== undefined && s.run !== run) this.runStarts.add(s.id);
      run = s.run;
    }
    for (const s of list) {
      const par = s.caller;
      if (par !== undefined && this.nodes.has(par) && (hidden.has(par) || this.folded.has(par))) {
        hidden.add(s.id);
        continue;
      }
      cols = Math.max(cols, s.x + 1);
      this.pos.set(s.id, { x: s.x, y: this.rows.length });
      this.rows.push(s.id);
    }
    const rows = this.rows.length;
    // Only when the size changes: setting it, even to the same value, makes the browser
    // lay the whole SVG out again, on every live update.
    const size = [PAD * 2 + cols * COL + 560, PAD * 2 + Math.max(rows - 1, 0) * ROW + 4];
    if (size[0] !== this.size[0]) this.svg.setAttribute("width", String(size[0]));
    if (size[1] !== this.size[1]) this.svg.setAttribute("height", String(size[1]));
    this.size = size;
    this.root.classList.toggle("op-animate", rows <= ANIMATE_MAX_ROWS);
    this.root.dataset.rows = String(rows);
    this.paint();
    this.showCount();
    this.renderBranches(list);
  }

  // Branches side by side: the lanes are drawn next to each other; this names each one
  // (a chain of turns in one lane; a turn whose predecessor is in another lane starts one)
  // with who ran its turns and when, in its lane's colour.  The same rule as
  // openprogram/view/branches.py (the static views).  Only when there are two or more.
  renderBranches(list) {
    const found = [];
    const of = new Map();
    for (const s of list) {
      if (s.caller !== undefined) continue;
      const lane = s.lane || 0;
      let b = s.pred !== undefined ? of.get(s.pred) : undefined;
      if (!b || b.lane !== lane || b.tip !== s.pred) {
        const fork = s.pred !== undefined ? this.nodes.get(s.pred) : undefined;
        let where = fork ? `branch from ${fork.name}` : "from older turns";
        const cut = s.flags && s.flags.includes("missing-predecessor");
        if (s.pred === undefined && !cut) where = "from the start";
        b = { lane, first: s.id, tip: s.id, where, turns: 0, by: [], from: 0, to: 0 };
        found.push(b);
      }
      of.set(s.id, b);
      b.tip = s.id;
      if (s.kind !== "root") b.turns += 1;
      if (s.by && !b.by.includes(s.by)) b.by.push(s.by);
      if (s.at) [b.from, b.to] = [b.from ? Math.min(b.from, s.at) : s.at, Math.max(b.to, s.at)];
    }
    const lines = (found.length < 2 ? [] : found.slice(-BRANCHES_MAX)).map((b) => {
      const bits = [b.where, `${b.turns} turn${b.turns === 1 ? "" : "s"}`];
      if (b.by.length) bits.push(`by ${b.by.join(", ")}`);
      const [first, last] = [fmtAt(b.from), fmtAt(b.to)];
      if (first) bits.push(first === last ? first : `${first} – ${last}`);
      return [b, bits.join(" · ")];
    });
    const key = JSON.stringify(lines.map(([b, text]) => [b.lane, b.first, text]));
    if (key === this.branchesKey) return;
    this.branchesKey = key;
    const el = this.branchesEl;
    el.replaceChildren();
    el.classList.toggle("op-hidden", !lines.length);
    const earlier = found.length - BRANCHES_MAX;
    if (earlier > 0) htmlEl("div", "op-branch", `… ${earlier} earlier branches`, el);
    for (const [b, text] of lines) {
      const line = htmlEl("div", "op-branch", null, el);
      line.dataset.lane = String(b.lane);
      line.dataset.first = b.first;
      const dot = htmlEl("span", "op-branch-dot", "●", line);
      dot.style.color = LANE_COLORS[b.lane % LANE_COLORS.length];
      htmlEl("span", null, ` ${text}`, line);
    }
  }

  // -- rows -> SVG -----------------------------------------------------------------------

  // The rows to draw: all of them in a small graph, else the viewport plus OVERSCAN rows.
  viewSpan() {
    const n = this.rows.length;
    if (n < VIRTUAL_MIN_ROWS) return [0, n - 1];
    const top = this.canvas.scrollTop - PAD;
    const height = this.canvas.clientHeight || VIEW_GUESS;
    const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
    return [first, Math.min(n - 1, Math.ceil((top + height) / ROW) + OVERSCAN)];
  }

  schedulePaint() {
    if (this.frame || this.rows.length < VIRTUAL_MIN_ROWS) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      const [first, last] = this.viewSpan();
      if (first !== this.span[0] || last !== this.span[1]) this.paint();
    });
  }

  // Rows scrolled (or folded) away give their element back to the pool; rows in view get
  // one, drawn afresh if new or stale; then the edges that cross the rows drawn.
  paint() {
    const [first, last] = this.viewSpan();
    this.span = [first, last];
    for (const [id, e] of this.drawn) {
      const p = this.pos.get(id);
      if (!p || p.y < first || p.y > last) this.release(id, e);
    }
    let light = false;
    for (let y = first; y <= last; y++) {
      const s = this.nodes.get(this.rows[y]);
      this.place(s, y);
      light = light || (s.light && !this.asked.has(s.id));
    }
    this.stale.clear();
    this.paintEdges(first, last);
    if (light && !this.model.get("saved")) {
      clearTimeout(this.rowsTimer);
      this.rowsTimer = setTimeout(() => this.askRows(), 120);
    }
  }

  // Rows drawn from the session's index (`light`): once scrolling settles, the kernel
  // reads those still in view and sends their whole summaries (preview, duration, run).
  askRows() {
    const [first, last] = this.span;
    const ids = [];
    for (let y = first; y <= Math.min(last, this.rows.length - 1); y++) {
      const s = this.nodes.get(this.rows[y]);
      if (s && s.light && !this.asked.has(s.id)) ids.push(s.id);
    }
    for (const id of ids) this.asked.add(id);
    if (ids.length) this.model.send({ type: "rows", ids });
  }

  release(id, e) {
    e.g.remove();
    this.drawn.delete(id);
    this.stale.delete(id);
    if (this.pool.length < POOL_MAX) this.pool.push(e);
  }

  place(s, y) {
    let e = this.drawn.get(s.id);
    if (!e || this.stale.has(s.id)) e = this.drawNode(s, e);
    if (e.y !== y || e.x !== s.x) {
      e.g.setAttribute("transform", `translate(${PAD + s.x * COL},${PAD + y * ROW})`);
      e.y = y;
      e.x = s.x;
    }
    const lx = (Math.max(s.x, this.lanes - 1) - s.x) * COL + R + (s.kids ? 16 : 6);
    if (e.lx !== lx) e.label.setAttribute("x", String(lx));
    e.lx = lx;
  }

  drawNode(s, e) {
    if (!e) {
      e = this.pool.pop() || { g: svgEl("g", { class: "op-node" }) };
      e.x = e.y = e.lx = null; // force the transform and label x to be set again
      this.nodeLayer.appendChild(e.g);
      this.drawn.set(s.id, e);
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
    if (this.runStarts.has(s.id)) {
      // a restart or a re-run: a line across the canvas, above this row
      const x1 = -(PAD + s.x * COL);
      svgEl("line", { class: "op-run-line", x1, x2: x1 + this.size[0], y1: -ROW / 2, y2: -ROW / 2 }, g);
    }
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
    if (s.stale) svgEl("tspan", { class: "op-stale-tag" }, label).textContent = " ⟳ stale";
    if (this.runStarts.has(s.id)) {
      svgEl("tspan", { class: "op-run-tag" }, label).textContent = " ↻ new kernel";
    }
    const meta = [
      fmtAt(s.at),
      s.status !== "completed" ? s.status : "",
      fmtMs(s.ms),
      s.tokens !== undefined ? `${s.tokens} tok` : "",
      fmtCost(s.cost),
      clipWords(s.preview, 70),
    ].filter(Boolean);
    if (meta.length) svgEl("tspan", { class: "op-meta" }, label).textContent = ` ${meta.join(" · ")}`;
    e.label = label;
    e.lx = null;
    return e;
  }

  // An edge runs from its node's caller (or chain predecessor) down to it: drawn when
  // that stretch crosses the rows drawn, even if both ends are off-screen.
  paintEdges(first, last) {
    const keep = new Set();
    for (const id of this.rows) {
      const s = this.nodes.get(id);
      const from = s.caller || s.pred;
      const a = from && this.pos.get(from);
      const b = this.pos.get(id);
      if (!a || Math.max(a.y, b.y) < first || Math.min(a.y, b.y) > last) continue;
      keep.add(id);
      this.drawEdge(s, a, b);
    }
    for (const [id, e] of this.edges) {
      if (keep.has(id)) continue;
      e.path.remove();
      this.edges.delete(id);
    }
  }

  drawEdge(s, a, b) {
    let e = this.edges.get(s.id);
    if (!e) {
      e = { path: svgEl("path", { fill: "none" }, this.edgeLayer), d: "", cls: "", stroke: "" };
      this.edges.set(s.id, e);
    }
    const [px, py] = [PAD + a.x * COL, PAD + a.y * ROW];
    const [cx, cy] = [PAD + b.x * COL, PAD + b.y * ROW];
    let d;
    if (s.caller) d = `M${px} ${py + R} V${cy} H${cx - R}`;
    else if (px === cx || cy <= py) d = `M${px} ${py} L${cx} ${cy}`;
    else {
      const mid = py + ROW / 2;
      d = `M${px} ${py} C${px} ${mid} ${cx} ${mid} ${cx} ${py + ROW} L${cx} ${cy}`;
    }
    const cls = s.caller ? "op-edge op-edge-caller" : "op-edge op-edge-pred";
    const stroke = LANE_COLORS[s.lane % LANE_COLORS.length];
    if (d !== e.d) e.path.setAttribute("d", (e.d = d));
    if (cls !== e.cls) e.path.setAttribute("class", (e.cls = cls));
    if (stroke !== e.stroke) e.path.setAttribute("stroke", (e.stroke = stroke));
  }

  // -- older rows -------------------------------------------------------------------------

  // A view of a session's newest window: scrolled to the top (or the button clicked), the
  // kernel widens it by the previous window, sent as an "older" message.
  askOlder() {
    if (!this.older || this.olderAsked || this.model.get("saved")) return;
    this.olderAsked = true;
    this.renderOlder();
    this.model.send({ type: "older" });
  }

  // The older rows come above those shown: the row at the top of the viewport stays there.
  applyOlder(msg) {
    const top = Math.max(0, Math.floor((this.canvas.scrollTop - PAD) / ROW));
    const anchor = this.rows[Math.min(top, this.rows.length - 1)];
    const before = anchor !== undefined ? this.pos.get(anchor) : undefined;
    const was = before ? before.y : 0;
    this.apply(msg.nodes || [], []);
    const after = anchor !== undefined ? this.pos.get(anchor) : undefined;
    if (after && after.y !== was) {
      this.canvas.scrollTop += (after.y - was) * ROW;
      this.paint();
    }
    this.olderAsked = false;
    this.setOlder(typeof msg.older === "number" ? msg.older : 0);
  }

  setOlder(n) {
    this.older = n;
    this.renderOlder();
    this.showCount();
  }

  renderOlder() {
    const el = this.olderEl;
    this.root.dataset.older = String(this.older);
    el.classList.toggle("op-hidden", !this.older);
    if (!this.older) return;
    const saved = this.model.get("saved");
    el.disabled = Boolean(saved) || this.olderAsked;
    if (saved) {
      el.textContent = `${this.older} older nodes not in this view`;
      el.title = "`openprogram sessions show ID --page 2` lists them";
    } else {
      el.textContent = this.olderAsked ? "loading older rows…" : `↑ ${this.older} older nodes`;
      el.title = "scroll to the top, or click, for the rows before these";
    }
  }

  // -- search, fold, HEAD ----------------------------------------------------------------

  // A large session's calls under folds reach the browser when unfolded: the kernel sends
  // those that match a search (their rows then count as "folded away").
  askSearch() {
    clearTimeout(this.searchTimer);
    if (!this.query || this.model.get("saved")) return;
    this.searchTimer = setTimeout(() => this.model.send({ type: "search", q: this.query }), 150);
  }

  matches(s) {
    const q = this.query;
    return !q || `${s.name} ${s.kind} ${s.status} ${s.preview || ""} ${s.id}`.toLowerCase().includes(q);
  }

  applyFilter() {
    for (const [id, e] of this.drawn) e.g.classList.toggle("op-dim", !this.matches(this.nodes.get(id)));
    this.showCount();
  }

  matchInView() {
    const top = Math.floor((this.canvas.scrollTop - PAD) / ROW);
    const bottom = top + Math.ceil((this.canvas.clientHeight || VIEW_GUESS) / ROW);
    for (let y = Math.max(0, top); y <= Math.min(bottom, this.rows.length - 1); y++) {
      if (this.matches(this.nodes.get(this.rows[y]))) return true;
    }
    return false;
  }

  // Scroll to the first search hit at or after row `from` (wrapping around).
  revealMatch(from) {
    if (!this.query) return;
    const n = this.rows.length;
    for (let i = 0; i < n; i++) {
      const y = (from + i) % n;
      const id = this.rows[y];
      if (!this.matches(this.nodes.get(id))) continue;
      this.cursor = y;
      this.scrollTo(id);
      return;
    }
  }

  showCount() {
    if (!this.query) {
      this.countEl.textContent = `${this.rows.length} of ${this.nodes.size} nodes shown`;
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
    for (const nid of [old, id]) if (this.drawn.has(nid)) this.stale.add(nid);
    this.relayout();
  }

  setFolded(ids) {
    const next = new Set(ids);
    const changed = [...this.folded, ...next].filter((id) => this.folded.has(id) !== next.has(id));
    this.folded = next;
    for (const id of changed) if (this.drawn.has(id)) this.stale.add(id);
    this.relayout();
  }

  toggleFold(id) {
    const next = new Set(this.folded);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    this.setFolded([...next]);
    this.model.set("folded", [...next]);
    this.model.save_changes();
    const s = this.nodes.get(id);
    if (this.model.get("saved") && !next.has(id) && s && s.kids && !this.hasCalls(id)) {
      // a large session's view keeps only the calls that were shown
      this.countEl.textContent =
        "its calls were not saved in the notebook (`openprogram sessions show ID --html` has them)";
    }
  }

  hasCalls(id) {
    for (const s of this.nodes.values()) if (s.caller === id) return true;
    return false;
  }

  // Centre node `id` in the canvas, and draw the rows there now (not on the scroll event).
  scrollTo(id) {
    const p = id && this.pos.get(id);
    if (!p) return;
    this.canvas.scrollTop = PAD + p.y * ROW - this.canvas.clientHeight / 2;
    if (this.rows.length >= VIRTUAL_MIN_ROWS) this.paint();
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
    const bits = [
      s.status,
      fmtMs(s.ms),
      s.tokens !== undefined ? `${s.tokens} tokens` : "",
      fmtCost(s.cost),
    ];
    htmlEl("div", "op-card-meta", bits.filter(Boolean).join(" · "), c);
    if (s.kids) htmlEl("div", "op-card-meta", `${s.kids} calls, ${s.desc} below`, c);
    if (s.flags) htmlEl("div", "op-card-flags", `⚠ ${s.flags.join(", ")}`, c);
    if (s.stale) htmlEl("div", "op-card-flags", `stale: ${s.stale}`, c);
    if (s.preview) htmlEl("div", "op-card-preview", s.preview, c);
    if (s.at) htmlEl("div", "op-card-meta", `ran ${new Date(s.at * 1000).toLocaleString()}`, c);
    if (s.by) htmlEl("div", "op-card-meta", `by ${s.by}`, c);
    if (this.runStarts.has(s.id)) htmlEl("div", "op-card-meta", "first turn of a new kernel", c);
    // Below the row, or above it when the canvas has no room below: never over the row.
    const box = this.canvas.getBoundingClientRect();
    const at = g.getBoundingClientRect();
    const host = this.card.parentElement.getBoundingClientRect();
    const rowTop = at.top + at.height / 2 - ROW / 2;
    const rowBottom = rowTop + ROW;
    c.style.left = `${Math.max(0, Math.min(at.left - host.left + 24, box.width - 240))}px`;
    c.style.top = `${rowBottom - host.top + 2}px`;
    c.classList.remove("op-hidden");
    const height = c.getBoundingClientRect().height;
    if (rowBottom + 2 + height > box.bottom && rowTop - 2 - height >= box.top) {
      c.style.top = `${rowTop - host.top - 2 - height}px`;
    }
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
    const old = this.selected && this.drawn.get(this.selected);
    if (old) old.g.classList.remove("op-selected");
    this.selected = id;
    const e = id && this.drawn.get(id);
    if (e) e.g.classList.add("op-selected");
  }

  onMessage(msg) {
    if (!msg || typeof msg !== "object") return;
    if (msg.type === "upsert") this.apply(msg.nodes || [], msg.removed || []);
    else if (msg.type === "older") this.applyOlder(msg);
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
      ["continue from here", TURN_LEVEL.has(d.kind) ? `%%openprogram --from ${d.id}` : ""],
    ];
    const dl = htmlEl("dl", "op-detail-facts", null, p);
    for (const [k, v] of facts) {
      if (v === undefined || v === null || v === "") continue;
      htmlEl("dt", null, k, dl);
      htmlEl("dd", null, v, dl);
    }
    if (TURN_LEVEL.has(d.kind)) this.continueButton(p, `%%openprogram --from ${d.id}`);
    for (const [key, title, cls] of FIELDS) {
      if (!d[key]) continue;
      const name = key === "output" && (d.kind === "llm" || d.kind === "reply") ? "Reply" : title;
      const full = d.expanded === key; // already as long as "show more" gets it
      if (key === "messages") this.renderMessages(p, id, d.messages, full);
      else this.renderField(p, id, key, name, cls, d[key], full);
    }
  }

  // "continue from here": the notebook extension (labextension/src/index.ts) inserts a
  // cell with `source` below the cell holding this view; without it (a page, VS Code) the
  // line is copied to the clipboard.  Works the same on a saved view: no kernel is asked.
  continueButton(parent, source) {
    const b = htmlEl("button", "op-continue", "continue from here", parent);
    b.title = `insert a cell below: ${source}`;
    b.addEventListener("click", () => {
      const ask = new CustomEvent(INSERT_CELL_EVENT, {
        bubbles: true,
        cancelable: true,
        detail: { source },
      });
      if (!b.dispatchEvent(ask)) {
        b.textContent = "cell inserted below";
        return;
      }
      const copied = navigator.clipboard ? navigator.clipboard.writeText(source) : null;
      b.textContent = copied ? "copied: paste it into a new cell" : source;
      if (copied) copied.catch(() => (b.textContent = source));
    });
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
    if (this.model.get("saved")) {
      // drawn from the notebook's saved data: no kernel to ask for the rest
      const kept = shown === null ? "clipped" : `the first ${shown} of ${total} characters`;
      htmlEl("div", "op-more-note", `${kept} (as saved in the notebook)`, sec);
      return;
    }
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

// A stand-in for the widget model, over the DAG data a notebook saved (the
// application/vnd.openprogram.dag+json part, see openprogram/view/saved.py): the view
// asks it for details as it would ask the kernel, and it answers from the saved ones.
function savedModel(data) {
  const state = {
    summary: data.summary || [],
    head_id: data.head_id ?? null,
    title: data.title || "",
    folded: data.folded || [],
    older: data.older || 0,
    selected: null,
    detail: null,
    saved: true,
  };
  const handlers = new Map();
  const emit = (event, arg) => (handlers.get(event) || []).slice().forEach((fn) => fn(arg));
  return {
    get: (key) => state[key],
    set: (key, value) => {
      state[key] = value;
    },
    save_changes() {},
    on(event, fn) {
      if (!handlers.has(event)) handlers.set(event, []);
      handlers.get(event).push(fn);
    },
    off(event, fn) {
      const list = handlers.get(event) || [];
      const i = list.indexOf(fn);
      if (i >= 0) list.splice(i, 1);
    },
    send(msg) {
      const detail = (data.details || {})[msg.id];
      const reply = detail
        ? { type: "detail", id: msg.id, detail: { ...detail, expanded: msg.field || null } }
        : {
            type: "detail",
            id: msg.id,
            detail: null,
            error:
              "this node's details were not saved in the notebook (its DAG data is bounded); " +
              "`openprogram sessions show ID --html -o dag.html` has every node",
          };
      Promise.resolve().then(() => emit("msg:custom", reply));
    },
  };
}

// Draw saved DAG data into `el` (no kernel); returns a function that tears the view down.
// `data` is the payload, or its JSON text (how a large view is saved).
export function renderSaved(el, data) {
  const payload = typeof data === "string" ? JSON.parse(data) : data;
  const view = new DagView(savedModel(payload || {}), el);
  return () => view.destroy();
}

const widget = {
  render({ model, el }) {
    const view = new DagView(model, el);
    return () => view.destroy();
  },
};

export default widget;
