// clustertwin web app: the form's values are the query string of the page and of /api/<command>; every
// change recomputes. Results are written with textContent only (never innerHTML), so no value can inject markup.
"use strict";
(function () {
  var cfg = JSON.parse(document.getElementById("page-config").textContent);
  var form = document.getElementById("controls");
  var statusEl = document.getElementById("status");
  var results = document.getElementById("results");
  var extra = document.getElementById("extra");
  var seq = 0;
  var timer = null;

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v === "boolean") return v ? "yes" : "no";
    if (typeof v === "number") {
      if (!isFinite(v)) return String(v);
      if (Number.isInteger(v)) return Math.abs(v) >= 10000 ? v.toLocaleString("en-US") : String(v);
      var a = Math.abs(v);
      if (a === 0) return "0";
      if (a >= 1e5) return v.toLocaleString("en-US", {maximumFractionDigits: 0});
      if (a >= 100) return v.toFixed(1);
      if (a >= 1) return v.toFixed(2);
      return v.toPrecision(3);
    }
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }
  function table(columns, rows, rowClass) {
    var wrap = el("div", {"class": "scroll"});
    var t = el("table");
    var head = el("tr");
    columns.forEach(function (c) { head.appendChild(el("th", {scope: "col"}, c)); });
    t.appendChild(el("thead")).appendChild(head);
    var body = t.appendChild(el("tbody"));
    rows.forEach(function (r, i) {
      var tr = el("tr", rowClass && rowClass(i) ? {"class": rowClass(i)} : {});
      r.forEach(function (c) { tr.appendChild(el("td", {}, fmt(c))); });
      body.appendChild(tr);
    });
    wrap.appendChild(t);
    return wrap;
  }
  function card(label, value, bad) {
    var c = el("div", {"class": bad ? "card bad" : "card"});
    c.appendChild(el("div", {"class": "label"}, label));
    c.appendChild(el("div", {"class": "value", "data-key": label}, value));
    return c;
  }
  function plot(parent, id, traces, layout) {
    var div = el("div", {"class": "plot", id: id});
    parent.appendChild(div);
    if (window.Plotly) {
      var base = {margin: {l: 150, r: 20, t: 40, b: 45}, font: {size: 12}, height: 320,
        width: Math.max(200, div.clientWidth - 2)};
      Object.keys(layout).forEach(function (k) { base[k] = layout[k]; });
      window.Plotly.newPlot(div, traces, base, {displaylogo: false, responsive: false});
    }
    return div;
  }
  function query(names) {
    var q = new URLSearchParams();
    Array.prototype.forEach.call(form.elements, function (f) {
      if (!f.name || (names && names.indexOf(f.name) < 0)) return;
      if (f.type === "checkbox") {
        if (String(f.checked) !== f.dataset.default) q.append(f.name, String(f.checked));
      } else if (f.multiple) {
        Array.prototype.forEach.call(f.selectedOptions, function (o) { q.append(f.name, o.value); });
      } else if (f.dataset.multiple) {
        f.value.split(",").map(function (s) { return s.trim(); }).filter(Boolean)
          .forEach(function (v) { q.append(f.name, v); });
      } else if (f.value !== "" && f.name !== "model_yaml") {
        q.append(f.name, f.value);
      }
    });
    return q;
  }
  function pasted() {
    var t = document.getElementById("f-model_yaml");
    return t && t.value.trim() ? t.value : null;
  }
  function call(api, q) {
    var yaml = pasted();
    if (yaml === null) return fetch("/api/" + api + "?" + q.toString());
    var body = {};
    q.forEach(function (v, k) { (body[k] = body[k] || []).push(v); });
    var flat = {};
    Object.keys(body).forEach(function (k) {
      var f = form.elements.namedItem(k);
      var many = f && (f.multiple || (f.dataset && f.dataset.multiple));
      var vals = body[k].map(function (v) { return v === "true" ? true : v === "false" ? false : (v !== "" && !isNaN(v) ? Number(v) : v); });
      flat[k] = many ? vals : vals[0];
    });
    flat.model_yaml = yaml;
    return fetch("/api/" + api, {method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(flat)});
  }
  // the downloads take the form's options that their command has, and the layout options the form leaves empty
  // as the estimate on screen resolved them (so the file is of the layout shown); a pasted model cannot travel
  // in a link
  function downloadQuery(names, shown) {
    var q = query(names);
    var layout = shown && shown.layout;
    if (!layout) return q;
    names.forEach(function (n) {
      if (cfg.layout_params.indexOf(n) < 0 || q.has(n)) return;
      var v = layout[n === "sp" ? "sequence_parallel" : n];
      if (v === null || v === undefined || v === false || typeof v === "object") return;
      q.set(n, String(v));
    });
    return q;
  }
  function downloadLinks(shown) {
    Object.keys(cfg.downloads || {}).forEach(function (k) {
      var a = document.getElementById("download-" + k);
      if (!a) return;
      if (pasted() !== null) {
        a.removeAttribute("href");
        a.setAttribute("aria-disabled", "true");
        a.setAttribute("data-why", "a pasted model: POST /api/download/" + k + " with model_yaml");
        return;
      }
      a.setAttribute("href", "/api/download/" + k + "?" + downloadQuery(cfg.downloads[k], shown).toString());
      a.removeAttribute("aria-disabled");
      a.removeAttribute("data-why");
    });
  }
  function setStatus(text, error) {
    statusEl.textContent = text;
    statusEl.className = error ? "error" : "";
  }
  function run(api, names, target, draw, label) {
    var q = query(names);
    var mine = ++seq;
    if (target === results) {
      history.replaceState(null, "", "?" + query().toString());
      document.getElementById("share").href = location.href;
      document.getElementById("json").href = "/api/" + api + "?" + q.toString();
      ["cluster", "model"].forEach(function (k) {
        var a = document.getElementById("spec-" + k), f = form.elements.namedItem(k);
        if (a && f && f.value) a.href = "/api/spec/" + k + "/" + encodeURIComponent(f.value);
      });
      downloadLinks();
    }
    setStatus((label || "computing") + " …", false);
    var t0 = performance.now();
    return call(api, q).then(function (r) {
      return r.json().then(function (d) { return {ok: r.ok, data: d}; });
    }).then(function (res) {
      if (mine !== seq && target === results) return;
      if (!res.ok) { setStatus(res.data.error || "error", true); return; }
      target.replaceChildren();
      draw(res.data, target);
      window.clustertwinLast = window.clustertwinLast || {};
      window.clustertwinLast[api] = res.data;  // the numbers on screen, for the browser tests
      if (target === results) downloadLinks(res.data);
      setStatus((label || "computed") + " in " + Math.round(performance.now() - t0) + " ms", false);
      document.body.dataset.ready = String(seq);
      return true;  // drawn (the Train page then asks for its timeline)
    }).catch(function (e) { setStatus("request failed: " + e, true); });
  }

  // ------------------------------------------------------------------ page renderers
  function shortLayout(l) {
    var parts = ["tp" + l.tp, "pp" + l.pp, "dp" + l.dp];
    ["cp", "ep", "vpp"].forEach(function (k) { if (l[k] !== undefined && l[k] !== 1) parts.push(k + l[k]); });
    parts.push("mbs" + l.micro_batch, String(l.recompute), "z" + l.zero);
    if (l.sequence_parallel) parts.push("sp");
    return parts.join(" ");
  }
  function drawTrain(d, target) {
    var cards = el("div", {"class": "cards", id: "estimate-cards"});
    cards.appendChild(card("step time (s)", fmt(d.step_time_s)));
    cards.appendChild(card("tokens/s", fmt(d.tokens_per_s)));
    cards.appendChild(card("MFU", (100 * d.mfu).toFixed(1) + "%"));
    var mem = d.memory || {};
    cards.appendChild(card("memory GiB/GPU", fmt(d.memory_gib_per_gpu) + " / " + fmt(mem.capacity_gib), !d.fits));
    cards.appendChild(card("fits", d.fits ? "yes" : "no", !d.fits));
    cards.appendChild(card("layout", shortLayout(d.layout || {})));
    if (d.time_to_train) cards.appendChild(card("days to train", fmt(d.time_to_train.days)));
    if (d.with_failures) cards.appendChild(card("days with failures", fmt(d.with_failures.days)));
    target.appendChild(cards);
    if (!d.fits && mem.reason) target.appendChild(el("p", {"class": "why"}, mem.reason));
    var plots = target.appendChild(el("div", {"class": "plots"}));
    var terms = Object.keys(d.breakdown || {}).filter(function (k) { return d.breakdown[k] > 0; });
    plot(plots, "plot-breakdown", [{type: "bar", orientation: "h", y: terms, x: terms.map(function (k) { return d.breakdown[k]; }),
      hovertemplate: "%{y}: %{x:.4g} s<extra></extra>"}], {title: {text: "step time breakdown (s)"}, yaxis: {automargin: true}, margin: {l: 10, r: 20, t: 40, b: 45}});
    var mb = mem.breakdown_gib || mem.breakdown || {};
    var mterms = Object.keys(mb);
    var cap = mem.capacity_gib || 0;
    plot(plots, "plot-memory", mterms.map(function (k) { return {type: "bar", name: k, x: ["GiB per GPU"], y: [mb[k]]}; }),
      {title: {text: "memory per GPU vs HBM (dashed: " + fmt(cap) + " GiB)"}, barmode: "stack", margin: {l: 50, r: 20, t: 40, b: 45},
       yaxis: {range: [0, 1.1 * Math.max(cap, d.memory_gib_per_gpu || 0)]},
       shapes: [{type: "line", xref: "paper", x0: 0, x1: 1, y0: cap, y1: cap, line: {dash: "dash", color: "#b3261e", width: 2}}]});
    var rows = [["GPUs", d.gpus], ["software stack", d.software_stack], ["HFU", d.hfu],
      ["model TFLOP/s per GPU", d.model_tflops_per_gpu], ["tokens/s per GPU", d.tokens_per_s_per_gpu],
      ["stage plan", (d.stage_plan || {}).layers_per_stage], ["placement", d.placement]];
    if (d.time_to_train) Object.keys(d.time_to_train).forEach(function (k) { rows.push(["time to train: " + k, d.time_to_train[k]]); });
    if (d.with_failures) Object.keys(d.with_failures).forEach(function (k) {
      var v = d.with_failures[k]; if (typeof v !== "object") rows.push(["with failures: " + k, v]); });
    target.appendChild(el("h2", {}, "Estimate"));
    target.appendChild(table(["quantity", "value"], rows));
    if (cfg.timeline) target.appendChild(el("div", {id: "timeline", "class": "timeline"}));
  }
  function drawSearch(d, target) {
    target.appendChild(el("h2", {}, "Top layouts on " + d.gpus + " GPUs (" + fmt(d.evaluated) + " evaluated, " + fmt(d.fitting) + " fit)"));
    var top = d.layouts || [];
    target.appendChild(table(["#", "layout", "step (s)", "tokens/s", "MFU", "GiB/GPU"], top.map(function (e, i) {
      return [i + 1, shortLayout(e.layout), e.step_time_s, e.tokens_per_s, e.mfu, e.memory_gib_per_gpu]; })));
    if (!top.length) target.appendChild(el("p", {"class": "why"}, "no valid layout fits"));
  }
  function drawScale(d, target) {
    var pts = (d.points || []).filter(function (p) { return p.tokens_per_s !== undefined; });
    target.appendChild(el("h2", {}, "Scaling at global batch " + d.global_batch));
    var plots = target.appendChild(el("div", {"class": "plots"}));
    plot(plots, "plot-scale", [{type: "scatter", mode: "lines+markers", name: "tokens/s", x: pts.map(function (p) { return p.gpus; }),
      y: pts.map(function (p) { return p.tokens_per_s; })}], {title: {text: "tokens/s vs GPUs"}, xaxis: {type: "log", title: {text: "GPUs"}}, margin: {l: 70, r: 20, t: 40, b: 50}});
    var groups = pts.length ? Object.keys(pts[0].fractions || {}) : [];
    plot(plots, "plot-losses", groups.map(function (g) { return {type: "bar", name: g, x: pts.map(function (p) { return String(p.gpus); }),
      y: pts.map(function (p) { return p.fractions[g]; })}; }), {title: {text: "share of the step"}, barmode: "stack", margin: {l: 50, r: 20, t: 40, b: 50}});
    target.appendChild(table(["GPUs", "tokens/s", "MFU", "efficiency", "layout"], pts.map(function (p) {
      return [p.gpus, p.tokens_per_s, p.mfu, p.scaling_efficiency, shortLayout(p.layout)]; })));
  }
  function flatten(obj, prefix, out) {
    Object.keys(obj || {}).forEach(function (k) {
      var v = obj[k], key = prefix ? prefix + "." + k : k;
      if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
      else out[key] = Array.isArray(v) ? v.map(function (x) { return typeof x === "object" ? JSON.stringify(x) : String(x); }).join("; ") : v;
    });
    return out;
  }
  function drawPlan(d, target) {
    var plans = d.compare || [d];
    var cards = el("div", {"class": "cards", id: "plan-cards"});
    plans.forEach(function (p) {
      var f = flatten(p, "", {});
      cards.appendChild(card(p.name + ": GPUs", fmt(f["compute.gpus"])));
      cards.appendChild(card(p.name + ": IT kW", fmt(f["facility.power.it_kw"])));
    });
    target.appendChild(cards);
    ["compute", "memory", "network", "storage", "facility", "cost"].forEach(function (section) {
      var flats = plans.map(function (p) { return flatten(p[section], "", {}); });
      var keys = [];
      flats.forEach(function (f) { Object.keys(f).forEach(function (k) { if (keys.indexOf(k) < 0) keys.push(k); }); });
      target.appendChild(el("h2", {}, section));
      target.appendChild(table([section].concat(plans.map(function (p) { return p.name; })),
        keys.map(function (k) { return [k].concat(flats.map(function (f) { return f[k]; })); })));
    });
    plans.forEach(function (p) { (p.warnings || []).forEach(function (w) { target.appendChild(el("p", {"class": "why"}, p.name + ": " + w)); }); });
  }
  function drawInfer(d, target) {
    var b = d.best;
    var cards = el("div", {"class": "cards", id: "infer-cards"});
    if (b) {
      cards.appendChild(card("GPUs", fmt(b.gpus)));
      cards.appendChild(card("deployment", b.replicas + " x tp" + b.tp + " " + b.precision + " on " + b.node));
      cards.appendChild(card("USD/h", fmt(b.usd_per_hour)));
      cards.appendChild(card("TTFT ms", fmt(b.ttft_ms)));
      cards.appendChild(card("TPOT ms", fmt(b.tpot_ms)));
    } else cards.appendChild(card("result", "no candidate meets the SLOs", true));
    target.appendChild(cards);
    if (d.verification) {
      target.appendChild(el("h2", {}, "Simulated check"));
      target.appendChild(table(["quantity", "value"], Object.keys(d.verification).map(function (k) { return [k, d.verification[k]]; })));
    }
    target.appendChild(el("h2", {}, "Candidates"));
    target.appendChild(table(["node", "tp", "precision", "replicas", "GPUs", "USD/h", "TTFT ms", "TPOT ms", "feasible"],
      (d.candidates || []).map(function (c) { return [c.node, c.tp, c.precision, c.replicas, c.gpus, c.usd_per_hour, c.ttft_ms, c.tpot_ms, c.feasible ? "yes" : c.reason]; })));
  }
  function drawExplain(d, target) {
    var cards = el("div", {"class": "cards", id: "explain-cards"});
    cards.appendChild(card("bottleneck", d.bottleneck));
    cards.appendChild(card("step time (s)", fmt(d.step_time_s)));
    cards.appendChild(card("tokens/s", fmt(d.tokens_per_s)));
    cards.appendChild(card("GPUs", fmt(d.gpus)));
    target.appendChild(cards);
    target.appendChild(el("p", {"class": "verdict"}, d.verdict));
    var stages = d.stages || [];
    var names = stages.map(function (s) { return s.name; });
    var plots = target.appendChild(el("div", {"class": "plots"}));
    plot(plots, "plot-path", [{type: "bar", orientation: "h", y: names, x: stages.map(function (s) { return s.cost_s || 0; }),
      marker: {color: stages.map(function (s) { return s.name === d.bottleneck ? "#d9534f" : "#6c8ebf"; })},
      hovertemplate: "%{y}: %{x:.4g} s per step<extra></extra>"}], {title: {text: "the path: seconds per step by stage"}, yaxis: {automargin: true, autorange: "reversed"}, margin: {l: 10, r: 20, t: 40, b: 45}});
    target.appendChild(table(["stage", "capacity", "demand", "unit", "s/step", "why"], stages.map(function (s) {
      return [s.name, s.capacity, s.demand, s.unit, s.cost_s, s.detail]; }), function (i) { return stages[i].name === d.bottleneck ? "bottleneck" : ""; }));
    (d.notes || []).forEach(function (n) { target.appendChild(el("p", {"class": "note"}, n)); });
  }
  function pct(v) { return v === null || v === undefined ? "-" : (100 * v).toFixed(1) + "%"; }
  function drawValidate(d, target) {
    var s = d.summary || {};
    var cards = el("div", {"class": "cards", id: "validate-cards"});
    cards.appendChild(card("cases", fmt(s.count)));
    cards.appendChild(card("failed", fmt(s.failed), s.failed > 0));
    cards.appendChild(card("median |error|", pct(s.median_abs_rel_error)));
    cards.appendChild(card("max |error|", pct(s.max_abs_rel_error)));
    target.appendChild(cards);
    var kinds = s.by_kind || {};
    target.appendChild(el("h2", {}, "Accuracy by kind"));
    target.appendChild(table(["kind", "cases", "failed", "median", "mean", "max"], Object.keys(kinds).map(function (k) {
      var v = kinds[k]; return [k, v.count, v.failed, pct(v.median_abs_rel_error), pct(v.mean_abs_rel_error), pct(v.max_abs_rel_error)]; })));
    target.appendChild(el("h2", {}, "Cases"));
    (d.cases || []).forEach(function (c) {
      var det = el("details", {"class": "case"});
      var errs = Object.keys(c.rel_error || {}).map(function (k) { return pct(c.rel_error[k]); }).join(", ");
      det.appendChild(el("summary", {}, c.id + " (" + c.kind + "): " + (c.error ? "error: " + c.error : errs)));
      det.appendChild(el("p", {}, c.source || ""));
      var keys = Object.keys(c.measured || {});
      det.appendChild(table(["key", "measured", "predicted", "error"], keys.map(function (k) {
        return [k, c.measured[k], (c.predicted || {})[k], pct((c.rel_error || {})[k])]; })));
      target.appendChild(det);
    });
  }
  // the predicted step (/api/train/timeline, the file of train estimate --timeline): one row per (rank, stream),
  // one bar trace per stream, each bar an event from its start (base) for its duration, in ms
  function drawTimeline(d, target) {
    var names = {}, rows = [], traces = {}, order = [];
    (d.traceEvents || []).forEach(function (e) {
      if (e.ph === "M" && e.name === "process_name") names[e.pid] = e.args.name;
    });
    var events = (d.traceEvents || []).filter(function (e) { return e.ph === "X"; });
    events.sort(function (a, b) { return a.pid - b.pid || a.tid - b.tid; });
    events.forEach(function (e) {
      var row = (names[e.pid] || "rank " + e.pid) + " · " + e.cat;
      if (rows.indexOf(row) < 0) rows.push(row);
      var t = traces[e.cat];
      if (!t) {
        t = traces[e.cat] = {type: "bar", orientation: "h", name: e.cat, y: [], x: [], base: [], hovertext: [],
          hovertemplate: "%{hovertext}<br>%{base:.4g} ms + %{x:.4g} ms<extra>%{fullData.name}</extra>"};
        order.push(e.cat);
      }
      t.y.push(row); t.x.push(e.dur / 1000); t.base.push(e.ts / 1000); t.hovertext.push(e.name);
    });
    var o = d.otherData || {};
    target.appendChild(el("h2", {}, "Predicted step timeline (" + (o.schedule || "") + ", " + fmt(o.microbatches) +
      " micro-batches, " + fmt(o.step_time_s) + " s)"));
    plot(target, "plot-timeline", order.map(function (k) { return traces[k]; }),
      {barmode: "overlay", height: 90 + 22 * rows.length, margin: {l: 10, r: 20, t: 20, b: 45},
       xaxis: {title: {text: "ms from the step's start"}, range: [0, 1000 * (o.step_time_s || 0)]},
       yaxis: {type: "category", categoryorder: "array", categoryarray: rows, autorange: "reversed", automargin: true},
       legend: {orientation: "h", y: -0.15}});
    target.appendChild(el("p", {"class": "note"}, "The file clustertwin train estimate --timeline writes (save the " +
      "timeline JSON and open it in https://ui.perfetto.dev); hidden communication is not drawn."));
    var a = target.appendChild(el("a", {id: "timeline-json", href: "", download: "timeline.json"}, "timeline JSON"));
    if (pasted() === null) a.setAttribute("href", "/api/" + cfg.timeline + "?" + query().toString());
    else a.removeAttribute("href");
  }
  var tseq = 0;
  function timeline() {
    var target = document.getElementById("timeline");
    if (!cfg.timeline || !target) return;
    var mine = ++tseq;
    call(cfg.timeline, query()).then(function (r) {
      return r.json().then(function (d) { return {ok: r.ok, data: d}; });
    }).then(function (res) {
      if (mine !== tseq) return;
      target.replaceChildren();
      if (!res.ok) { target.appendChild(el("p", {"class": "why"}, "timeline: " + (res.data.error || "error"))); return; }
      drawTimeline(res.data, target);
      window.clustertwinLast[cfg.timeline] = res.data;
      document.body.dataset.timeline = String(mine);
    }).catch(function (e) { target.replaceChildren(el("p", {"class": "why"}, "timeline request failed: " + e)); });
  }
  var DRAW = {train: drawTrain, plan: drawPlan, infer: drawInfer, explain: drawExplain, validate: drawValidate};

  function update() { run(cfg.api, null, results, DRAW[cfg.page]).then(function (drawn) { if (drawn) timeline(); }); }
  form.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(update, 150); });
  form.addEventListener("change", function () { clearTimeout(timer); timer = setTimeout(update, 50); });
  form.addEventListener("submit", function (e) { e.preventDefault(); update(); });
  var search = document.getElementById("search");
  if (search) search.addEventListener("click", function () {
    search.disabled = true;
    run("train/search", cfg.search_params, extra, drawSearch, "searching layouts").then(function () { search.disabled = false; });
  });
  var scale = document.getElementById("scale");
  if (scale) scale.addEventListener("click", function () {
    var q = query(cfg.scale_params.concat(["gpus"]));
    scale.disabled = true;
    var g = q.get("gpus");
    q.delete("gpus");
    if (g) q.set("max_gpus", g);
    setStatus("scaling …", false);
    call("train/scale", q).then(function (r) { return r.json().then(function (d) { return {ok: r.ok, data: d}; }); })
      .then(function (res) {
        scale.disabled = false;
        if (!res.ok) { setStatus(res.data.error || "error", true); return; }
        extra.replaceChildren(); drawScale(res.data, extra); setStatus("scaled", false);
      });
  });
  window.addEventListener("resize", function () {
    if (window.Plotly) document.querySelectorAll(".plot").forEach(function (p) {
      window.Plotly.relayout(p, {width: Math.max(200, p.clientWidth - 2)}); });
  });
  update();
})();
