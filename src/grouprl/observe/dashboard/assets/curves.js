"use strict";
(() => {
// Curves: every metric of metrics.jsonl, runs overlaid, smoothing, and the held-out eval points.
const { h } = GRL;

// Held-out eval as points: before RL at step 0, after RL at the run's last step; only on the
// chart of a metric the run logs (an environment run logs success_rate, not accuracy).
// evalByRun: the eval rows of every run, fetched before the charts are drawn.
function evalPoints(app, runs, metric, evalByRun) {
  const field = metric === "accuracy" || metric === "success_rate" ? "correct" : metric === "reward" ? "reward" : null;
  if (!field) return [];
  const out = [];
  for (const [r, run] of runs.entries()) {
    const rows = evalByRun.get(run.index) || {};
    const rowsOf = app.store.rows(run.index);
    if (!rowsOf.some((row) => metric in row)) continue;
    const last = (run.summary && run.summary.steps) || (rowsOf.length ? rowsOf[rowsOf.length - 1].step : 0);
    const xs = [];
    const ys = [];
    for (const [name, step] of [["before", 0], ["after", last]]) {
      const list = rows[name] || [];
      if (!list.length) continue;
      xs.push(step);
      ys.push(GRL.mean(list.map((e) => (field === "correct" ? (e.correct ? 1 : 0) : Number(e.reward) || 0))));
    }
    if (xs.length) {
      const color = runs.length > 1 ? GRL.PALETTE[r % GRL.PALETTE.length] : "#111827";
      out.push({ label: (runs.length > 1 ? run.name + " · " : "") + "held-out eval", xs, ys, color, kind: "points" });
    }
  }
  return out;
}

function prefixOf(name) {
  const at = name.lastIndexOf("/");
  return at < 0 ? "train" : name.slice(0, at);
}

// TensorBoard's 0.6 for long runs; a run of a few steps is shown as it is.
function smoothingOf(app) {
  if (app.state.smooth !== undefined && app.state.smooth !== "") return Number(app.state.smooth);
  const longest = Math.max(0, ...app.runs.map((r) => app.store.rows(r.index).length));
  return longest >= 50 ? 0.6 : 0;
}

function runsShown(app) {
  const hidden = new Set((app.state.hide || "").split(",").filter(Boolean).map(Number));
  return { hidden, runs: app.runs.filter((r) => !hidden.has(r.index)) };
}

function controls(app, redraw, withFilter) {
  const st = app.state;
  const { hidden } = runsShown(app);
  const smoothing = smoothingOf(app);
  const shown = h("span", { class: "mono" }, " " + smoothing.toFixed(2));
  return h("div", { class: "controls" },
    h("label", {}, "smoothing ",
      h("input", { type: "range", min: 0, max: 0.99, step: 0.01, value: smoothing, id: "smoothing",
        oninput: GRL.debounce((e) => { shown.textContent = " " + Number(e.target.value).toFixed(2);
          app.setState({ smooth: e.target.value }); redraw(); }, 120) }), shown),
    withFilter ? h("label", {}, "metrics ",
      h("input", { type: "search", placeholder: "filter, e.g. reward", value: st.filter || "", id: "metric-filter",
        oninput: GRL.debounce((e) => { app.setState({ filter: e.target.value }); redraw(); }, 250) })) : null,
    app.runs.length > 1 ? h("span", { class: "runs-toggle" }, "runs: ", app.runs.map((run) =>
      h("label", { style: `color:${GRL.PALETTE[run.index % GRL.PALETTE.length]}` },
        h("input", { type: "checkbox", checked: !hidden.has(run.index), onchange: (e) => {
          const next = new Set(runsShown(app).hidden);
          if (e.target.checked) next.delete(run.index); else next.add(run.index);
          app.setState({ hide: [...next].join(",") });
          redraw();
        } }), " " + run.name))) : null);
}

GRL.views.curves = {
  title: "Curves",
  async render(app, el) {
    this.body = h("div", {});
    this.count = h("p", { class: "muted" });
    GRL.fill(el, h("section", { class: "card" }, controls(app, () => this.draw(app), true), this.count), this.body);
    await this.draw(app);
  },
  async draw(app) {
    const { runs } = runsShown(app);
    const smoothing = smoothingOf(app);
    const filter = (app.state.filter || "").toLowerCase();
    const all = app.store.names();
    const names = all.filter((n) => !filter || n.toLowerCase().includes(filter)).sort();
    const byPrefix = new Map();
    for (const n of names) {
      const p = prefixOf(n);
      if (!byPrefix.has(p)) byPrefix.set(p, []);
      byPrefix.get(p).push(n);
    }
    const prefixes = [...byPrefix.keys()].sort((a, b) => (a === "train" ? -1 : b === "train" ? 1 : a.localeCompare(b)));
    // Everything asked for before the old charts go: the rebuild below then never waits, so a live
    // redraw (every step of a training run) does not show a half-empty page or lose the scroll position.
    const evalByRun = new Map();
    for (const run of runs) evalByRun.set(run.index, await app.evalRows(run.index));
    // the old height is held while the charts are rebuilt (reading a chart's width lays the page
    // out; a page that shrank meanwhile would scroll the reader back up)
    this.body.style.minHeight = this.body.offsetHeight + "px";
    const body = GRL.clear(this.body);
    this.count.textContent = `${names.length} of ${all.length} metrics · x axis: training step · ` +
      "large points: held-out eval before RL (step 0) and after RL (last step)";
    if (!names.length) {
      body.append(h("p", { class: "muted" }, all.length ? "no metric matches the filter"
        : "no metrics yet: metrics.jsonl gets one line per training step"));
      this.body.style.minHeight = "";
      return;
    }
    for (const prefix of prefixes) {
      const grid = h("div", { class: "chart-grid" });
      body.append(h("section", { class: "card" }, h("h2", {}, prefix), grid));
      for (const name of byPrefix.get(prefix)) {
        const extra = evalPoints(app, runs, name, evalByRun);
        GRL.metricChart(grid, { title: name, metrics: [name], runs, store: app.store, smoothing, extra });
      }
    }
    this.body.style.minHeight = "";
  },
  onData(app, el, what) {
    if (what.metrics || what.overview) return this.draw(app);
  },
};

// GRAIL: the reward mixer's alpha/beta and the discriminator's accuracy, P(expert) and loss.
const GRAIL_CHARTS = [
  ["mixer weights α, β", ["grail/alpha", "grail/beta"]],
  ["discriminator accuracy", ["disc/accuracy"]],
  ["P(expert): on expert (pos) and policy (neg) samples", ["disc/p_expert_pos", "disc/p_expert_neg"]],
  ["discriminator loss", ["disc/loss"]],
  ["discriminator batch: expert (pos) and policy (neg) samples", ["disc/positives", "disc/negatives"]],
];

GRL.views.grail = {
  title: "GRAIL",
  async render(app, el) {
    this.body = h("div", {});
    GRL.fill(el, h("section", { class: "card" }, controls(app, () => this.draw(app), false)), this.body);
    this.draw(app);
  },
  draw(app) {
    const { runs } = runsShown(app);
    const smoothing = smoothingOf(app);
    const grid = h("div", { class: "chart-grid" });
    const body = GRL.clear(this.body);
    const present = new Set(app.store.names());
    const wanted = GRAIL_CHARTS.flatMap(([, m]) => m);
    if (!wanted.some((m) => present.has(m))) {
      body.append(h("section", { class: "card", id: "grail-absent" }, h("p", {},
        "No GRAIL metrics in these runs. A GRAIL run (a discriminator reward and its mixer) logs ",
        wanted.map((m) => h("code", {}, m + " ")), "to metrics.jsonl; they appear here as the run trains.")));
      return;
    }
    body.append(h("section", { class: "card" }, h("h2", {}, "GRAIL discriminator and reward mixer"), grid));
    for (const [title, metrics] of GRAIL_CHARTS) {
      const box = GRL.metricChart(grid, { title, metrics, runs, store: app.store, smoothing });
      if (!box) grid.append(h("div", { class: "chart empty muted" }, `${title}: not logged (${metrics.join(", ")})`));
    }
  },
  onData(app, el, what) {
    if (what.metrics) this.draw(app);
  },
};
})();
