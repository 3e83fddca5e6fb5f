"use strict";
// Line charts on uPlot (vendored, MIT): fast canvas charts that stay smooth with tens of
// thousands of points and dozens of charts on one page.

GRL.PALETTE = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#65a30d"];

// Exponential moving average with TensorBoard's debiasing (early points are not pulled to 0).
GRL.ema = function ema(ys, weight) {
  if (!weight) return ys.slice();
  let last = 0;
  let n = 0;
  return ys.map((y) => {
    if (y === null || y === undefined || !Number.isFinite(y)) return null;
    last = last * weight + (1 - weight) * y;
    n += 1;
    return last / (1 - Math.pow(weight, n));
  });
};

function fade(color, alpha) {
  const n = parseInt(color.slice(1), 16);
  return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${alpha})`;
}

// Steps are whole numbers: no 1.5 ticks.
const STEP_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];

// A flat metric (all zeros, a constant learning rate) gets a small band around its value,
// not uPlot's default 0..100.
function yRange(u, min, max) {
  if (min === null || max === null) return [0, 1];
  if (max - min < 1e-12) {
    const pad = Math.abs(min) > 1e-12 ? Math.abs(min) * 0.1 : 1;
    return [min - pad, max + pad];
  }
  const pad = (max - min) * 0.08;
  return [min - pad, max + pad];
}

// A tick label as short as it can be: 0.5 not 0.500, 2e-4 not 2.00e-4.
function axisLabel(v) {
  if (v === null || v === undefined) return "";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2).replace(/\.?0+e/, "e");
  return String(Number(v.toFixed(6)));
}

// series: [{label, xs, ys, color, kind: "line" | "points"}]; smoothing in [0, 1).
GRL.lineChart = function lineChart(el, { title, series, smoothing = 0, height = 190, xLabel = "step" }) {
  const xsAll = [...new Set(series.flatMap((s) => s.xs))].sort((a, b) => a - b);
  const at = new Map(xsAll.map((x, i) => [x, i]));
  const align = (s, ys) => {
    const out = new Array(xsAll.length).fill(null);
    s.xs.forEach((x, j) => (out[at.get(x)] = ys[j] === undefined || !Number.isFinite(ys[j]) ? null : ys[j]));
    return out;
  };
  const data = [xsAll];
  const specs = [{ label: xLabel }];
  for (const s of series) {
    const ys = s.ys.map((y) => (typeof y === "number" ? y : null));
    if (s.kind === "points") {
      data.push(align(s, ys));
      specs.push({ label: s.label, stroke: s.color, width: 0, paths: () => null,
        points: { show: true, size: 9, fill: s.color, stroke: s.color } });
      continue;
    }
    if (smoothing > 0) {
      data.push(align(s, ys));
      specs.push({ label: s.label + " (raw)", stroke: fade(s.color, 0.28), width: 1, spanGaps: true });
    }
    data.push(align(s, GRL.ema(ys, smoothing)));
    specs.push({ label: s.label, stroke: s.color, width: 1.6, spanGaps: true, dash: s.dash,
      points: { show: xsAll.length <= 12, size: 5 } });
  }
  GRL.clear(el);
  const width = Math.max(240, el.clientWidth || 400);
  const opts = {
    title, width, height, series: specs,
    scales: { x: { time: false }, y: { range: yRange } },
    axes: [{ size: 30, incrs: STEP_INCRS }, { size: 66, values: (u, vals) => vals.map(axisLabel) }],
    legend: { live: true },
    cursor: { drag: { x: true, y: false } },
  };
  const chart = new uPlot(opts, data, el);
  // the faded raw lines stay out of the legend (it lists each smoothed line once)
  const rows = chart.root.querySelectorAll(".u-legend .u-series");
  specs.forEach((spec, i) => { if (spec.label.endsWith(" (raw)") && rows[i]) rows[i].style.display = "none"; });
  el.chart = chart;
  return chart;
};

// Charts follow their container's width when the window is resized.
window.addEventListener("resize", GRL.debounce(() => {
  for (const el of document.querySelectorAll(".chart")) {
    if (el.chart) el.chart.setSize({ width: Math.max(240, el.clientWidth), height: el.chart.height });
  }
}, 150));

// One chart of some metrics (each run a color, each metric a dash) for a chart grid.
GRL.metricChart = function metricChart(parent, { title, metrics, runs, store, smoothing, extra }) {
  const series = [];
  runs.forEach((run, r) => {
    const rows = store.rows(run.index);
    metrics.forEach((name, m) => {
      const have = rows.filter((row) => typeof row[name] === "number" || row[name] === null && name in row);
      if (!have.length) return;
      const color = GRL.PALETTE[(runs.length > 1 ? r : m) % GRL.PALETTE.length];
      const label = (runs.length > 1 ? run.name + " · " : "") + name;
      const dash = runs.length > 1 && m > 0 ? [6, 4] : undefined; // runs are colors, metrics are dashes
      series.push({ label, xs: have.map((row) => row.step), ys: have.map((row) => row[name]), color, dash });
    });
  });
  for (const s of extra || []) series.push(s);
  if (!series.length) return null;
  const box = GRL.h("div", { class: "chart", data: { metric: metrics.join(",") } });
  parent.append(box);
  GRL.lineChart(box, { title, series, smoothing });
  return box;
};
