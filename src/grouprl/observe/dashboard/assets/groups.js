"use strict";
(() => {
// Groups: one step's groups (a prompt's K completions); a group's completions side by side with
// their reward parts, reasons, errors, advantage and truncation; under on-policy distillation, each
// completion's tokens shaded by how far the student's log-prob is from the teacher's.
const { h } = GRL;
const PAGE = 20;

const FILTERS = {
  all: ["all groups", () => true],
  correct: ["some correct", (g) => g.correct > 0],
  wrong: ["none correct", (g) => g.correct === 0],
  zero: ["zero variance (no learning signal)", (g) => g.zeroVar],
  errors: ["reward errors", (g) => g.errors > 0],
  truncated: ["truncated completions", (g) => g.truncated > 0],
};

GRL.summarizeGroups = function summarizeGroups(records) {
  const groups = new Map();
  for (const r of records) {
    const key = r.group ?? r.prompt_id;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(r);
  }
  return [...groups.entries()].map(([group, eps]) => {
    const rewards = eps.map((e) => Number(e.reward) || 0);
    return {
      group, episodes: eps, prompt_id: eps[0].prompt_id, prompt: eps[0].prompt, ground_truth: eps[0].ground_truth,
      mean: GRL.mean(rewards), std: GRL.std(rewards), zeroVar: Math.max(...rewards) - Math.min(...rewards) < 1e-9,
      correct: eps.filter((e) => e.correct).length,
      errors: eps.filter((e) => (e.reward_errors || []).length).length,
      truncated: eps.filter((e) => e.truncated).length,
      kl: GRL.teacherKL(eps.flatMap((e) => e.distill_tokens || [])),
    };
  });
};

// On-policy distillation: each trained token's k1 term of KL(student || teacher), the student's log-prob of
// the token it wrote minus the teacher's (rollouts.jsonl "distill_tokens": [text, student, teacher]).
GRL.teacherKL = (tokens) => (tokens.length ? GRL.mean(tokens.map(([, s, t]) => s - t)) : null);

function tokenShade(d) {
  const a = Math.min(1, Math.abs(d) / 3).toFixed(2);  // 3 nats or more: full colour
  return d > 0 ? `background: rgba(220, 38, 38, ${a})` : `background: rgba(37, 99, 235, ${a})`;
}

function teacherTokens(tokens) {
  const worst = tokens.map(([text, s, t], i) => [s - t, text, i]).sort((a, b) => b[0] - a[0]).slice(0, 3);
  return h("details", { class: "teacher-tokens", open: true },
    h("summary", {}, `teacher vs student: KL ${GRL.fmt(GRL.teacherKL(tokens))} over ${tokens.length} tokens`),
    h("div", { class: "tokens" }, tokens.map(([text, s, t], i) => h("span", {
      class: "tok", style: tokenShade(s - t), data: { i, kl: (s - t).toFixed(4) },
      title: `student ${GRL.fmt(s)} · teacher ${GRL.fmt(t)} · student − teacher ${GRL.signed(s - t)}`,
    }, text))),
    h("div", { class: "muted worst" }, "most off the teacher: ",
      worst.map(([d, text]) => h("code", {}, `${JSON.stringify(text)} ${GRL.signed(d, 2)}`))));
}

function stepPicker(app, steps, current, embedded, onPick) {
  const values = steps.map((s) => s[0]);
  const i = values.indexOf(current);
  const select = h("select", { id: "step-select", onchange: (e) => onPick(Number(e.target.value)) },
    steps.map(([step, n]) => h("option", { value: step, selected: step === current,
      disabled: embedded && !embedded.has(step) }, `step ${step} (${n})` + (embedded && !embedded.has(step) ? " — not in report" : ""))));
  const usable = values.filter((s) => !embedded || embedded.has(s));
  const move = (d) => {
    const j = usable.indexOf(current) + d;
    if (j >= 0 && j < usable.length) onPick(usable[j]);
  };
  return h("span", { class: "step-picker" },
    h("button", { onclick: () => move(-1), disabled: i <= 0 }, "‹"), select,
    h("button", { onclick: () => move(1), disabled: i < 0 || i >= values.length - 1 }, "›"));
}

function completionCard(app, g, e, k, step, hasTrajectories) {
  const parts = Object.entries(e.rewards || {});
  const reasons = Object.entries(e.reward_reasons || {}).filter(([, v]) => v);
  const errors = e.reward_errors || [];
  // an environment episode: the completion is its first action, the whole episode is a trajectory
  const env = e.episode_length > 1 || g.ground_truth === null || g.ground_truth === undefined;
  const toTrajectory = () => app.render({ view: "trajectories", tstep: step, episode: `g${g.group}-e${k}`, t: "" });
  return h("div", { class: "completion " + (e.correct ? "is-correct" : "is-wrong"), data: { k } },
    h("div", { class: "completion-head" },
      h("span", { class: "mono" }, `#${k}`),
      e.correct ? GRL.badge(env ? "succeeded" : "correct", "ok") : GRL.badge(env ? "failed" : "wrong", "bad"),
      e.truncated ? GRL.badge("truncated", "warn") : null,
      errors.length ? GRL.badge(`${errors.length} reward error${errors.length > 1 ? "s" : ""}`, "bad") : null,
      e.episode_length > 1 ? GRL.badge(`${e.episode_length} steps`, "") : null),
    h("div", { class: "numbers" },
      h("span", {}, "reward ", h("b", { class: "reward" }, GRL.fmt(e.reward))),
      h("span", {}, "advantage ", h("b", { class: "advantage " + GRL.signClass(e.advantage) }, GRL.signed(e.advantage)))),
    env ? h("div", { class: "muted" }, "first action ", hasTrajectories ?
      h("a", { href: "#", class: "to-trajectory", onclick: (ev) => { ev.preventDefault(); toTrajectory(); } },
        "whole trajectory →") : "(no trajectory file for this step)") : null,
    h("pre", { class: "text" }, e.completion ?? ""),
    e.prediction !== null && e.prediction !== undefined ? h("div", { class: "muted" }, "parsed answer: ", h("code", {}, String(e.prediction))) : null,
    parts.length ? h("table", { class: "kv parts" }, parts.map(([name, v]) => h("tr", {}, h("th", {}, name), h("td", {}, GRL.fmt(v))))) : null,
    reasons.length ? h("div", { class: "reasons" }, reasons.map(([name, why]) => h("div", {}, h("b", {}, name + ": "), String(why)))) : null,
    errors.length ? h("div", { class: "errors" }, errors.map((x) => h("div", {}, typeof x === "string" ? x : JSON.stringify(x)))) : null,
    e.distill_tokens && e.distill_tokens.length ? teacherTokens(e.distill_tokens) : null);
}

function groupDetail(app, g, step, hasTrajectories) {
  return h("section", { class: "card", id: "group-detail" },
    h("h2", {}, `step ${step} · group ${g.group} · prompt ${g.prompt_id ?? ""}`),
    h("div", { class: "group-facts" },
      h("span", {}, `K = ${g.episodes.length}`), h("span", {}, `mean reward ${GRL.fmt(g.mean)}`),
      h("span", {}, `std ${GRL.fmt(g.std)}`), h("span", {}, `${g.correct}/${g.episodes.length} correct`),
      g.zeroVar ? GRL.badge(g.kl === null ? "zero variance: every advantage is 0" :
        "zero reward variance: only the teacher's signal trains this group", "warn") : null,
      g.kl !== null ? h("span", {}, `KL to teacher ${GRL.fmt(g.kl)} per token; tokens shaded red where the ` +
        "student is surer of its token than the teacher, blue where less sure (hover for both log-probs)") : null),
    h("details", { open: true }, h("summary", {}, "prompt"), h("pre", { class: "text prompt" }, g.prompt ?? "")),
    g.ground_truth !== null && g.ground_truth !== undefined ? h("p", {}, "ground truth: ", h("code", {}, String(g.ground_truth))) : null,
    h("div", { class: "completions" }, g.episodes.map((e, k) => completionCard(app, g, e, k, step, hasTrajectories))));
}

GRL.views.groups = {
  title: "Groups",
  async render(app, el) {
    const st = app.state;
    const run = st.run;
    const known = await app.steps(run);
    const steps = known.rollout_steps || [];
    const embedded = app.source.embedded(run);
    const allowed = steps.filter(([s]) => !embedded || embedded.rollouts.has(s));
    if (!allowed.length) {
      GRL.fill(el, h("section", { class: "card" }, h("p", { class: "muted" },
        "no rollouts yet: rollouts/rollouts.jsonl gets one line per episode (log_rollouts: true)")));
      return;
    }
    let step = st.step !== undefined && st.step !== "" ? Number(st.step) : null;
    if (step === null || !allowed.some(([s]) => s === step)) step = allowed[allowed.length - 1][0];
    const records = await app.source.rollouts(run, step);
    const groups = GRL.summarizeGroups(records);
    const filter = FILTERS[st.filter_g] ? st.filter_g : "all";
    const q = (st.q || "").toLowerCase();
    const shown = groups.filter((g) => FILTERS[filter][1](g) && (!q || g.episodes.some((e) => GRL.rowMatches(e, q))));
    const pg = GRL.pager(shown.length, Number(st.page || 0), PAGE, (p) => app.render({ page: p }));
    const open = st.group !== undefined && st.group !== "" ? groups.find((g) => String(g.group) === String(st.group)) : null;

    const hits = h("div", { id: "search-hits" });
    const searchAll = async () => {
      const text = document.getElementById("group-search").value.trim();
      if (!text) return;
      GRL.fill(hits, h("p", { class: "muted" }, "searching…"));
      const ans = await app.source.search(run, text);
      GRL.fill(hits, h("h3", {}, `${ans.hits.length} group(s) contain “${text}”` + (ans.next_step !== null ? " (first ones)" : "")),
        GRL.table([
          { label: "step", num: true, fmt: (x) => x.step }, { label: "group", num: true, fmt: (x) => x.group },
          { label: "where", fmt: (x) => x.snippet },
        ], ans.hits, { onClick: (x) => app.render({ step: x.step, group: x.group, q: text, page: 0 }) }));
    };
    const controls = h("div", { class: "controls" },
      stepPicker(app, steps, step, embedded && embedded.rollouts, (s) => app.render({ step: s, group: "", page: 0 })),
      h("label", {}, "show ", h("select", { id: "group-filter", onchange: (e) => app.render({ filter_g: e.target.value, page: 0 }) },
        Object.entries(FILTERS).map(([k, [label]]) => h("option", { value: k, selected: k === filter }, label)))),
      h("input", { type: "search", id: "group-search", placeholder: "text in prompt / completion / reasons", value: st.q || "",
        onkeydown: (e) => { if (e.key === "Enter") app.render({ q: e.target.value, page: 0 }); } }),
      h("button", { onclick: () => app.render({ q: document.getElementById("group-search").value, page: 0 }) }, "filter this step"),
      h("button", { id: "search-all", onclick: searchAll }, app.source.live ? "search all steps" : "search the report's steps"));

    const list = GRL.table([
      { label: "group", num: true, fmt: (g) => g.group },
      { label: "prompt", fmt: (g) => GRL.plainPrompt(g.prompt).slice(-90) },
      { label: "truth", fmt: (g) => GRL.fmt(g.ground_truth) },
      { label: "K", num: true, fmt: (g) => g.episodes.length },
      { label: "mean reward", num: true, fmt: (g) => GRL.fmt(g.mean) },
      { label: "std", num: true, fmt: (g) => GRL.fmt(g.std) },
      { label: "correct", num: true, fmt: (g) => `${g.correct}/${g.episodes.length}` },
      { label: "errors", num: true, fmt: (g) => g.errors || "", cls: (g) => (g.errors ? "neg" : "") },
      { label: "truncated", num: true, fmt: (g) => g.truncated || "" },
      ...(groups.some((g) => g.kl !== null) ? [{ label: "KL to teacher", num: true, fmt: (g) => GRL.fmt(g.kl) }] : []),
    ], shown.slice(pg.start, pg.end), {
      class: "groups-list",
      onClick: (g) => app.render({ group: g.group }),
      rowClass: (g) => (open && g.group === open.group ? "selected" : g.zeroVar ? "dim" : ""),
      rowData: (g) => ({ group: g.group }),
    });
    app.setState({ filter_g: filter });
    GRL.fill(el, 
      h("section", { class: "card" }, controls, hits,
        h("p", { class: "muted" }, `step ${step}: ${records.length} episodes in ${groups.length} groups; ${shown.length} shown` +
          (q ? ` (containing “${st.q}”)` : "")), list, pg.el),
      open ? groupDetail(app, open, step, (known.trajectory_steps || []).includes(step) &&
        (!embedded || embedded.trajectories.has(step))) : h("p", { class: "muted" }, "click a group to see its completions side by side"));
    if (open && app.scrollToDetail) document.getElementById("group-detail").scrollIntoView({ block: "start" });
  },
  onData(app, el, what) {
    // follow the newest step only while the person has not picked one, and not while they type a
    // search or read its hits (a redraw would wipe both)
    const box = document.getElementById("group-search");
    const busy = box && (document.activeElement === box || box.value !== (app.state.q || "")) ||
      document.querySelector("#search-hits > *");
    if (what.steps && !busy && (app.state.step === undefined || app.state.step === "") && !app.state.group) return this.render(app, el);
  },
};
})();
