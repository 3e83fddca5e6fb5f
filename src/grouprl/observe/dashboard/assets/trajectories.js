"use strict";
(() => {
// Trajectories: an episode step by step (observation, action, rewards, return, A_E, A_S, A) and,
// for any step, the other members of its GiGPO anchor group (steps of the same group's episodes
// that met the same state) side by side.
const { h } = GRL;
const PAGE = 25;

function episodesOf(rows) {
  const eps = new Map();
  for (const r of rows) {
    if (!eps.has(r.episode)) eps.set(r.episode, []);
    eps.get(r.episode).push(r);
  }
  return [...eps.entries()].map(([id, steps]) => {
    steps.sort((a, b) => a.t - b.t);
    const first = steps[0];
    return { id, steps, group: first.group, seed: first.seed, score: first.episode_score, success: !!first.success,
      A_E: first.episode_advantage, invalid: steps.filter((s) => !s.valid).length };
  });
}

// A conversation episode (tool calls): each assistant turn (generated, trained), the call the parser read,
// the tool messages that answered it (read by the model, masked from the loss), the turn's reward and advantages.
function conversationTable(app, ep, selectedT) {
  const calls = (s) => (s.tool_calls || []).map((c) => h("code", { class: "tool-call" }, `${c.name}(${JSON.stringify(c.arguments)})`));
  const results = (s) => (s.tool_results || []).map((r) => h("div", { class: "tool-result" },
    r.error ? GRL.badge(r.error, "bad") : null, h("pre", { class: "obs small" }, r.content ?? "")));
  return GRL.table([
    { label: "t", num: true, fmt: (s) => s.t },
    { label: "assistant turn (trained)", fmt: (s) => [h("pre", { class: "obs generated" }, s.action ?? ""),
      h("div", { class: "muted" }, `${s.generated_tokens ?? "?"} generated tokens`)] },
    { label: "tool call", fmt: (s) => calls(s) },
    { label: "tool result (masked)", fmt: (s) => (s.tool_results && s.tool_results.length ? [results(s),
      h("div", { class: "muted" }, `${s.masked_tokens_after ?? 0} masked tokens`)] : "") },
    { label: "valid", fmt: (s) => (s.valid ? "yes" : [GRL.badge("no", "bad"),
      s.invalid_reason ? h("div", { class: "muted invalid-reason" }, s.invalid_reason) : null]) },
    { label: "r_t", num: true, fmt: (s) => GRL.signed(s.base_reward, 2) },
    { label: "A_E", num: true, fmt: (s) => GRL.signed(s.episode_advantage), cls: (s) => GRL.signClass(s.episode_advantage) },
    { label: "A_S", num: true, fmt: (s) => GRL.signed(s.step_advantage), cls: (s) => GRL.signClass(s.step_advantage) },
    { label: "A", num: true, fmt: (s) => GRL.signed(s.advantage), cls: (s) => "strong " + GRL.signClass(s.advantage) },
    { label: "anchor state (size)", fmt: (s) => [h("code", {}, s.anchor_state ?? ""), ` (${s.anchor_group_size})`] },
  ], ep.steps, {
    class: "traj-steps conversation",
    onClick: (s) => app.render({ t: s.t }),
    rowClass: (s) => (String(s.t) === String(selectedT) ? "selected" : ""),
    rowData: (s) => ({ t: s.t }),
  });
}

function stepsTable(app, ep, selectedT) {
  if (ep.steps[0] && ep.steps[0].tool_results !== undefined) return conversationTable(app, ep, selectedT);
  return GRL.table([
    { label: "t", num: true, fmt: (s) => s.t },
    { label: "observation", fmt: (s) => h("pre", { class: "obs" }, s.observation ?? "") },
    { label: "action", fmt: (s) => h("code", {}, s.action ?? "") },
    { label: "valid", fmt: (s) => (s.valid ? "yes" : [GRL.badge("no", "bad"),
      s.invalid_reason ? h("div", { class: "muted invalid-reason" }, s.invalid_reason) : null]) },
    { label: "env reward", num: true, fmt: (s) => GRL.signed(s.env_reward, 2) },
    { label: "penalty", num: true, fmt: (s) => (s.penalty ? GRL.fmt(-s.penalty, 2) : "0") },
    { label: "r_t", num: true, fmt: (s) => GRL.signed(s.base_reward, 2) },
    { label: "return R_t", num: true, fmt: (s) => GRL.signed(s.return) },
    { label: "A_E", num: true, fmt: (s) => GRL.signed(s.episode_advantage), cls: (s) => GRL.signClass(s.episode_advantage) },
    { label: "A_S", num: true, fmt: (s) => GRL.signed(s.step_advantage), cls: (s) => GRL.signClass(s.step_advantage) },
    { label: "A", num: true, fmt: (s) => GRL.signed(s.advantage), cls: (s) => "strong " + GRL.signClass(s.advantage) },
    { label: "anchor (size)", num: true, fmt: (s) => `${s.anchor_group} (${s.anchor_group_size})` },
  ], ep.steps, {
    class: "traj-steps",
    onClick: (s) => app.render({ t: s.t }),
    rowClass: (s) => (String(s.t) === String(selectedT) ? "selected" : ""),
    rowData: (s) => ({ t: s.t }),
  });
}

function anchorPanel(rows, chosen) {
  const members = rows.filter((r) => r.anchor_group === chosen.anchor_group && r.group === chosen.group)
    .sort((a, b) => String(a.episode).localeCompare(String(b.episode), undefined, { numeric: true }) || a.t - b.t);
  const returns = members.map((m) => m.return);
  return h("section", { class: "card", id: "anchor-group" },
    h("h2", {}, `anchor group ${chosen.anchor_group}: ${members.length} steps that met this state`),
    h("p", { class: "muted" }, "A_S = R_t − mean of the anchor group's returns ",
      `(mean ${GRL.fmt(GRL.mean(returns))}). The shared state:`),
    h("pre", { class: "obs" }, chosen.observation ?? ""),
    h("div", { class: "completions anchors" }, members.map((m) =>
      h("div", { class: "completion " + (m === chosen ? "chosen" : ""), data: { episode: m.episode, t: m.t } },
        h("div", { class: "completion-head" }, h("b", {}, `${m.episode} · t=${m.t}`), m.valid ? null : GRL.badge("invalid", "bad"),
          m.success ? GRL.badge("episode succeeded", "ok") : null),
        h("div", {}, "action ", h("code", {}, m.action ?? "")),
        m.observation !== chosen.observation ? h("pre", { class: "obs small" }, m.observation ?? "") : null,
        GRL.kvTable({ "r_t": m.base_reward, "return R_t": m.return, "A_E": m.episode_advantage, "A_S": m.step_advantage, "A": m.advantage })))));
}

GRL.views.trajectories = {
  title: "Trajectories",
  async render(app, el) {
    const st = app.state;
    const run = st.run;
    const all = (await app.steps(run)).trajectory_steps || [];
    const embedded = app.source.embedded(run);
    const steps = all.filter((s) => !embedded || embedded.trajectories.has(s));
    if (!steps.length) {
      GRL.fill(el, h("section", { class: "card" }, h("p", { class: "muted" },
        "no trajectory files yet: trajectories/step_N.jsonl is written every save_trajectories_every steps")));
      return;
    }
    let step = st.tstep !== undefined && st.tstep !== "" ? Number(st.tstep) : steps[steps.length - 1];
    if (!steps.includes(step)) step = steps[steps.length - 1];
    const rows = await app.source.trajectories(run, step);
    const episodes = episodesOf(rows);
    const which = st.outcome || "all";
    const shown = episodes.filter((e) => which === "all" || (which === "success") === e.success);
    const pg = GRL.pager(shown.length, Number(st.epage || 0), PAGE, (p) => app.render({ epage: p }));
    const open = st.episode ? episodes.find((e) => String(e.id) === st.episode) : null;
    const chosen = open && st.t !== undefined && st.t !== "" ? open.steps.find((s) => String(s.t) === String(st.t)) : null;

    const controls = h("div", { class: "controls" },
      h("label", {}, "training step ", h("select", { id: "traj-step", onchange: (e) => app.render({ tstep: e.target.value, episode: "", t: "", epage: 0 }) },
        all.map((s) => h("option", { value: s, selected: s === step, disabled: embedded && !embedded.trajectories.has(s) },
          `step ${s}` + (embedded && !embedded.trajectories.has(s) ? " — not in report" : ""))))),
      h("label", {}, "episodes ", h("select", { id: "traj-outcome", onchange: (e) => app.render({ outcome: e.target.value, epage: 0 }) },
        [["all", "all"], ["success", "succeeded"], ["fail", "failed"]].map(([k, label]) => h("option", { value: k, selected: k === which }, label)))),
      h("span", { class: "muted" }, `${episodes.length} episodes, ${rows.length} steps, ${new Set(rows.map((r) => r.anchor_group)).size} anchor groups`));
    const list = GRL.table([
      { label: "episode", fmt: (e) => e.id }, { label: "group", num: true, fmt: (e) => e.group },
      { label: "seed", num: true, fmt: (e) => GRL.fmt(e.seed) }, { label: "steps", num: true, fmt: (e) => e.steps.length },
      { label: "invalid", num: true, fmt: (e) => e.invalid || "" }, { label: "score", num: true, fmt: (e) => GRL.signed(e.score) },
      { label: "success", fmt: (e) => (e.success ? GRL.badge("yes", "ok") : "no") },
      { label: "A_E", num: true, fmt: (e) => GRL.signed(e.A_E), cls: (e) => GRL.signClass(e.A_E) },
    ], shown.slice(pg.start, pg.end), {
      class: "episodes-list",
      onClick: (e) => app.render({ episode: e.id, t: "" }),
      rowClass: (e) => (open && e.id === open.id ? "selected" : ""),
      rowData: (e) => ({ episode: e.id }),
    });
    GRL.fill(el, 
      h("section", { class: "card" }, controls, list, pg.el),
      open ? h("section", { class: "card", id: "episode-detail" },
        h("h2", {}, `episode ${open.id} · group ${open.group} · seed ${GRL.fmt(open.seed)} · score ${GRL.signed(open.score)}`, " ",
          open.success ? GRL.badge("success", "ok") : GRL.badge("failed", "bad")),
        open.steps[0].end_reason ? h("p", { class: "muted" }, `conversation: ended on ${open.steps[0].end_reason}; `
          + `the first prompt's ${open.steps[0].masked_prompt_tokens} tokens and every tool result are masked from the loss`) : null,
        h("p", { class: "muted" }, "click a step to see the other steps of its anchor group"),
        stepsTable(app, open, st.t)) : h("p", { class: "muted" }, "click an episode to see its steps"),
      chosen ? anchorPanel(rows, chosen) : null);
    if (app.scrollToDetail) {
      const target = document.getElementById(chosen ? "anchor-group" : "episode-detail");
      if (target) target.scrollIntoView({ block: "start" });
    }
  },
  onData(app, el, what) {
    if (what.steps && (app.state.tstep === undefined || app.state.tstep === "") && !app.state.episode) return this.render(app, el);
  },
};
})();
