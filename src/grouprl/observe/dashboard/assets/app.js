"use strict";
(() => {
// The app: tabs, the run picker, the state in the URL hash, and (live) polling of the server.
const { h } = GRL;
const POLL_MS = 2000;
const VIEWS = ["overview", "curves", "groups", "trajectories", "grail"];

const app = (GRL.app = {
  state: {},
  runs: [],
  queue: Promise.resolve(),
  stepsCache: new Map(),
  evalCache: new Map(),
  configOpen: new Set(["task", "algorithm"]),

  run() { return this.runs[this.state.run] || this.runs[0]; },
  setState(partial) {
    Object.assign(this.state, partial || {});
    GRL.writeHash(this.state);
  },
  // Renders run one after another, so a poll's redraw never lands on top of a newer click.
  render(partial) {
    this.setState(partial);
    this.scrollToDetail = !!partial && ["group", "episode", "t"].some((k) => k in partial && partial[k] !== "");
    this.queue = this.queue.then(() => this.draw()).catch((err) => this.fail(err));
    return this.queue;
  },
  async draw() {
    const name = VIEWS.includes(this.state.view) ? this.state.view : "overview";
    for (const tab of document.querySelectorAll("#tabs button")) tab.classList.toggle("active", tab.dataset.view === name);
    document.getElementById("run-select").value = String(this.state.run);
    await GRL.views[name].render(this, document.getElementById("view"));
  },
  fail(err) {
    console.error(err);
    document.getElementById("status").textContent = "error: " + err.message;
  },
  selectRun(i) {
    this.render({ run: i, step: "", group: "", page: 0, tstep: "", episode: "", t: "", epage: 0, evalPage: 0 });
  },
  async steps(i) {
    if (!this.stepsCache.has(i)) this.stepsCache.set(i, await this.source.steps(i));
    return this.stepsCache.get(i);
  },
  async evalRows(i) {
    if (!this.evalCache.has(i)) this.evalCache.set(i, await this.source.evalRows(i));
    return this.evalCache.get(i);
  },

  async loadRuns() {
    const runs = await this.source.runs();
    const changed = JSON.stringify(runs) !== JSON.stringify(this.runs.map(({ index, ...r }) => r));
    this.runs = runs.map((r, index) => ({ ...r, index }));
    return changed;
  },
  async loadMetrics() {
    let changed = false;
    for (const run of this.runs) changed = this.store.add(run.index, await this.source.metrics(run.index, this.store.next[run.index])) || changed;
    return changed;
  },
  // One poll: what changed on disk since the last one, then the open view decides what to redraw.
  async poll() {
    const overview = await this.loadRuns();
    const metrics = await this.loadMetrics();
    let steps = false;
    for (const run of this.runs) {
      const fresh = await this.source.steps(run.index);
      if (JSON.stringify(fresh) !== JSON.stringify(this.stepsCache.get(run.index))) steps = true;
      this.stepsCache.set(run.index, fresh);
    }
    if (overview) this.evalCache.clear();
    const stamp = new Date().toLocaleTimeString();
    document.getElementById("status").textContent = `live · polled ${stamp}` +
      ` · ${this.runs.filter((r) => !r.finished).length} running`;
    if (!(overview || metrics || steps)) return;
    const name = VIEWS.includes(this.state.view) ? this.state.view : "overview";
    const view = GRL.views[name];
    const el = document.getElementById("view");
    this.queue = this.queue.then(async () => {
      if (name === "overview" && (overview || metrics)) return view.render(this, el);
      if (view.onData) return view.onData(this, el, { overview, metrics, steps });
    }).catch((err) => this.fail(err));
  },

  async start() {
    const embedded = document.getElementById("grouprl-data");
    this.source = embedded ? new GRL.ReportSource(JSON.parse(embedded.textContent)) : new GRL.LiveSource();
    await this.loadRuns();
    this.store = new GRL.MetricStore(this.runs.length);
    await this.loadMetrics();
    const st = GRL.readHash();
    st.run = Math.min(Number(st.run || 0), this.runs.length - 1);
    this.state = st;
    document.getElementById("tabs").append(...VIEWS.map((v) =>
      h("button", { data: { view: v }, onclick: () => this.render({ view: v }) }, GRL.views[v].title)));
    const select = document.getElementById("run-select");
    select.append(...this.runs.map((r) => h("option", { value: r.index }, r.name)));
    select.addEventListener("change", (e) => this.selectRun(Number(e.target.value)));
    document.getElementById("status").textContent = this.source.live ? "live" :
      `report of ${this.runs.length} run(s), generated ${this.source.data.generated}`;
    document.body.classList.add(this.source.live ? "live" : "report");
    await this.render({});
    window.addEventListener("hashchange", () => { // a link or the address bar: take its state
      const next = GRL.readHash();
      next.run = Math.min(Number(next.run || 0), this.runs.length - 1);
      this.state = next;
      this.render({});
    });
    if (this.source.live) {
      const tick = async () => {
        try { await this.poll(); } catch (err) { document.getElementById("status").textContent = "server unreachable: " + err.message; }
        setTimeout(tick, POLL_MS);
      };
      setTimeout(tick, POLL_MS);
    }
    document.body.dataset.ready = "1"; // tests wait for this
  },
});

window.addEventListener("DOMContentLoaded", () => app.start().catch((err) => app.fail(err)));
})();
