/* llm-locust: live LLM charts for Locust's web UI (no dependencies, no build step).
 *
 * Loaded two ways:
 *  - by Locust's index page (a tag added by llm_locust/live/web.py): when the LLM tab's table is on
 *    screen, the panel is mounted right below it, and removed when another tab is shown;
 *  - by the standalone page <base>/llm/ (an element #llm-live-root): the panel, with its own copy
 *    of the per-name table, fills the page.
 * Data: GET <base>/llm/data every 2 s while the panel is on screen (same origin, same login).
 */
(function () {
  "use strict";
  if (window.__llmLiveLoaded) return;
  window.__llmLiveLoaded = true;

  var POLL_MS = 2000;
  var SVG_NS = "http://www.w3.org/2000/svg";
  var script = document.currentScript;
  var BASE = new URL("../", script ? script.src : window.location.href + "llm/static/").href;
  var COLORS = { blue: "#1f77b4", orange: "#ff7f0e", green: "#2ca02c", red: "#d62728", purple: "#9467bd",
                 brown: "#8c564b", pink: "#e377c2", grey: "#7f7f7f", olive: "#bcbd22", cyan: "#17becf" };
  var KIND_COLORS = [COLORS.red, COLORS.purple, COLORS.brown, COLORS.pink, COLORS.olive, COLORS.cyan,
                     COLORS.orange, COLORS.blue];
  var TABLE_COLUMNS = [["name", "Name"], ["requests", "Requests"], ["failures", "Fails"],
    ["failures_by_kind", "Fails by kind"], ["ttft_p50_ms", "TTFT p50 ms"], ["ttft_p90_ms", "TTFT p90 ms"],
    ["ttft_p99_ms", "TTFT p99 ms"], ["tpot_p50_ms", "TPOT p50 ms"], ["tpot_p90_ms", "TPOT p90 ms"],
    ["itl_p99_ms", "ITL p99 ms"], ["decode_tps_p50", "Decode tok/s p50"], ["output_tps", "Output tok/s"],
    ["mean_output_tokens", "Mean output tokens"]];
  var STEP_COLUMNS = [["target_users", "users"], ["client_inflight", "in-flight"], ["server_running", "running"],
    ["server_waiting", "waiting"], ["output_tps", "out tok/s"], ["request_rps", "req/s"],
    ["ttft_p50_ms", "TTFT p50 ms"], ["ttft_p95_ms", "TTFT p95 ms"], ["tpot_p50_ms", "TPOT p50 ms"],
    ["completed", "ok"], ["errors", "errors"]];
  /* a request-rate run's steps: keyed by the offered rate, with what the schedule achieved */
  var RATE_STEP_COLUMNS = [["target_rate_rps", "rate req/s"], ["achieved_rate_rps", "sent req/s"],
    ["send_lag_p50_ms", "lag p50 ms"], ["send_lag_p99_ms", "lag p99 ms"], ["unsent", "unsent"],
    ["client_inflight", "in-flight"], ["server_running", "running"], ["server_waiting", "waiting"],
    ["output_tps", "out tok/s"], ["request_rps", "req/s"], ["ttft_p50_ms", "TTFT p50 ms"],
    ["ttft_p95_ms", "TTFT p95 ms"], ["ttft_from_schedule_p50_ms", "TTFT p50 from sched ms"],
    ["tpot_p50_ms", "TPOT p50 ms"], ["completed", "ok"], ["errors", "errors"]];
  var USERS_AXIS = { column: "target_users", unit: "users", quantity: "concurrency" };

  function h(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }
  function s(tag, attrs, parent) {
    var e = document.createElementNS(SVG_NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function num(v) { return typeof v === "number" && isFinite(v); }
  function fmt(v, digits) {
    if (!num(v)) return "\u2013";
    if (digits == null) digits = Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2;
    return v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }
  function fmtUsers(v) { return num(v) ? String(Math.round(v * 100) / 100) : "\u2013"; }
  function clock(sec) {
    sec = Math.max(0, Math.round(sec));
    var m = Math.floor(sec / 60), r = sec % 60;
    return m + ":" + (r < 10 ? "0" : "") + r;
  }
  /* A round tick step (1, 2, 2.5 or 5 x 10^k) giving about four intervals up to v. */
  function niceStep(v) {
    if (!(v > 0)) return 0.25;
    var raw = v / 4, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
  }
  /* Trailing time-average over windowS seconds of an irregular series (server samples). */
  function rolling(pts, windowS) {
    var out = [], lo = 0, sum = 0, n = 0;
    for (var i = 0; i < pts.length; i++) {
      if (num(pts[i][1])) { sum += pts[i][1]; n++; }
      while (pts[lo][0] <= pts[i][0] - windowS) {
        if (num(pts[lo][1])) { sum -= pts[lo][1]; n--; }
        lo++;
      }
      out.push([pts[i][0], n > 0 ? sum / n : null]);
    }
    return out;
  }
  function zip(ts, ys) {
    var out = [];
    for (var i = 0; i < ts.length; i++) out.push([ts[i], ys[i]]);
    return out;
  }
  function last(pts) {
    for (var i = pts.length - 1; i >= 0; i--) if (num(pts[i][1])) return pts[i][1];
    return null;
  }

  /* One SVG line chart: series [{label, color, dash, pts: [[t_s, y|null]]}] over [x0, x1] (Unix s),
   * ladder steps as alternating bands with their load (users, or req/s), the critical step outlined. */
  function drawChart(svg, spec) {
    /* one viewBox unit per CSS pixel, so text keeps its size whatever the card's width */
    var hatch = "llm-hatch-" + (svg.getAttribute("data-chart") || "x");
    var W = Math.max(300, Math.round(svg.getBoundingClientRect().width) || 640), H = 230, L = 50, R = 12, T = 20, B = 24;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var ymax = 0, points = 0;
    spec.series.forEach(function (sr) {
      sr.pts.forEach(function (p) { if (num(p[1])) { ymax = Math.max(ymax, p[1]); points++; } });
    });
    var ystep = niceStep(ymax * 1.05), nticks = Math.max(1, Math.ceil(ymax * 1.05 / ystep));
    ymax = ystep * nticks;
    var x0 = spec.x0, x1 = Math.max(spec.x1, spec.x0 + 10);
    var X = function (t) { return L + (t - x0) / (x1 - x0) * (W - L - R); };
    var Y = function (v) { return T + (1 - v / ymax) * (H - T - B); };
    (spec.steps || []).forEach(function (st, i) {
      var a = Math.max(st.start_s, x0), b = Math.min(st.end_s != null ? st.end_s : x1, x1);
      if (b <= a) return;
      var rate = spec.axis && spec.axis.column === "target_rate_rps";
      var level = rate ? st.rate_rps : st.users, unit = rate ? " req/s" : " users";
      var critical = spec.critical != null && level === spec.critical;
      s("rect", { x: X(a), y: T, width: X(b) - X(a), height: H - T - B, fill: "currentColor",
                  "fill-opacity": i % 2 ? 0.07 : 0.025 }, svg);
      if (spec.warmup_s > 0) {
        var w = Math.min(a + spec.warmup_s, b);
        s("rect", { x: X(a), y: T, width: X(w) - X(a), height: H - T - B, fill: "url(#" + hatch + ")",
                    "fill-opacity": 0.5 }, svg);
      }
      if (critical) {
        s("rect", { x: X(a), y: T, width: X(b) - X(a), height: H - T - B, fill: "none", stroke: COLORS.red,
                    "stroke-dasharray": "4 3", "stroke-width": 1.5 }, svg);
      }
      var label = s("text", { x: X(a) + 3, y: T - 6, "font-size": 11, fill: critical ? COLORS.red : "currentColor" }, svg);
      label.textContent = level + (critical ? unit + " \u2605 critical" : (i === 0 ? unit : ""));
    });
    var defs = s("defs", {}, svg);
    var pat = s("pattern", { id: hatch, width: 6, height: 6, patternUnits: "userSpaceOnUse",
                             patternTransform: "rotate(45)" }, defs);
    s("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "currentColor", "stroke-opacity": 0.25, "stroke-width": 2 }, pat);
    var decimals = ystep >= 1 ? 0 : ystep >= 0.1 ? (ystep * 10 % 1 ? 2 : 1) : 3;
    for (var k = 0; k <= nticks; k++) {
      var v = ystep * k, y = Y(v);
      s("line", { x1: L, x2: W - R, y1: y, y2: y, stroke: "currentColor", "stroke-opacity": k ? 0.12 : 0.4 }, svg);
      var t = s("text", { x: L - 5, y: y + 4, "font-size": 11, "text-anchor": "end", fill: "currentColor" }, svg);
      t.textContent = fmt(v, decimals);
    }
    var spanS = x1 - x0, stepS = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600].find(function (c) {
      return spanS / c <= 7; }) || 7200;
    for (var tick = 0; tick <= spanS; tick += stepS) {
      var tx = X(x0 + tick);
      s("line", { x1: tx, x2: tx, y1: H - B, y2: H - B + 4, stroke: "currentColor", "stroke-opacity": 0.5 }, svg);
      var tl = s("text", { x: tx, y: H - 6, "font-size": 11, "text-anchor": "middle", fill: "currentColor" }, svg);
      tl.textContent = clock(tick);
    }
    spec.series.forEach(function (sr) {
      var d = "", pen = false;
      sr.pts.forEach(function (p) {
        if (!num(p[1]) || p[0] < x0) { pen = false; return; }
        var px = X(p[0]).toFixed(1), py = Y(p[1]).toFixed(1);
        if (sr.step && pen) d += "H" + px;
        d += (pen ? "L" : "M") + px + " " + py;
        pen = true;
      });
      if (d) {
        s("path", { d: d, fill: "none", stroke: sr.color, "stroke-width": sr.width || 2,
                    "stroke-dasharray": sr.dash || "", "stroke-linejoin": "round" }, svg);
      }
    });
    svg.setAttribute("data-points", String(points));
  }

  function Panel(standalone) {
    this.standalone = standalone;
    this.el = h("div", "llm-live" + (standalone ? " llm-live-standalone" : ""));
    var head = h("div", "llm-head");
    this.stepEl = h("div", "llm-step", "Waiting for data\u2026");
    this.critEl = h("div", "llm-crit");
    this.bottleneckEl = h("div", "llm-bottleneck");
    this.noteEl = h("div", "llm-note");
    head.appendChild(this.stepEl);
    head.appendChild(this.critEl);
    head.appendChild(this.bottleneckEl);
    head.appendChild(this.noteEl);
    this.el.appendChild(head);
    if (standalone) {
      this.statsTable = h("table", "llm-table llm-stats");
      var wrap = h("div", "llm-table-wrap");
      wrap.appendChild(this.statsTable);
      this.el.appendChild(wrap);
    }
    var grid = h("div", "llm-grid");
    this.charts = {};
    var defs = [["ttft", "Time to first token (ms), rolling 10 s"], ["tps", "Output tokens/s, rolling 10 s"],
                ["queue", "Client in-flight vs server running and waiting"], ["errors", "Errors/s by kind, rolling 10 s"]];
    var self = this;
    defs.forEach(function (d) {
      var card = h("div", "llm-card");
      card.setAttribute("data-chart", d[0]);
      card.appendChild(h("div", "llm-card-title", d[1]));
      var legend = h("div", "llm-legend");
      card.appendChild(legend);
      var svg = s("svg", { class: "llm-chart", "data-chart": d[0], preserveAspectRatio: "none" });
      card.appendChild(svg);
      grid.appendChild(card);
      self.charts[d[0]] = { svg: svg, legend: legend };
    });
    this.el.appendChild(grid);
    var steps = h("div", "llm-card llm-steps");
    steps.appendChild(h("div", "llm-card-title", "Finished ladder steps (steady windows, as the report computes them)"));
    this.stepsTable = h("table", "llm-table");
    steps.appendChild(this.stepsTable);
    this.evidence = h("details", "llm-evidence");
    this.evidenceTitle = h("summary", null, "Critical-concurrency evidence");
    this.evidence.appendChild(this.evidenceTitle);
    this.evidencePre = h("pre");
    this.evidence.appendChild(this.evidencePre);
    steps.appendChild(this.evidence);
    this.el.appendChild(steps);
  }

  Panel.prototype.legend = function (key, items) {
    var box = this.charts[key].legend;
    box.textContent = "";
    items.forEach(function (it) {
      var item = h("span", "llm-legend-item");
      var sw = h("span", "llm-swatch" + (it.dash ? " llm-swatch-dash" : ""));
      sw.style.borderColor = it.color;
      item.appendChild(sw);
      item.appendChild(document.createTextNode(it.label + " "));
      item.appendChild(h("b", null, it.value));
      box.appendChild(item);
    });
  };

  Panel.prototype.status = function (text) { this.noteEl.textContent = text; };

  Panel.prototype.update = function (d) {
    var t0 = d.t0_s != null ? d.t0_s : d.now_s, x1 = d.now_s;
    var steps = (d.shape && d.shape.steps) || [];
    var crit = d.critical || {};
    var axis = d.load_axis || USERS_AXIS;
    var common = { x0: t0, x1: x1, steps: steps, warmup_s: (d.shape && d.shape.warmup_s) || 0,
                   critical: crit.users != null ? crit.users : null, axis: axis };
    var sr = d.series, ts = sr.t_s;

    var p50 = zip(ts, sr.ttft_p50_ms), p95 = zip(ts, sr.ttft_p95_ms);
    drawChart(this.charts.ttft.svg, Object.assign({ series: [
      { label: "p50", color: COLORS.blue, pts: p50 }, { label: "p95", color: COLORS.orange, pts: p95, dash: "6 3" }] }, common));
    this.legend("ttft", [{ label: "TTFT p50", color: COLORS.blue, value: fmt(last(p50), 0) + " ms" },
                         { label: "TTFT p95", color: COLORS.orange, dash: true, value: fmt(last(p95), 0) + " ms" }]);

    var tps = zip(ts, sr.output_tps), gen = rolling(zip(d.server.t_s, d.server.gen_tps), d.window_s);
    var tpsSeries = [{ label: "client", color: COLORS.green, pts: tps }];
    var tpsLegend = [{ label: "output tok/s (client)", color: COLORS.green, value: fmt(last(tps), 1) }];
    if (gen.some(function (p) { return num(p[1]); })) {
      tpsSeries.push({ label: "server", color: COLORS.grey, pts: gen, dash: "3 3", width: 1.5 });
      tpsLegend.push({ label: "generated tok/s (server)", color: COLORS.grey, dash: true, value: fmt(last(gen), 1) });
    }
    drawChart(this.charts.tps.svg, Object.assign({ series: tpsSeries }, common));
    this.legend("tps", tpsLegend);

    var inflight = zip(ts.map(function (t) { return t - d.bucket_s / 2; }), sr.client_inflight);
    var running = zip(d.server.t_s, d.server.running), waiting = zip(d.server.t_s, d.server.waiting);
    var users = zip(d.users.t_s, d.users.users);
    drawChart(this.charts.queue.svg, Object.assign({ series: [
      { label: "users", color: COLORS.grey, pts: users, dash: "2 3", width: 1.5, step: true },
      { label: "in-flight", color: COLORS.blue, pts: inflight },
      { label: "running", color: COLORS.green, pts: running, step: true },
      { label: "waiting", color: COLORS.red, pts: waiting, step: true }] }, common));
    this.legend("queue", [
      { label: "client in-flight", color: COLORS.blue, value: fmt(last(inflight), 2) },
      { label: "server running", color: COLORS.green, value: fmt(last(running), 0) },
      { label: "server waiting", color: COLORS.red, value: fmt(last(waiting), 0) },
      { label: "users", color: COLORS.grey, dash: true, value: fmt(last(users), 0) }]);

    var errSeries = [{ label: "all", color: COLORS.grey, pts: zip(ts, sr.error_rate_per_s), width: 1.5 }];
    var errLegend = [{ label: "all kinds", color: COLORS.grey, value: fmt(last(errSeries[0].pts), 2) + "/s" }];
    Object.keys(sr.errors_per_s).sort().forEach(function (kind, i) {
      var pts = zip(ts, sr.errors_per_s[kind]), color = KIND_COLORS[i % KIND_COLORS.length];
      errSeries.push({ label: kind, color: color, pts: pts });
      errLegend.push({ label: kind, color: color, value: fmt(last(pts), 2) + "/s" });
    });
    drawChart(this.charts.errors.svg, Object.assign({ series: errSeries }, common));
    this.legend("errors", errLegend);

    this.head(d, crit, axis);
    this.stepsTableUpdate(d.steps_table || [], crit, axis);
    this.evidenceTitle.textContent = "Critical-" + axis.quantity + " evidence";
    if (this.standalone) this.statsTableUpdate(d.table || []);
    this.evidencePre.textContent = (crit.evidence || []).join("\n") || "(needs two finished steps)";
  };

  Panel.prototype.head = function (d, crit, axis) {
    var cur = d.current_step, text;
    var elapsed = d.t0_s != null ? " \u00b7 " + clock(d.now_s - d.t0_s) + " into the run" : "";
    if (cur) {
      text = "Step " + (cur.index + 1) + (cur.of ? " of " + cur.of : "") + ": " + (cur.rate_rps != null ? cur.rate_rps + " req/s, " : cur.users + " users, ") +
             clock(cur.elapsed_s) + " in" + (d.shape && d.shape.dwell_s ? " of " + clock(d.shape.dwell_s) : "");
    } else if (d.shape && d.shape.steps && d.shape.steps.length) {
      text = d.state === "stopped" ? "Ladder finished" : "Ladder finished, draining in-flight requests";
    } else {
      text = (d.state || "idle") + " \u00b7 " + d.user_count + " users";
    }
    this.stepEl.textContent = text + elapsed + " \u00b7 state: " + (d.state || "\u2013");
    this.critEl.textContent = "Critical " + axis.quantity + " so far: " + (crit.text || "\u2013") +
      (crit.finished_steps ? " (" + crit.finished_steps + " finished step" + (crit.finished_steps > 1 ? "s" : "") + ")" : "");
    this.critEl.className = "llm-crit" + (crit.users != null ? " llm-crit-found" : "");
    var b = d.bottleneck || {};
    this.bottleneckEl.textContent = "Bottleneck so far: " + (b.kind ? b.kind + " \u2014 " + b.text : (b.text || "\u2013")) +
      (b.secondary && b.secondary.length ? " (also: " + b.secondary.join(", ") + ")" : "");
    this.bottleneckEl.setAttribute("data-kind", b.kind || "");
    this.status("updated " + new Date(d.now_s * 1000).toLocaleTimeString() +
      (d.now_s - d.horizon_s > 0.5 ? " \u00b7 records complete up to " + fmt(d.now_s - d.horizon_s, 1) + " s ago" : ""));
  };

  function fillTable(table, columns, rows, rowClass) {
    table.textContent = "";
    var thead = h("thead"), tr = h("tr");
    columns.forEach(function (c) { var th = h("th", null, c[1]); th.setAttribute("data-key", c[0]); tr.appendChild(th); });
    thead.appendChild(tr);
    table.appendChild(thead);
    var tbody = h("tbody");
    rows.forEach(function (row) {
      var r = h("tr", rowClass ? rowClass(row) : null);
      columns.forEach(function (c) {
        var v = row[c[0]], td = h("td", null, typeof v === "number" ? fmt(v, Number.isInteger(v) ? 0 : null) : (v == null ? "\u2013" : String(v)));
        td.setAttribute("data-key", c[0]);
        r.appendChild(td);
      });
      tbody.appendChild(r);
    });
    table.appendChild(tbody);
  }

  Panel.prototype.stepsTableUpdate = function (rows, crit, axis) {
    var columns = axis.column === "target_rate_rps" ? RATE_STEP_COLUMNS : STEP_COLUMNS;
    fillTable(this.stepsTable, columns, rows, function (row) {
      var level = row[axis.column];
      if (crit.saturated_users != null && level === crit.saturated_users) return "llm-saturated";
      if (crit.users != null && level === crit.users) return "llm-critical";
      return null;
    });
  };

  Panel.prototype.statsTableUpdate = function (rows) { fillTable(this.statsTable, TABLE_COLUMNS, rows); };

  var panel = null, timer = null, inflightFetch = false;

  function poll() {
    timer = null;
    if (!panel || !panel.el.isConnected) return;
    if (inflightFetch) { timer = setTimeout(poll, POLL_MS); return; }
    inflightFetch = true;
    fetch(BASE + "data", { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        if ((r.headers.get("Content-Type") || "").indexOf("json") < 0) throw new Error("not signed in");
        return r.json();
      })
      .then(function (d) { panel.update(d); })
      .catch(function (e) { panel.status("live data unavailable: " + e.message); })
      .then(function () {
        inflightFetch = false;
        if (!timer && panel.el.isConnected) timer = setTimeout(poll, POLL_MS);
      });
  }
  function startPolling() { if (!timer && !inflightFetch) poll(); }

  function findLlmTable() {
    var th = document.querySelector('th[data-sortkey="ttftP50Ms"]');
    if (th) return th.closest("table");
    var all = document.querySelectorAll("th");
    for (var i = 0; i < all.length; i++) {
      if (all[i].textContent.trim() === "TTFT p50 ms" && !all[i].closest(".llm-live")) return all[i].closest("table");
    }
    return null;
  }

  function ensureMounted() {
    var table = findLlmTable();
    if (table) {
      var anchor = table.closest(".MuiTableContainer-root") || table;
      if (panel.el.previousElementSibling !== anchor) anchor.insertAdjacentElement("afterend", panel.el);
      startPolling();
    } else if (panel.el.isConnected) {
      panel.el.remove();
    }
  }

  function init() {
    var root = document.getElementById("llm-live-root");
    if (root) {
      panel = new Panel(true);
      root.appendChild(panel.el);
      startPolling();
      return;
    }
    panel = new Panel(false);
    var scheduled = false;
    var observer = new MutationObserver(function () {
      if (scheduled) return;
      scheduled = true;
      requestAnimationFrame(function () { scheduled = false; ensureMounted(); });
    });
    observer.observe(document.getElementById("root") || document.body, { childList: true, subtree: true });
    ensureMounted();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
