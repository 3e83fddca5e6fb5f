"use strict";
// Small DOM helpers. Every piece of run data goes in as a text node, never as HTML: completions
// are written by the policy under training and may contain anything, markup included.
const GRL = (window.GRL = window.GRL || {});

GRL.h = function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "data") for (const [k, v] of Object.entries(value)) el.dataset[k] = v;
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
};

GRL.clear = function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
};

GRL.fmt = function fmt(x, digits = 3) {
  if (x === null || x === undefined) return "—";
  if (typeof x === "boolean") return x ? "yes" : "no";
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return x.toExponential(2);
  return x.toFixed(digits);
};

GRL.signed = function signed(x, digits = 3) {
  if (x === null || x === undefined) return "—";
  return (x > 0 ? "+" : "") + GRL.fmt(x, digits);
};

GRL.signClass = (x) => (x > 1e-9 ? "pos" : x < -1e-9 ? "neg" : "zero");

GRL.badge = (text, kind) => GRL.h("span", { class: "badge " + (kind || "") }, text);

// The chat template's markers (<|im_start|>user ...) make prompts hard to read in a list.
GRL.plainPrompt = (text) =>
  String(text || "").replace(/<\|[^|<>]{1,40}\|>(system|user|assistant)?\n?/g, " ").replace(/\s+/g, " ").trim();

GRL.mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
GRL.std = (xs) => {
  if (xs.length < 2) return 0;
  const m = GRL.mean(xs);
  return Math.sqrt(xs.reduce((a, b) => a + (b - m) * (b - m), 0) / (xs.length - 1));
};

// A table from column specs: {key, label, fmt(row) -> text|Node, cls(row) -> class}.
GRL.table = function table(columns, rows, opts = {}) {
  const head = GRL.h("tr", {}, columns.map((c) => GRL.h("th", { class: c.num ? "num" : "" }, c.label)));
  const body = rows.map((row, i) =>
    GRL.h(
      "tr",
      {
        class: [opts.rowClass ? opts.rowClass(row) : "", opts.onClick ? "clickable" : ""].join(" "),
        onclick: opts.onClick ? () => opts.onClick(row, i) : null,
        data: opts.rowData ? opts.rowData(row) : null,
      },
      columns.map((c) => {
        const value = c.fmt ? c.fmt(row) : GRL.fmt(row[c.key]);
        return GRL.h("td", { class: [c.num ? "num" : "", c.cls ? c.cls(row) : ""].join(" ") }, value);
      })
    )
  );
  return GRL.h("table", { class: "grid " + (opts.class || "") }, GRL.h("thead", {}, head), GRL.h("tbody", {}, body));
};

// A key/value table of a flat object.
GRL.kvTable = (obj, cls) =>
  GRL.h("table", { class: "kv " + (cls || "") },
    Object.entries(obj || {}).map(([k, v]) =>
      GRL.h("tr", {}, GRL.h("th", {}, k),
        GRL.h("td", {}, v !== null && typeof v === "object" ? JSON.stringify(v) : GRL.fmt(v)))));

// Page through a list: returns {el, items} for the current page and calls onPage(newPage).
GRL.pager = function pager(total, page, size, onPage) {
  const pages = Math.max(1, Math.ceil(total / size));
  const p = Math.min(Math.max(page, 0), pages - 1);
  const el = GRL.h("div", { class: "pager" },
    GRL.h("button", { disabled: p === 0, onclick: () => onPage(p - 1) }, "‹ prev"),
    GRL.h("span", { class: "muted" }, ` page ${p + 1} of ${pages} (${total}) `),
    GRL.h("button", { disabled: p >= pages - 1, onclick: () => onPage(p + 1) }, "next ›"));
  return { el, start: p * size, end: Math.min(total, (p + 1) * size), page: p };
};

GRL.debounce = function debounce(fn, ms) {
  let t = null;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
};

// Replace an element's children (null/false children are skipped, as in GRL.h).
GRL.fill = function fill(el, ...children) {
  GRL.clear(el);
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
};
