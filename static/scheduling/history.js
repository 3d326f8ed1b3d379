// Usage history charts: read GET /api/v1/history/samples/ and draw them with uPlot
// (static/vendor/uplot). The section sits outside <main id="live">, so live updates never
// redraw it; it fetches again every minute instead (samples come every 30 s).
// Time is on every x axis; every y axis names its unit. Written for hamiadmin.
(function () {
  "use strict";
  var section = document.querySelector("[data-history]");
  if (!section || typeof uPlot === "undefined") return;
  var holder = section.querySelector(".charts");
  var status = section.querySelector(".history-status");
  var node = section.dataset.node || "";
  var byQueue = section.dataset.queues === "true";
  var charts = [];
  var palette = ["#2563eb", "#16a34a", "#d97706", "#dc2626", "#9333ea", "#0891b2", "#db2777", "#65a30d", "#475569", "#ea580c"];

  function url() {
    var query = node ? "?node=" + encodeURIComponent(node) : (byQueue ? "?queues=true" : "");
    return section.dataset.history + query;
  }

  // One chart per figure, one series per queue seen in the window (a queue missing from a
  // sample, not among its 50 busiest, is a gap there).
  function queueSpecs(rows) {
    var names = {};
    rows.forEach(function (r) { Object.keys(r.queues || {}).forEach(function (q) { names[q] = true; }); });
    var queues = Object.keys(names).sort();
    function series(figure) {
      return queues.map(function (q, i) {
        return [q, rows.map(function (r) { var f = (r.queues || {})[q]; return f ? f[figure] : null; }), palette[i % palette.length]];
      });
    }
    return [
      { title: "vGPUs held by queue", unit: "vGPUs", series: series("vgpus") },
      { title: "Memory held by queue", unit: "MiB", series: series("memory") },
      { title: "Pending pods by queue", unit: "pods", series: series("pending") },
    ];
  }

  function percent(values) {
    return values.map(function (v) { return v == null ? null : Math.round(v * 1000) / 10; });
  }

  // Each chart: title, y unit, and series [label, values(rows), colour].
  function specs(rows) {
    var pick = function (key) { return rows.map(function (r) { return r[key]; }); };
    if (byQueue) return queueSpecs(rows);
    if (node) {
      return [{ title: "Allocated on " + node + " (fullest of slots, memory, cores)", unit: "%",
                series: [["allocated", percent(pick("node")), "#2563eb"]], max: 100 }];
    }
    return [
      { title: "Allocated share of the cluster", unit: "%", max: 100, series: [
        ["slots", percent(pick("slots")), "#2563eb"],
        ["memory", percent(pick("memory")), "#16a34a"],
        ["cores", percent(pick("cores")), "#d97706"]] },
      { title: "Pending pods and placements", unit: "pods", series: [
        ["pending", pick("pending"), "#dc2626"],
        ["placed since previous sample", pick("placements"), "#2563eb"]] },
      { title: "Cycle time", unit: "ms", series: [
        ["p50", pick("cycle_p50_ms"), "#2563eb"],
        ["max", pick("cycle_max_ms"), "#9333ea"]] },
    ];
  }

  function draw(rows) {
    charts.forEach(function (chart) { chart.destroy(); });
    charts = [];
    holder.textContent = "";
    if (!rows.length) {
      status.textContent = "No samples yet: the housekeeping takes one every 30 s.";
      return;
    }
    status.textContent = rows.length + " samples, last " + new Date(rows[rows.length - 1].at).toLocaleTimeString();
    var times = rows.map(function (r) { return Date.parse(r.at) / 1000; });
    var width = Math.max(320, Math.min(holder.clientWidth || 900, 1400) / (node ? 1 : 2) - 16);
    specs(rows).forEach(function (spec) {
      var box = document.createElement("figure");
      box.className = "history-chart";
      box.dataset.testid = "history-chart";
      holder.appendChild(box);
      var unit = spec.unit;
      var options = {
        title: spec.title + " (" + unit + ")",
        width: width,
        height: 200,
        scales: { x: { time: true }, y: spec.max ? { range: [0, spec.max] } : { range: function (u, lo, hi) { return [0, Math.max(1, hi * 1.1)]; } } },
        axes: [
          { label: "time" },
          { label: unit, values: function (u, ticks) { return ticks.map(function (t) { return t + " " + unit; }); }, size: 84 },
        ],
        series: [{ label: "time" }].concat(spec.series.map(function (s) {
          return { label: s[0], stroke: s[2], width: 1.5, spanGaps: false,
                   value: function (u, v) { return v == null ? "–" : v + " " + unit; } };
        })),
      };
      charts.push(new uPlot(options, [times].concat(spec.series.map(function (s) { return s[1]; })), box));
    });
  }

  function load() {
    fetch(url(), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (body) { draw(body.results); })
      .catch(function (error) { status.textContent = "History not loaded: " + error.message; });
  }

  load();
  setInterval(load, 60000);
})();
