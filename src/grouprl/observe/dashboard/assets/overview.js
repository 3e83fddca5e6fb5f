"use strict";
(() => {
// Overview: what the run is (config), how it ended (summary, eval before/after), what it cost
// (wall time, tokens/s) and the commands that run it again.
GRL.views = GRL.views || {};
const { h } = GRL;

function runFacts(run, rows) {
  const cfg = run.config || {};
  const sum = run.summary || {};
  const section = (name) => cfg[name] || {};
  const tps = rows.map((r) => r.tokens_per_second).filter((x) => typeof x === "number");
  const stepTime = rows.map((r) => r.step_time).filter((x) => typeof x === "number");
  const last = rows.length ? rows[rows.length - 1].step : null;
  const before = sum.eval_before || null;
  const after = sum.eval_after || null;
  return {
    task: section("task").task,
    advantage: section("algorithm").advantage,
    model: sum.model || section("model").model_name_or_path || "(tiny model built by grouprl)",
    steps: `${last === null ? 0 : last} / ${section("train").max_steps ?? "?"}`,
    status: run.finished ? "finished" : run.exists ? "running (or stopped)" : "waiting for the run folder",
    accuracy: before || after ? `${GRL.fmt(before && before.accuracy)} → ${GRL.fmt(after && after.accuracy)}` : "—",
    eval_reward: before || after ? `${GRL.fmt(before && before.reward)} → ${GRL.fmt(after && after.reward)}` : "—",
    wall: sum.wall_seconds !== undefined ? `${GRL.fmt(sum.wall_seconds, 1)} s` : "—",
    train_time: stepTime.length ? `${GRL.fmt(stepTime.reduce((a, b) => a + b, 0), 1)} s over ${stepTime.length} steps` : "—",
    tokens_per_second: tps.length ? `${GRL.fmt(GRL.mean(tps), 1)} mean · ${GRL.fmt(tps[tps.length - 1], 1)} last` : "—",
  };
}

function evalTable(app, rows, page) {
  const before = rows.before || [];
  const after = rows.after || [];
  const n = Math.max(before.length, after.length);
  if (!n) return h("p", { class: "muted" }, "no per-example eval files (eval/before.jsonl, eval/after.jsonl)");
  const byIndex = (list) => new Map(list.map((r, i) => [r.index ?? i, r]));
  const b = byIndex(before);
  const a = byIndex(after);
  const keys = [...new Set([...b.keys(), ...a.keys()])].sort((x, y) => x - y);
  const pg = GRL.pager(keys.length, page, 20, (p) => app.render({ evalPage: p }));
  const cell = (r) => r ? h("span", { class: r.correct ? "pos" : "neg" },
    `${r.correct ? "✓" : "✗"} ${r.completion ?? ""}`, h("span", { class: "muted" }, `  r=${GRL.fmt(r.reward)}`)) : "—";
  const table = GRL.table([
    { label: "#", num: true, fmt: (k) => k },
    { label: "question", fmt: (k) => GRL.plainPrompt((b.get(k) || a.get(k)).question) },
    { label: "ground truth", fmt: (k) => GRL.fmt((b.get(k) || a.get(k)).ground_truth) },
    { label: "before RL", fmt: (k) => cell(b.get(k)) },
    { label: "after RL", fmt: (k) => cell(a.get(k)) },
  ], keys.slice(pg.start, pg.end), { class: "eval-examples" });
  return h("div", {}, table, pg.el);
}

GRL.views.overview = {
  title: "Overview",
  async render(app, el) {
    const runs = app.runs;
    const facts = runs.map((run) => runFacts(run, app.store.rows(run.index)));
    const compare = GRL.table([
      { label: "run", fmt: (i) => h("a", { href: "#", onclick: (e) => { e.preventDefault(); app.selectRun(i); } }, runs[i].name) },
      { label: "task", fmt: (i) => GRL.fmt(facts[i].task) },
      { label: "advantage", fmt: (i) => GRL.fmt(facts[i].advantage) },
      { label: "steps", fmt: (i) => facts[i].steps },
      { label: "held-out accuracy", fmt: (i) => facts[i].accuracy },
      { label: "wall time", fmt: (i) => facts[i].wall },
      { label: "tokens/s", fmt: (i) => facts[i].tokens_per_second },
      { label: "status", fmt: (i) => facts[i].status },
    ], runs.map((_, i) => i), { rowClass: (i) => (i === app.state.run ? "selected" : "") });

    const run = app.run();
    const f = facts[app.state.run];
    const evalRows = await app.evalRows(app.state.run);
    const cfg = run.config || {};
    const sections = Object.entries(cfg).filter(([, v]) => v && typeof v === "object");
    const summary = Object.fromEntries(Object.entries(run.summary || {}).filter(([, v]) => typeof v !== "object" || v === null));
    const files = Object.entries(run.files || {}).map(([name, size]) =>
      h("li", {}, h("code", {}, name), " ", size === null ? h("span", { class: "muted" }, "not written yet") : `${GRL.fmt(size / 1024, 1)} KiB`));

    GRL.fill(el, 
      h("section", { class: "card" }, h("h2", {}, `Runs (${runs.length})`), compare),
      h("section", { class: "card", id: "overview-run" },
        h("h2", {}, run.name, " ", GRL.badge(f.status, run.finished ? "ok" : "live")),
        h("p", { class: "muted mono" }, run.path),
        GRL.kvTable({
          task: f.task, model: f.model, advantage: f.advantage, "steps done / max": f.steps,
          "held-out accuracy before → after": f.accuracy, "held-out mean reward before → after": f.eval_reward,
          "wall time (whole run)": f.wall, "training time (sum of step_time)": f.train_time, "tokens/s": f.tokens_per_second,
          "checkpoints": (run.checkpoints || []).join(", ") || "—",
        }, "facts")),
      h("section", { class: "card" }, h("h2", {}, "Reproduce"),
        (run.commands || []).map((c) => h("pre", { class: "command" }, c))),
      h("section", { class: "card" }, h("h2", {}, "Eval before / after RL (held-out, per example)"),
        evalTable(app, evalRows, app.state.evalPage || 0)),
      h("section", { class: "card" }, h("h2", {}, "Config"),
        sections.length ? sections.map(([name, fields]) => h("details", {
          open: app.configOpen.has(name),  // kept across the live page's redraws
          ontoggle: (e) => (e.target.open ? app.configOpen.add(name) : app.configOpen.delete(name)),
        }, h("summary", {}, name), GRL.kvTable(fields))) : h("p", { class: "muted" }, "config.json not written yet")),
      h("section", { class: "card" }, h("h2", {}, "summary.json"),
        run.summary ? GRL.kvTable(summary) : h("p", { class: "muted" }, "written when the run finishes")),
      h("section", { class: "card" }, h("h2", {}, "Files read"), h("ul", { class: "files" }, files))
    );
  },
};
})();
