/* pytest-graphir HTML report: draws the module hierarchy as nested boxes and the op
 * graph inside them, laid out by the bundled @dagrejs/dagre (compound layout of the
 * visible nodes only: a closed box is one node, its interior is laid out when it opens).
 * Data: the JSON in #graphir-data (see pytest_graphir/report/payload.py). */
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var $ = function (id) { return document.getElementById(id); };
  function showError(msg) {
    var e = $("error"); e.hidden = false; e.textContent = "Report error: " + msg;
  }
  window.addEventListener("error", function (ev) { showError(ev.message); });

  var D = JSON.parse($("graphir-data").textContent);
  var items = D.items, N = items.length, edges = D.edges, changes = D.changes;
  var groups = D.groups || [], keysets = D.keysets || [];
  var NAME = 0, KIND = 1, TARGET = 2, PARENT = 3, STATUS = 4, DETAIL = 5;
  var kids = new Array(N), depth = new Int32Array(N), open = new Uint8Array(N);
  var leaves = new Int32Array(N), marks = new Int32Array(N), inner = new Int8Array(N), order = [];
  var RANK = { removed: 1, added: 2, changed: 3, reordered: 4, drift: 5 }, RANKED = ["", "removed", "added", "changed", "reordered", "drift"];
  var hide = {};   // kinds switched off with the legend chips
  var i, j;
  function unpack(v) {   // {"~": [keyset, values...]} -> {key: value, ...} (see payload.py)
    if (Array.isArray(v)) return v.map(unpack);
    if (v && typeof v === "object") {
      var o = {}, t = v["~"];
      if (Array.isArray(t) && keysets[t[0]]) { keysets[t[0]].forEach(function (k, n) { o[k] = unpack(t[n + 1]); }); return o; }
      Object.keys(v).forEach(function (k) { o[k] = unpack(v[k]); });
      return o;
    }
    return v;
  }
  for (i = 0; i < N; i++) {
    var det = unpack(items[i][DETAIL]);
    if (det && typeof det === "object" && (items[i][KIND] === "op" || items[i][KIND] === "module")) {
      var full = {}; full[items[i][KIND]] = items[i][TARGET];   // the key the payload left out
      Object.keys(det).forEach(function (k) { full[k] = det[k]; });
      det = full;
    }
    items[i][DETAIL] = det;
  }
  function status(i) { var st = items[i][STATUS]; return st && !hide[st] ? st : ""; }
  for (i = 0; i < N; i++) kids[i] = [];
  for (i = 0; i < N; i++) if (items[i][PARENT] >= 0) kids[items[i][PARENT]].push(i);
  // parents before children (group boxes are appended after their members)
  order.push(0);
  for (j = 0; j < order.length; j++) {
    var ks = kids[order[j]];
    for (i = 0; i < ks.length; i++) { depth[ks[i]] = depth[order[j]] + 1; order.push(ks[i]); }
  }
  function isBox(i) { return kids[i].length > 0; }
  for (j = order.length - 1; j >= 0; j--) {   // subtree op counts
    i = order[j];
    if (!isBox(i) && items[i][KIND] === "op") leaves[i] += 1;
    if (items[i][PARENT] >= 0) leaves[items[i][PARENT]] += leaves[i];
  }
  function countMarks() {   // marked nodes per subtree, and the strongest kind inside
    marks.fill(0); inner.fill(0);
    for (var j = order.length - 1; j >= 0; j--) {
      var i = order[j], st = status(i), p = items[i][PARENT];
      if (st) { marks[i] += 1; if (!inner[i] || RANK[st] < inner[i]) inner[i] = RANK[st]; }
      if (p >= 0) { marks[p] += marks[i]; if (inner[i] && (!inner[p] || inner[i] < inner[p])) inner[p] = inner[i]; }
    }
  }
  countMarks();
  var preds = {}, succs = {};
  edges.forEach(function (e) {
    (preds[e[1]] = preds[e[1]] || []).push(e[0]); (succs[e[0]] = succs[e[0]] || []).push(e[1]);
  });
  var byItem = {};
  changes.forEach(function (c, k) { if (c.item >= 0) (byItem[c.item] = byItem[c.item] || []).push(k); });

  // ---- initial state: open to open_depth, then around the first changes while small
  var BUDGET = 250, CHANGE_BUDGET = 80;  // nodes drawn at most when opening by depth / around changes
  open[0] = 1;
  function visibleCount() {
    var n = 0;
    for (var j = 0; j < order.length; j++) {
      var i = order[j], p = items[i][PARENT];
      if (i === 0 || (open[p] && shown(p))) n++;
    }
    return n;
  }
  function shown(i) {
    for (var p = items[i][PARENT]; p >= 0; p = items[p][PARENT]) if (!open[p]) return false;
    return true;
  }
  var visible = kids[0].length;
  for (j = 0; j < order.length; j++) {
    i = order[j];
    if (i && isBox(i) && depth[i] < D.open_depth && shown(i) && visible + kids[i].length <= BUDGET) {
      open[i] = 1; visible += kids[i].length - 1;
    }
  }
  if (D.focus >= 0) openAncestors(D.focus);   // the first structural change, whatever it costs
  for (j = 0, i = 0; j < N && i < 40; j++) {
    if (!items[j][STATUS]) continue;
    i++;
    var before = Array.prototype.slice.call(open);
    openAncestors(j);
    if (visibleCount() > CHANGE_BUDGET) { open.set(before); break; }
  }
  function openAncestors(i) {
    var changed = false;
    for (var p = items[i][PARENT]; p >= 0; p = items[p][PARENT]) if (!open[p]) { open[p] = 1; changed = true; }
    if (changed && typeof cache === "object") invalidate(i);
    return changed;
  }

  // ---- labels
  var measure = document.createElement("canvas").getContext("2d");
  function textWidth(s, font) { measure.font = font; return measure.measureText(s).width; }
  function rel(i) {
    var n = items[i][NAME], p = items[i][PARENT];
    if (p > 0 && items[p][KIND] !== "group") {
      var pn = items[p][NAME].split("@")[0];
      if (n.indexOf(pn + ".") === 0) return n.slice(pn.length + 1);
    } else if (p > 0) {
      var gn = items[p][NAME];
      if (n.indexOf(gn + ".") === 0) return n.slice(gn.length + 1);
    }
    return n;
  }
  function shapeText(o) {
    if (o && typeof o === "object" && o.shape) {
      var dt = String(o.dtype || "").replace("float", "f").replace("int", "i").replace("bool", "b");
      return "[" + o.shape.join("\u00d7") + "] " + dt;
    }
    return o === undefined ? "" : JSON.stringify(o);
  }
  function label(i) {
    var it = items[i], k = it[KIND], d = it[DETAIL] || {};
    if (k === "op") {
      var outs = d.out || [];
      return [it[TARGET], outs.length ? shapeText(outs[0]) + (outs.length > 1 ? " +" + (outs.length - 1) : "") : ""];
    }
    if (k === "input" || k === "output") return [it[NAME] === k ? k : k + " " + it[NAME], shapeText(d)];
    var t = rel(i) + (it[TARGET] ? " : " + it[TARGET] : "");
    if (!isBox(i)) return [t, shapeText((d.out || [])[0])];
    var s = "\u25b8 " + leaves[i] + " op" + (leaves[i] === 1 ? "" : "s");
    if (marks[i]) s += " \u00b7 " + marks[i] + " marked";
    return [t, s];
  }

  // ---- layout: one dagre layout per open box, of its direct children only (a closed
  // box is one node), cached; opening or closing a box lays out that box and its
  // ancestors again, nothing else. An edge is drawn in the innermost box holding both
  // ends, between the children of that box that contain them; where it enters or
  // leaves an open box, a short stub marks the op that reads or produces it.
  var HEAD = 22, PAD = 14, FANOUT = 8;
  var boxEdges = {}, extIn = new Uint8Array(N), extOut = new Uint8Array(N);
  (function () {
    var anc = function (i) { var a = []; for (var p = i; p >= 0; p = items[p][PARENT]) a.push(p); return a.reverse(); };
    var seen = {};
    for (var e = 0; e < edges.length; e++) {
      var as = anc(edges[e][0]), bs = anc(edges[e][1]), k = 0;
      while (k < as.length && k < bs.length && as[k] === bs[k]) k++;
      if (k >= as.length || k >= bs.length) continue;       // one end contains the other
      var L = as[k - 1], ca = as[k], cb = bs[k], key = ca + ">" + cb;
      for (var q = k + 1; q < bs.length; q++) extIn[bs[q]] = 1;
      for (q = k + 1; q < as.length; q++) extOut[as[q]] = 1;
      if (seen[key]) continue;
      seen[key] = 1;
      (boxEdges[L] = boxEdges[L] || []).push([ca, cb]);
    }
  })();
  var cache = {}, lastLayoutMs = 0, laidOut = 0;
  function leafSize(i) {
    var lb = label(i);
    var w = Math.max(textWidth(lb[0], "600 12px system-ui"), textWidth(lb[1], "10.5px system-ui")) + 22;
    return { w: Math.max(60, Math.ceil(w)), h: lb[1] ? 38 : 26, lb: lb };
  }
  function layoutBox(b) {
    if (cache[b]) return cache[b];
    var g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "TB", nodesep: 18, ranksep: 30, edgesep: 8, marginx: PAD, marginy: PAD });
    g.setDefaultEdgeLabel(function () { return {}; });
    var sizes = {};
    kids[b].forEach(function (c) {
      var s;
      if (isBox(c) && open[c]) {
        var inner = layoutBox(c), tw = textWidth(boxTitle(c), "600 12px system-ui") + 24;
        s = { w: Math.max(inner.w, tw), h: inner.h + HEAD, box: true };
      } else s = leafSize(c);
      sizes[c] = s;
      g.setNode("n" + c, { width: s.w, height: s.h });
    });
    var list = boxEdges[b] || [], outs = {}, fan = {};
    list.forEach(function (p) { outs[p[0]] = (outs[p[0]] || 0) + 1; });
    list.forEach(function (p) {
      if (outs[p[0]] > FANOUT && !(sizes[p[0]].box)) { fan[p[0]] = outs[p[0]]; return; }
      g.setEdge("n" + p[0], "n" + p[1]);
    });
    Object.keys(fan).forEach(function (c) {   // read by many: not routed, counted instead
      var s = sizes[c];
      s.lb = [s.lb[0], (s.lb[1] ? s.lb[1] + "  " : "") + "\u21c9 " + fan[c] + " readers"];
      s.w = Math.max(s.w, Math.ceil(textWidth(s.lb[1], "10.5px system-ui")) + 22); s.h = 38;
      g.node("n" + c).width = s.w; g.node("n" + c).height = s.h;
    });
    dagre.layout(g);
    laidOut++;
    var pos = {};
    kids[b].forEach(function (c) { var n = g.node("n" + c); pos[c] = { x: n.x, y: n.y, s: sizes[c] }; });
    var lines = g.edges().map(function (e) { return { v: +e.v.slice(1), w: +e.w.slice(1), pts: g.edge(e).points }; });
    var gg = g.graph();
    return (cache[b] = { w: Math.max(gg.width || 0, 80), h: Math.max(gg.height || 0, 30), pos: pos, lines: lines });
  }
  function invalidate(i) { for (var p = i; p >= 0; p = items[p][PARENT]) delete cache[p]; }
  function layout() {
    var t0 = performance.now();
    laidOut = 0;
    layoutBox(0);
    lastLayoutMs = performance.now() - t0;
  }
  function boxTitle(i) {
    var it = items[i];
    return "\u25be " + (i ? rel(i) : it[NAME]) + (it[TARGET] && it[KIND] !== "group" ? " : " + it[TARGET] : "");
  }

  // ---- drawing
  function esc(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }
  function f1(v) { return v.toFixed(1); }
  function pathOf(pts, ox, oy) {
    var d = "M" + f1(pts[0].x + ox) + "," + f1(pts[0].y + oy);
    if (pts.length === 2) return d + " L" + f1(pts[1].x + ox) + "," + f1(pts[1].y + oy);
    for (var k = 1; k < pts.length - 1; k++) {
      var last = k === pts.length - 2, nx = last ? pts[k + 1].x : (pts[k].x + pts[k + 1].x) / 2,
        ny = last ? pts[k + 1].y : (pts[k].y + pts[k + 1].y) / 2;
      d += " Q" + f1(pts[k].x + ox) + "," + f1(pts[k].y + oy) + " " + f1(nx + ox) + "," + f1(ny + oy);
    }
    return d;
  }
  var selected = -1, where = {}, drawn = 0;
  function render() {
    var frames = [], lines = [], nodes = [];
    where = {}; drawn = 0;
    function draw(b, ox, oy) {
      var L = cache[b];
      L.lines.forEach(function (e) {
        lines.push('<path class="edge" data-from="' + e.v + '" data-to="' + e.w + '" d="' + pathOf(e.pts, ox, oy) + '" marker-end="url(#arrow)"/>');
      });
      kids[b].forEach(function (c) {
        var p = L.pos[c], s = p.s, x = ox + p.x - s.w / 2, y = oy + p.y - s.h / 2, it = items[c];
        where[c] = { x: x, y: y, w: s.w, h: s.h, box: !!s.box };
        drawn++;
        var st = status(c) ? " st-" + status(c) : "", sel = c === selected ? " selected" : "";
        if (s.box) {
          frames.push('<g class="cluster' + st + sel + '" data-i="' + c + '" data-name="' + esc(it[NAME]) + '">' +
            '<rect x="' + x + '" y="' + y + '" width="' + s.w + '" height="' + s.h + '"/>' +
            '<g class="head" data-i="' + c + '"><title>' + esc(it[NAME]) + ' (click to close)</title>' +
            '<rect class="hit" x="' + x + '" y="' + y + '" width="' + s.w + '" height="' + HEAD + '"/>' +
            '<text x="' + (x + 8) + '" y="' + (y + 15) + '">' + esc(boxTitle(c)) + "</text></g></g>");
          draw(c, x, y + HEAD);
          return;
        }
        var k = it[KIND], cls = "node " + (isBox(c) ? "box collapsed" : (k === "op" ? "op" : (k === "input" || k === "output" ? "io" : "box")));
        if (isBox(c) && marks[c]) cls += " has-changes has-" + RANKED[inner[c]];
        var t = '<g class="' + cls + st + sel + '" data-i="' + c + '" data-name="' + esc(it[NAME]) + '"><title>' + esc(it[NAME]) +
          (isBox(c) ? " (click to open)" : "") + "</title>";
        var sx = x + Math.min(12, s.w / 4);   // off-centre, so they don't hide under routed edges
        if (extIn[c]) t += '<path class="stub" d="M' + (sx - 7) + "," + (y - 11) + " L" + sx + "," + y + '" marker-end="url(#arrow)"><title>reads a value from outside this box</title></path>';
        if (extOut[c]) t += '<path class="stub" d="M' + sx + "," + (y + s.h) + " L" + (sx - 7) + "," + (y + s.h + 10) + '"><title>read outside this box</title></path>';
        t += '<rect x="' + x + '" y="' + y + '" width="' + s.w + '" height="' + s.h + '"/>' +
          '<text class="title" x="' + (x + s.w / 2) + '" y="' + (y + 16) + '" text-anchor="middle">' + esc(s.lb[0]) + "</text>";
        if (s.lb[1]) t += '<text class="sub" x="' + (x + s.w / 2) + '" y="' + (y + 30) + '" text-anchor="middle">' + esc(s.lb[1]) + "</text>";
        if (isBox(c) && marks[c]) t += '<circle class="dot" cx="' + (x + s.w - 2) + '" cy="' + (y + 2) + '" r="5"/>';
        nodes.push(t + "</g>");
      });
    }
    draw(0, 0, 0);
    $("viewport").innerHTML = frames.join("") + lines.join("") + nodes.join("");
    $("stat").textContent = drawn + " drawn of " + N + " nodes \u00b7 laid out " + laidOut + " box" + (laidOut === 1 ? "" : "es") + " in " + Math.round(lastLayoutMs) + " ms";
    if (selected >= 0) highlightEdges(selected);
  }
  function elementOf(i) { return $("viewport").querySelector('[data-i="' + i + '"]'); }
  function highlightEdges(i) {
    var vp = $("viewport");
    Array.prototype.forEach.call(vp.querySelectorAll(".edge.hot"), function (e) { e.classList.remove("hot"); });
    Array.prototype.forEach.call(vp.querySelectorAll('.edge[data-from="' + i + '"], .edge[data-to="' + i + '"]'), function (e) { e.classList.add("hot"); });
  }

  // ---- pan and zoom
  var view = { k: 1, x: 0, y: 0 };
  var svg = $("graph");
  function apply() { $("viewport").setAttribute("transform", "translate(" + view.x + "," + view.y + ") scale(" + view.k + ")"); }
  function fit() {
    var R = cache[0], w = svg.clientWidth || 800, h = svg.clientHeight || 600;
    view.k = Math.max(0.05, Math.min(1.3, w / R.w, h / R.h));
    view.x = (w - R.w * view.k) / 2; view.y = Math.max(0, (h - R.h * view.k) / 2);
    apply();
  }
  function center(i) {
    var n = where[i];
    if (!n) return;
    var w = svg.clientWidth || 800, h = svg.clientHeight || 600;
    if (!n.box && view.k < 0.8) view.k = 1;
    else if (n.box) view.k = Math.max(0.1, Math.min(view.k, 0.9 * w / n.w, 0.9 * h / n.h, 1.2));
    view.x = w / 2 - (n.x + n.w / 2) * view.k; view.y = h / 2 - (n.y + n.h / 2) * view.k;
    apply();
  }
  var READABLE = 0.75;   // the smallest zoom the first view opens at (9 px titles)
  function firstView() {   // too big to read whole: the first change, readable
    var w = svg.clientWidth || 800, h = svg.clientHeight || 600, first = -1, box = -1;
    function fits(n) { return !n.box || (n.w * READABLE <= 0.9 * w && n.h * READABLE <= 0.9 * h); }
    var candidates = [D.focus].concat(changes.map(function (c) { return c.item; }));
    for (j = 0; j < candidates.length && first < 0; j++) {
      var i = candidates[j], n = i >= 0 && where[i];
      if (!n) continue;
      if (fits(n)) first = i;
      else if (box < 0) box = i;   // an open box too big to show whole: its top, if nothing fits
    }
    view.k = 1;
    if (first >= 0) { center(first); return; }
    var at = box >= 0 ? where[box] : { x: 0, y: 0, w: cache[0].w };
    view.x = at.w <= w ? (w - at.w) / 2 - at.x : 16 - at.x; view.y = 16 - at.y;
    apply();
  }
  svg.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var r = svg.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
    var f = Math.exp(-ev.deltaY * 0.0015), k = Math.min(4, Math.max(0.03, view.k * f));
    view.x = px - (px - view.x) * (k / view.k); view.y = py - (py - view.y) * (k / view.k); view.k = k;
    apply();
  }, { passive: false });
  var drag = null, moved = false;
  svg.addEventListener("mousedown", function (ev) { drag = { x: ev.clientX, y: ev.clientY, vx: view.x, vy: view.y }; moved = false; });
  window.addEventListener("mousemove", function (ev) {
    if (!drag) return;
    var dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) { moved = true; svg.classList.add("panning"); }
    if (moved) { view.x = drag.vx + dx; view.y = drag.vy + dy; apply(); }
  });
  window.addEventListener("mouseup", function () { drag = null; svg.classList.remove("panning"); });

  // ---- actions
  function relayoutKeeping(i) {
    var n = where[i], sx, sy;
    if (n) { sx = view.x + n.x * view.k; sy = view.y + n.y * view.k; }
    layout(); render();
    var m = where[i];
    if (n && m) { view.x = sx - m.x * view.k; view.y = sy - m.y * view.k; apply(); }
  }
  function toggle(i) {
    if (!i || !isBox(i)) return;
    open[i] = open[i] ? 0 : 1;
    invalidate(i);
    if (!open[i]) for (var j = 0; j < order.length; j++) { /* closing also closes the inside */
      var q = order[j];
      for (var p = items[q][PARENT]; p > 0; p = items[p][PARENT]) if (p === i) { open[q] = 0; break; }
    }
    relayoutKeeping(i);
  }
  function reveal(i) {
    if (openAncestors(i)) { layout(); render(); }
    center(i);
    var el = elementOf(i);
    if (el) { el.classList.remove("flash"); void el.getBBox(); el.classList.add("flash"); }
  }
  function select(i, changeIndex) {
    selected = i;
    Array.prototype.forEach.call($("viewport").querySelectorAll(".selected"), function (e) { e.classList.remove("selected"); });
    var el = elementOf(i);
    if (el) el.classList.add("selected");
    highlightEdges(i);
    showDetails(i, changeIndex);
  }

  // ---- side panel
  function fmt(v) {
    if (v === null || v === undefined) return "\u2014";
    return typeof v === "string" ? v : JSON.stringify(v);
  }
  function tensorText(o) {   // "[2, 4] float32  mean=-0.356 std=0.0976 ..." or the constant
    if (!o || typeof o !== "object" || !o.shape) return fmt(o);
    var t = (o.ref ? o.ref + " " : "") + "[" + o.shape.join(", ") + "] " + (o.dtype || "");
    Object.keys(o).forEach(function (k) {
      if (k === "shape" || k === "dtype" || k === "ref") return;
      var v = o[k];
      t += "  " + k + "=" + (typeof v === "number" && !Number.isInteger(v) ? +v.toPrecision(6) : fmt(v));
    });
    return t;
  }
  function changeHtml(c) {
    var s = '<div class="change ' + esc(c.kind) + '"><span class="badge ' + esc(c.kind) + '">' + esc(c.kind) + "</span>";
    s += '<code>' + esc(c.field || (c.section !== "nodes" ? c.section : "node")) + "</code><br>";
    if (c.note) s += esc(c.note) + (c.old !== null || c.new !== null ? "<br>" : "");
    if (!c.note || c.old !== null || c.new !== null) {
      s += '<code class="old">' + esc(fmt(c.old)) + '</code> \u2192 <code class="new">' + esc(fmt(c.new)) + "</code>";
      if (typeof c.old === "number" && typeof c.new === "number") s += ' <span class="tol">(\u0394 ' + esc((c.new - c.old).toPrecision(3)) + ")</span>";
    }
    if (c.tolerance !== null && c.tolerance !== undefined) s += '<br><span class="tol">tolerance: ' + esc(typeof c.tolerance === "number" ? "\u00b1" + c.tolerance : fmt(c.tolerance)) + "</span>";
    return s + "</div>";
  }
  function showDetails(i, changeIndex) {
    var it = items[i], d = it[DETAIL] || {}, s = "";
    s += '<table><tr><td>name</td><td><code>' + esc(it[NAME]) + "</code></td></tr>";
    s += "<tr><td>kind</td><td>" + esc(it[KIND]) + (it[STATUS] ? ' <span class="badge ' + esc(it[STATUS]) + '">' + esc(it[STATUS]) + "</span>" : "") + "</td></tr>";
    if (it[TARGET] && it[KIND] !== "input" && it[KIND] !== "output") s += "<tr><td>" + (it[KIND] === "op" ? "op" : "class") + "</td><td><code>" + esc(it[TARGET]) + "</code></td></tr>";
    if (isBox(i)) s += "<tr><td>inside</td><td>" + leaves[i] + " ops, " + marks[i] + " marked nodes</td></tr>";
    Object.keys(d).forEach(function (k) {
      if (k === "op" || k === "module") return;
      var v = d[k];
      if (k === "out" && Array.isArray(v)) v = v.map(function (o, n) { return "[" + n + "] " + tensorText(o); }).join("\n");
      else if (k === "meta" && v && typeof v === "object") v = Object.keys(v).map(function (m) { return m + ": " + fmt(v[m]); }).join("\n");
      else v = fmt(v);
      s += "<tr><td>" + esc(k) + '</td><td><code style="white-space:pre-wrap">' + esc(v) + "</code></td></tr>";
    });
    [["reads", preds[i]], ["read by", succs[i]]].forEach(function (r) {
      if (!r[1]) return;
      s += "<tr><td>" + r[0] + "</td><td>" + r[1].slice(0, 30).map(function (j) {
        return '<a href="#" class="jump mono" data-jump="' + j + '">' + esc(items[j][NAME]) + "</a>";
      }).join("<br>") + (r[1].length > 30 ? "<br>\u2026 " + (r[1].length - 30) + " more" : "") + "</td></tr>";
    });
    s += "</table>";
    var mine = (byItem[i] || []).slice();
    if (changeIndex !== undefined && mine.indexOf(changeIndex) < 0) mine.unshift(changeIndex);
    if (changeIndex !== undefined) mine.sort(function (a, b) { return (a === changeIndex ? -1 : 0) - (b === changeIndex ? -1 : 0); });
    if (mine.length) s += "<h2>Changes here</h2>" + mine.slice(0, 200).map(function (k) { return changeHtml(changes[k]); }).join("");
    $("details").innerHTML = s;
  }
  function changeRow(c, k, extra) {
    var where = c.node || (c.section + (c.scope ? " " + c.scope : ""));
    var hint = extra || c.field;
    return '<div class="row' + (extra ? " origin" : "") + '" data-change="' + k + '" title="' + esc(where + " " + (hint || "")) + '"><span class="badge ' + esc(c.kind) + '">' + esc(c.kind) + "</span>" + esc(where) + (hint ? " <span class=\"hint\">" + esc(hint) + "</span>" : "") + "</div>";
  }
  function groupRow(g, gi) {
    var n = g.changes.length, text = n + " value" + (n === 1 ? "" : "s") + " in " + g.nodes + " node" + (g.nodes === 1 ? "" : "s") + " \u2193 " + g.cause;
    return '<div class="row group" data-group="' + gi + '" title="' + esc(g.label + ": " + text) + '"><span class="badge drift">' + (openGroup === gi ? "\u25be" : "\u25b8") + " drift</span>" + esc(g.label) + ' <span class="hint">' + esc(text) + "</span></div>";
  }
  var LIST_MAX = 500, openGroup = -1, inGroup = {}, perOrigin = {};
  groups.forEach(function (g) { g.changes.forEach(function (k) { inGroup[k] = 1; }); });
  changes.forEach(function (c) { if (c.role === "origin") perOrigin[c.node] = (perOrigin[c.node] || 0) + 1; });
  function listChanges(all) {
    // structural changes and origins one row each (an origin's values in one row),
    // propagated drift one row per group (click to list its values)
    var s = [], shown = 0, total = 0, limit = all ? Infinity : LIST_MAX, seen = {};
    function push(html) { total++; if (shown < limit) { shown++; s.push(html); } }
    changes.forEach(function (c, k) {
      if (hide[c.kind] || inGroup[k]) return;
      if (c.role === "origin") {
        if (seen[c.node]) return;
        seen[c.node] = 1;
        var n = perOrigin[c.node];
        push(changeRow(c, k, "starts here \u00b7 " + n + " value" + (n === 1 ? "" : "s")));
      } else push(changeRow(c, k));
    });
    if (!hide.drift) groups.forEach(function (g, gi) {
      push(groupRow(g, gi));
      if (openGroup === gi) g.changes.slice(0, 200).forEach(function (k) { s.push(changeRow(changes[k], k).replace('class="row', 'class="row member')); });
    });
    if (shown < total) s.push('<div class="more row" data-more="1">\u2026 ' + (total - shown) + " more (click to list all)</div>");
    if (!changes.length) s.push('<p class="hint">No changes.</p>');
    else if (!total) s.push('<p class="hint">Every kind is switched off in the legend.</p>');
    $("changes").innerHTML = s.join("");
    $("changes-head").textContent = "Changes (" + changes.length + (groups.length ? ", drift in " + groups.length + " group" + (groups.length === 1 ? "" : "s") : "") + ")";
  }
  $("details").addEventListener("click", function (ev) {
    var a = ev.target.closest("[data-jump]");
    if (!a) return;
    ev.preventDefault();
    var j = +a.dataset.jump; reveal(j); select(j);
  });
  $("changes").addEventListener("click", function (ev) {
    var row = ev.target.closest(".row");
    if (!row) return;
    if (row.dataset.more) { listChanges(true); return; }
    if (row.dataset.group !== undefined) {
      var gi = +row.dataset.group, first = changes[groups[gi].changes[0]];
      openGroup = openGroup === gi ? -1 : gi;
      listChanges(false);
      if (first && first.item >= 0) { reveal(first.item); select(first.item); }
      return;
    }
    var k = +row.dataset.change, c = changes[k];
    Array.prototype.forEach.call($("changes").querySelectorAll(".active"), function (e) { e.classList.remove("active"); });
    row.classList.add("active");
    if (c.item >= 0) { reveal(c.item); select(c.item, k); }
    else { selected = -1; $("details").innerHTML = "<table><tr><td>section</td><td>" + esc(c.section) + "</td></tr></table>" + changeHtml(c); }
  });

  var searchTimer = 0, hits = [], lastQuery = null;
  function search() {
    var q = $("search").value.trim().toLowerCase(), s = [];
    if (q === lastQuery) return;   // typing then Enter: the list is already there
    lastQuery = q;
    hits = [];
    if (q) for (var i = 1; i < N && hits.length < 60; i++) {
      if (items[i][NAME].toLowerCase().indexOf(q) >= 0 || String(items[i][TARGET]).toLowerCase().indexOf(q) >= 0) hits.push(i);
    }
    hits.forEach(function (i) { s.push('<div class="row" data-i="' + i + '">' + esc(items[i][NAME]) + ' <span class="hint">' + esc(items[i][TARGET]) + "</span></div>"); });
    if (q && !hits.length) s.push('<p class="hint">No node matches.</p>');
    $("results").innerHTML = s.join("");
  }
  $("search").addEventListener("input", function () { clearTimeout(searchTimer); searchTimer = setTimeout(search, 120); });
  $("search").addEventListener("keydown", function (ev) {
    if (ev.key === "Enter") { clearTimeout(searchTimer); search(); if (hits.length) { reveal(hits[0]); select(hits[0]); } }
  });
  document.addEventListener("keydown", function (ev) {   // "/" to search, Escape to clear
    var box = $("search");
    if (ev.key === "/" && document.activeElement !== box) { ev.preventDefault(); box.focus(); box.select(); }
    else if (ev.key === "Escape" && document.activeElement === box) { box.value = ""; search(); box.blur(); }
  });
  $("results").addEventListener("click", function (ev) {
    var row = ev.target.closest(".row");
    if (row) { var i = +row.dataset.i; reveal(i); select(i); }
  });

  svg.addEventListener("click", function (ev) {
    if (moved) return;
    var head = ev.target.closest(".head");
    if (head) { toggle(+head.dataset.i); return; }
    var el = ev.target.closest("[data-i]");
    if (!el) return;
    var i = +el.dataset.i;
    if (el.classList.contains("collapsed")) { toggle(i); select(i); }
    else select(i);
  });
  $("fit").addEventListener("click", fit);
  $("collapse-all").addEventListener("click", function () {
    for (var i = 1; i < N; i++) open[i] = 0;
    cache = {};
    layout(); render(); fit();
  });
  $("expand-changes").addEventListener("click", function () {
    for (var i = 0; i < N; i++) if (items[i][STATUS]) openAncestors(i);
    layout(); render(); fit();
  });

  // ---- legend chips: switch a kind off and on (rows, colours and marked counts)
  $("legend").addEventListener("click", function (ev) {
    var key = ev.target.closest("[data-kind]");
    if (!key) return;
    var kind = key.dataset.kind;
    hide[kind] = !hide[kind];
    key.classList.toggle("off", !!hide[kind]);
    key.setAttribute("aria-pressed", hide[kind] ? "false" : "true");
    countMarks();
    cache = {};
    layout(); render(); listChanges(false);
  });

  // ---- header and first render
  var cs = [];
  ["added", "removed", "changed", "reordered", "drift"].forEach(function (k) {
    if (D.counts[k]) cs.push('<span class="count ' + k + '">' + D.counts[k] + " " + k + "</span>");
  });
  $("counts").innerHTML = cs.join("") || (changes.length ? "" : '<span class="hint">no changes</span>');
  $("note").textContent = D.tolerance_note || "";
  listChanges(false);
  layout(); render(); fit();
  if (view.k < READABLE) firstView();
  performance.mark("graphir-first-render");
  window.graphirReport = {
    ready: true, firstRenderMs: performance.now(), layoutMs: lastLayoutMs,
    drawn: drawn, nodes: N, focus: D.focus,
    view: function () { return { k: view.k, x: view.x, y: view.y, w: svg.clientWidth, h: svg.clientHeight }; },
    where: function (i) { return where[i] || null; },
  };
  document.body.setAttribute("data-ready", "1");
})();
