"use strict";
// Where the views get their data: the live server (grouprl dashboard) or the data embedded in a
// report (grouprl report). Both answer the same questions with the same shapes.

GRL.LiveSource = class LiveSource {
  constructor() {
    this.live = true;
  }
  async get(path) {
    const res = await fetch(path, { cache: "no-store" });
    const body = await res.json();
    if (!res.ok) throw new Error(body.error || res.statusText);
    return body;
  }
  runs() { return this.get("api/runs"); }
  metrics(i, since) { return this.get(`api/run/${i}/metrics?since=${since}`); }
  steps(i) { return this.get(`api/run/${i}/steps`); }
  rollouts(i, step) { return this.get(`api/run/${i}/rollouts?step=${step}`); }
  trajectories(i, step) { return this.get(`api/run/${i}/trajectories?step=${step}`); }
  evalRows(i) { return this.get(`api/run/${i}/eval`); }
  search(i, q, fromStep) {
    const from = fromStep === null || fromStep === undefined ? "" : `&from_step=${fromStep}`;
    return this.get(`api/run/${i}/search?q=${encodeURIComponent(q)}${from}`);
  }
  embedded() { return null; } // every step can be asked for
};

GRL.ReportSource = class ReportSource {
  constructor(data) {
    this.live = false;
    this.data = data;
  }
  run(i) { return this.data.runs[i]; }
  async runs() { return this.data.runs.map((r) => r.overview); }
  async metrics(i, since) {
    const rows = this.run(i).metrics;
    return { rows: rows.slice(since), next: rows.length, reset: false };
  }
  async steps(i) { return this.run(i).steps; }
  async rollouts(i, step) { return this.run(i).rollouts[String(step)] || []; }
  async trajectories(i, step) { return this.run(i).trajectories[String(step)] || []; }
  async evalRows(i) { return this.run(i).eval; }
  async search(i, q) {
    const needle = q.toLowerCase();
    const hits = [];
    const seen = new Set();
    for (const [step, rows] of Object.entries(this.run(i).rollouts)) {
      for (const row of rows) {
        const key = `${step}/${row.group}`;
        if (!seen.has(key) && GRL.rowMatches(row, needle)) {
          seen.add(key);
          hits.push({ step: Number(step), group: row.group, prompt_id: row.prompt_id, snippet: GRL.snippet(row, needle) });
        }
      }
    }
    hits.sort((a, b) => a.step - b.step || a.group - b.group);
    return { hits, next_step: null };
  }
  // The steps whose records this report carries (a long run's report holds a spread of them).
  embedded(i) {
    return {
      rollouts: new Set(Object.keys(this.run(i).rollouts).map(Number)),
      trajectories: new Set(Object.keys(this.run(i).trajectories).map(Number)),
    };
  }
};

// The texts a search looks at (the server searches the same fields of rollouts.jsonl).
GRL.SEARCHED = ["prompt", "completion", "prediction", "ground_truth", "reward_reasons", "reward_errors"];
GRL.fieldText = (row, name) => {
  const v = row[name];
  if (v === null || v === undefined) return "";
  return typeof v === "string" ? v : JSON.stringify(v);
};
GRL.rowMatches = (row, needle) => GRL.SEARCHED.some((f) => GRL.fieldText(row, f).toLowerCase().includes(needle));
GRL.snippet = (row, needle) => {
  for (const f of GRL.SEARCHED) {
    const text = GRL.fieldText(row, f);
    const at = text.toLowerCase().indexOf(needle);
    if (at >= 0) return `${f}: …${text.slice(Math.max(0, at - 30), at + needle.length + 30)}…`;
  }
  return "";
};

// The app's state lives in the URL hash (#view=groups&run=0&step=3&group=1), so a view can be
// reloaded, shared, or opened directly.
GRL.readHash = function readHash() {
  const state = {};
  for (const part of location.hash.replace(/^#/, "").split("&")) {
    if (!part) continue;
    const [k, v] = part.split("=");
    state[decodeURIComponent(k)] = decodeURIComponent(v || "");
  }
  return state;
};
GRL.writeHash = function writeHash(state) {
  const text = Object.entries(state)
    .filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
    .join("&");
  if (location.hash.replace(/^#/, "") !== text) history.replaceState(null, "", "#" + text);
};

// Metrics of every run, merged by step (a resumed run logs a step again: the later row wins).
GRL.MetricStore = class MetricStore {
  constructor(n) {
    this.byRun = Array.from({ length: n }, () => new Map());
    this.next = new Array(n).fill(0);
  }
  add(i, answer) {
    if (answer.reset) this.byRun[i] = new Map();
    for (const row of answer.rows) if (typeof row.step === "number") this.byRun[i].set(row.step, row);
    this.next[i] = answer.next;
    return answer.rows.length > 0 || answer.reset;
  }
  rows(i) {
    return [...this.byRun[i].values()].sort((a, b) => a.step - b.step);
  }
  names() {
    const names = new Set();
    for (const m of this.byRun) for (const row of m.values()) for (const k of Object.keys(row)) if (k !== "step") names.add(k);
    return [...names];
  }
};
