// The tether inspector: a page of plain JavaScript over the HTTP API (no build step).
// Every value from the server is put in the page as text (textContent), never as HTML.
// URLs are relative, so the inspector works wherever the app is mounted.

import { boardPage, boardsPage, schedulesPage } from "./shared.js";

const view = document.getElementById("view");
const CSRF = "tether.csrf";
let live = null; // the EventSource of the current page, closed when the page changes
let current = null; // who is logged in (GET /api/me): what the page offers to do
const RANKS = { viewer: 1, approver: 2, operator: 3, admin: 4 };
const may = (role) => current !== null && (RANKS[current.role] || 0) >= RANKS[role];
const needs = (role) => (may(role) ? null : h("p", { class: "muted", role: "note" }, `your role (${current ? current.role : "none"}) may not do this: it needs ${role} or higher`));

// -- the API -------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, type, message, extra = {}) {
    super(message);
    this.status = status;
    this.type = type;
    this.extra = extra; // the error's other fields (a board conflict's version)
  }
}

async function api(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") headers["X-CSRF-Token"] = sessionStorage.getItem(CSRF) || "";
  const answer = await fetch("api/" + path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (answer.status === 204) return null;
  const data = await answer.json().catch(() => ({}));
  if (!answer.ok) {
    const e = data.error || {};
    if (answer.status === 401 && path !== "login") go("#/login");
    throw new ApiError(answer.status, e.type || "HTTPError", e.message || answer.statusText, e);
  }
  return data;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? "?" + s : "";
}

// -- building the page ---------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const json = (v) => h("pre", { class: "mono" }, JSON.stringify(v, null, 2));
const badge = (s) => h("span", { class: `badge s-${s}`, "data-status": s }, s);
const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "");
const secs = (d) => (d === null || d === undefined ? "" : d < 0.001 ? "< 1 ms" : d < 1 ? `${Math.round(d * 1000)} ms` : `${d.toFixed(2)} s`);
const usageText = (u) =>
  u ? `${u.input_tokens || 0} in / ${u.output_tokens || 0} out tokens · ${u.calls || 0} calls · $${Number(u.cost || 0).toFixed(4)}` : "";
const runLink = (id) => h("a", { href: `#/runs/${encodeURIComponent(id)}` }, id);
const fail = (e) => h("div", { class: "error", role: "alert" }, e.message || String(e));

function show(...nodes) {
  view.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
}

function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function stream(path, handlers) {
  if (live) live.close();
  live = new EventSource("api/" + path, { withCredentials: true });
  for (const [name, fn] of Object.entries(handlers)) {
    live.addEventListener(name, (m) => fn(JSON.parse(m.data)));
  }
}

// -- the pages -----------------------------------------------------------------------

async function loginPage() {
  const token = h("input", { type: "password", name: "token", autocomplete: "off", required: true, size: 48 });
  const out = h("div");
  const form = h(
    "form",
    {
      class: "card login",
      onsubmit: async (ev) => {
        ev.preventDefault();
        try {
          const me = await api("login", { method: "POST", body: { token: token.value.trim() } });
          sessionStorage.setItem(CSRF, me.csrf_token || "");
          go("#/runs");
        } catch (e) {
          out.replaceChildren(fail(e));
        }
      },
    },
    h("h1", {}, "Log in to tether"),
    h("label", {}, "API token (tether token create NAME --role viewer)", token),
    h("p", {}, h("button", { type: "submit" }, "Log in")),
    out,
  );
  show(form);
  token.focus();
}

const STATUSES = ["", "queued", "running", "waiting", "blocked", "completed", "failed", "cancelled"];

async function runsPage(params) {
  const f = Object.fromEntries(params);
  const field = (name, label) => h("label", {}, label, h("input", { name, value: f[name] || "", size: 14 }));
  const status = h("select", { name: "status" }, STATUSES.map((s) => h("option", { value: s, selected: f.status === s }, s || "any")));
  const form = h(
    "form",
    {
      class: "filters",
      onsubmit: (ev) => {
        ev.preventDefault();
        const data = Object.fromEntries(new FormData(form));
        go("#/runs" + query(data));
      },
    },
    h("label", {}, "status", status),
    field("agent", "agent"),
    field("queue", "queue"),
    field("session", "session"),
    field("text", "id or agent starts with"),
    h("button", { type: "submit" }, "Filter"),
  );
  const body = h("tbody");
  const table = h("table", { id: "runs" }, h("thead", {}, h("tr", {}, ["run", "agent", "status", "queue", "tenant", "waiting for", "updated"].map((c) => h("th", {}, c)))), body);
  const pager = h("div", { class: "pager" });
  show(h("h1", {}, "Runs"), form, table, pager);
  const row = (r) =>
    h("tr", { class: "clickable", "data-run": r.id, onclick: () => go(`#/runs/${encodeURIComponent(r.id)}`) },
      h("td", {}, runLink(r.id)), h("td", {}, r.agent), h("td", {}, badge(r.status)), h("td", {}, r.queue || ""),
      h("td", {}, r.tenant || ""), h("td", {}, r.waiting_for || ""), h("td", {}, when(r.updated_at)));
  try {
    const page = await api("runs" + query({ ...f, limit: 50 }));
    body.replaceChildren(...page.runs.map(row));
    if (!page.runs.length) body.append(h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No runs match.")));
    if (f.cursor) pager.append(h("a", { href: "#/runs" + query({ ...f, cursor: "" }) }, "← newest"));
    if (page.next_cursor) pager.append(h("a", { href: "#/runs" + query({ ...f, cursor: page.next_cursor }), id: "older" }, "older →"));
  } catch (e) {
    view.append(fail(e));
    return;
  }
  if (!f.cursor) {
    stream("live/runs" + query({ status: f.status, agent: f.agent }), {
      run: (r) => {
        const old = body.querySelector(`tr[data-run="${CSS.escape(r.id)}"]`);
        if (old) old.replaceWith(row(r));
        else if (!f.queue && !f.session && !f.text) body.prepend(row(r));
      },
    });
  }
}

// what a tool's contract said of the call (detail.contract: a verdict per stage judged)
function verdictNotes(s) {
  const c = s.detail && s.detail.contract;
  if (!c) return [];
  return ["args", "approval", "result"].filter((on) => c[on]).map((on) => {
    const v = c[on];
    const fired = (v.rules || []).filter((r) => r.outcome !== "pass")
      .map((r) => `${r.rule}${"value" in r ? ` (${JSON.stringify(r.value)})` : ""}`);
    const cls = v.verdict === "allow" ? "verdict muted" : v.verdict === "refuse" ? "verdict s-failed" : "verdict";
    return h("div", { class: cls }, `contract on ${on}: ${v.verdict}`, fired.length ? `: ${fired.join(", ")}` : "");
  });
}

// a revert of this step's effect (state.reverts: who undid it, and whether it finished)
function revertNote(r) {
  if (!r) return null;
  const by = (r.detail && r.detail.by) || "?";
  const done = r.status === "completed";
  return h("div", { class: done ? "reverted" : "reverted s-failed" }, done ? `reverted by ${by}` : `revert by ${by} ${r.status}`);
}

function stepRow(s, onpick, reverts = new Map()) {
  const usage = s.usage ? [s.usage.input_tokens, s.usage.output_tokens].filter((x) => x !== undefined).join(" / ") : "";
  const cost = s.usage && s.usage.cost ? `$${Number(s.usage.cost).toFixed(4)}` : "";
  const errs = (s.errors || []).map((e) => e.message || e.type || JSON.stringify(e));
  const reverted = reverts.get(s.position);
  return h("tr", { class: "clickable", "data-position": s.position, onclick: () => onpick(s) },
    h("td", {}, s.position), h("td", {}, h("code", {}, s.name || "")), h("td", {}, s.kind || ""),
    h("td", {}, badge(s.status), reverted && reverted.status === "completed" ? [" ", badge("reverted")] : null),
    h("td", {}, s.attempts || ""), h("td", {}, secs(s.duration)), h("td", {}, usage, cost ? h("div", { class: "muted" }, cost) : null),
    h("td", {}, s.why ? h("div", {}, "why: ", s.why) : null, errs.length ? h("div", { class: "s-failed" }, errs.join("; ")) : null,
      ...verdictNotes(s), revertNote(reverted)));
}

async function runPage(id) {
  const STEPS = 200;
  let data;
  try {
    data = await api(`runs/${encodeURIComponent(id)}?steps_limit=${STEPS}`);
  } catch (e) {
    show(h("h1", {}, "Run ", id), fail(e));
    return;
  }
  const { run, state, lineage } = data;
  const head = h("div", { class: "card grid kv", id: "run-head" },
    h("dl", {}, h("dt", {}, "status"), h("dd", {}, badge(run.status)), h("dt", {}, "agent"), h("dd", {}, run.agent, run.version ? ` (${run.version})` : "")),
    h("dl", {}, h("dt", {}, "queue"), h("dd", {}, run.queue || "—"), h("dt", {}, "tenant"), h("dd", {}, run.tenant || "—")),
    h("dl", {}, h("dt", {}, "created"), h("dd", {}, when(run.created_at)), h("dt", {}, "updated"), h("dd", {}, when(run.updated_at))),
    h("dl", {}, h("dt", {}, "position"), h("dd", {}, `${state.position} (${data.steps_total} steps)`), h("dt", {}, "usage"), h("dd", {}, usageText(state.usage))),
    lineage.parent_id ? h("dl", {}, h("dt", {}, "forked from"), h("dd", {}, runLink(lineage.parent_id), ` after position ${lineage.fork_position}`)) : null);
  const extra = [
    state.waiting ? h("div", { class: "card", id: "waiting" }, h("h2", {}, `Waiting for ${state.waiting.kind} ${state.waiting.name || ""}`), json(state.waiting.payload ?? state.waiting)) : null,
    budgetCard(id, state),
    state.failure ? h("div", { class: "card", id: "failure" }, h("h2", {}, "Failure"), json(state.failure)) : null,
    state.blocked ? h("div", { class: "card", id: "blocked" }, h("h2", {}, "Blocked: the code no longer matches the log"), json(state.blocked)) : null,
    run.status === "completed" ? h("div", { class: "card", id: "output" }, h("h2", {}, "Output"), json(state.output)) : null,
  ];
  const detail = h("div", { class: "card", id: "at-step" }, h("p", { class: "muted" }, "Pick a step to see the state there."));
  const body = h("tbody");
  const pick = async (s) => {
    body.querySelectorAll("tr.selected").forEach((r) => r.classList.remove("selected"));
    body.querySelector(`tr[data-position="${s.position}"]`)?.classList.add("selected");
    detail.replaceChildren(h("h2", {}, `Step ${s.position}: ${s.name}`), json(s));
    try {
      const at = await api(`runs/${encodeURIComponent(id)}/state` + query({ step: s.position, when: "after" }));
      const { vars, output, status } = at.state;
      detail.append(h("h2", {}, `State after step ${s.position} (seq ${at.seq})`), json({ status, vars, output }));
    } catch (e) {
      detail.append(fail(e));
    }
    forkStep.value = String(s.position);
  };
  const reverts = new Map((state.reverts || []).map((r) => [r.position, r]));
  body.append(...data.steps.map((s) => stepRow(s, pick, reverts)));
  const timeline = h("table", { id: "timeline" }, h("thead", {}, h("tr", {}, ["#", "step", "kind", "status", "attempts", "duration", "tokens in/out", "notes"].map((c) => h("th", {}, c)))), body);
  const pager = h("div", { class: "pager" });
  let loaded = data.steps.length;
  const more = h("button", { class: "secondary", onclick: async () => {
    const next = await api(`runs/${encodeURIComponent(id)}?steps_after=${loaded}&steps_limit=${STEPS}`);
    body.append(...next.steps.map((s) => stepRow(s, pick, reverts)));
    loaded += next.steps.length;
    if (loaded >= next.steps_total) more.remove();
  } }, "more steps");
  if (loaded < data.steps_total) pager.append(more);

  // fork
  const forkStep = h("input", { name: "step", size: 6, value: String(state.position > 1 ? state.position - 1 : 1) });
  const forkVars = h("textarea", { name: "vars", placeholder: '{"plan": "edited"}' });
  const forkInput = h("textarea", { name: "input", placeholder: JSON.stringify(state.input || {}) });
  const forkOut = h("div");
  const fork = h("form", { class: "card", id: "fork", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      const body = { step: /^\d+$/.test(forkStep.value) ? Number(forkStep.value) : forkStep.value, when: "after" };
      if (forkVars.value.trim()) body.vars = JSON.parse(forkVars.value);
      if (forkInput.value.trim()) body.input = JSON.parse(forkInput.value);
      const made = await api(`runs/${encodeURIComponent(id)}/fork`, { method: "POST", body });
      go(`#/runs/${encodeURIComponent(made.id)}`);
    } catch (e) {
      forkOut.replaceChildren(fail(e));
    }
  } }, h("h2", {}, "Fork"), h("p", { class: "muted" }, "A new run that keeps this one's steps up to the step given (their effects are not made again) and goes on from there."),
    h("label", {}, "after step (position or name)", forkStep), h("label", {}, "edited task variables (JSON, optional)", forkVars),
    h("label", {}, "edited input (JSON, optional; the run's is shown)", forkInput), h("p", {}, h("button", { type: "submit", disabled: !may("operator") }, "Fork")), needs("operator"), forkOut);

  // diff
  const other = h("input", { name: "other", size: 28, value: lineage.parent_id || "", placeholder: "another run, or RUN:step:N" });
  const diffOut = h("div", { id: "diff-out" });
  const diff = h("form", { class: "card", id: "diff", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      const d = await api("diff" + query({ a: other.value.trim(), b: id }));
      const rows = [
        ...d.removed.map((c) => ["−", "diff-del", c]),
        ...d.added.map((c) => ["+", "diff-add", c]),
        ...d.changed.map((c) => ["~", "", c]),
      ];
      diffOut.replaceChildren(h("p", {}, d.same ? "No difference." : `${rows.length} change(s) from ${d.a} to ${d.b}:`),
        ...rows.map(([mark, cls, c]) => h("div", { class: "mono " + cls }, `${mark} ${JSON.stringify(c)}`)));
    } catch (e) {
      diffOut.replaceChildren(fail(e));
    }
  } }, h("h2", {}, "Diff"), h("label", {}, "from", other), h("span", { class: "muted" }, ` to ${id}`), h("p", {}, h("button", { type: "submit" }, "Diff")), diffOut);

  show(h("h1", {}, "Run ", h("code", {}, id)), head, ...extra, h("h2", {}, "Timeline"),
    h("div", { class: "split" }, h("div", {}, timeline, pager), h("div", {}, detail, diff, fork)));
  stream(`runs/${encodeURIComponent(id)}/live?after=${state.seq}`, {
    "run-event": () => {
      clearTimeout(runPage.reload);
      runPage.reload = setTimeout(() => location.hash.startsWith(`#/runs/${encodeURIComponent(id)}`) && runPage(id), 300);
    },
  });
}

const LIMITS = ["steps", "model_calls", "tokens", "cost", "duration"];
const usedText = (u) => LIMITS.filter((k) => u && u[k] !== undefined).map((k) => `${k} ${k === "duration" ? secs(u[k]) : u[k]}`).join(" · ");

// A run's budget: its limits, what was raised, the limit it reached; while it waits on
// it, a form that raises it (POST runs/{id}/budget, operator) so that the run goes on.
function budgetCard(id, state) {
  const b = state.budget;
  if (!b) return null;
  const x = b.exceeded;
  const card = h("div", { class: "card", id: "budget" }, h("h2", {}, "Budget"),
    b.limits ? h("p", {}, "limits: ", h("code", {}, JSON.stringify(b.limits))) : null,
    Object.keys(b.added || {}).length ? h("p", {}, "raised by: ", h("code", {}, JSON.stringify(b.added))) : null,
    x ? h("p", { class: "s-waiting" }, `stopped before position ${x.position}: ${x.limit} reached its limit (${x.max}); used ${usedText(x.used)}`) : null);
  if (!state.waiting || state.waiting.kind !== "budget") return card;
  const limit = h("select", { name: "limit" }, LIMITS.map((k) => h("option", { value: k, selected: x && x.limit === k }, k)));
  const amount = h("input", { name: "amount", size: 8, required: true, placeholder: "10, 1.5, 10m" });
  const reason = h("input", { name: "reason", size: 30, placeholder: "reason (optional)" });
  const out = h("div");
  card.append(h("form", { id: "raise", onsubmit: async (ev) => {
    ev.preventDefault();
    const raw = amount.value.trim();
    const add = { [limit.value]: /^\d+(\.\d+)?$/.test(raw) ? Number(raw) : raw };
    try {
      const done = await api(`runs/${encodeURIComponent(id)}/budget`, { method: "POST", body: { add, reason: reason.value || null } });
      out.replaceChildren(h("p", { class: "s-completed", role: "status" }, `Raised: ${id} is ${done.status}.`));
    } catch (e) {
      out.replaceChildren(fail(e));
    }
  } }, h("label", {}, "raise", limit), h("label", {}, "by", amount), reason,
    h("button", { type: "submit", disabled: !may("operator") }, "Raise budget"), needs("operator"), out));
  return card;
}

async function inboxPage() {
  show(h("h1", {}, "Approvals, tool calls in doubt and budgets reached"));
  let page;
  try {
    page = await api("approvals?limit=100");
  } catch (e) {
    view.append(fail(e));
    return;
  }
  if (!page.items.length) view.append(h("p", { class: "muted", id: "inbox-empty" }, "Nothing waits for a person."));
  for (const item of page.items) view.append(inboxItem(item));
  stream("live/runs?status=waiting", { run: () => {} });
}

function inboxItem(item) {
  const out = h("div");
  const reason = h("input", { name: "reason", placeholder: "reason (optional)", size: 40 });
  const act = (path, body) => async () => {
    try {
      const done = await api(`runs/${encodeURIComponent(item.run_id)}/${path}`, { method: "POST", body });
      out.replaceChildren(h("p", { class: "s-completed", role: "status" }, `Done: ${item.run_id} is ${done.status}.`));
      card.querySelectorAll("button").forEach((b) => (b.disabled = true));
      refreshCount();
    } catch (e) {
      out.replaceChildren(fail(e));
    }
  };
  let actions;
  if (item.kind === "doubt") {
    const result = h("textarea", { name: "result", placeholder: "the call's result, as JSON (when it happened)" });
    const happened = async () => {
      let value = null;
      try {
        value = result.value.trim() ? JSON.parse(result.value) : null;
      } catch (e) {
        out.replaceChildren(fail(new Error(`the result is not JSON: ${e.message}`)));
        return;
      }
      await act("resolve", { happened: true, result: value })();
    };
    actions = h("div", { class: "actions" }, result,
      h("button", { onclick: happened }, "It happened"),
      h("button", { class: "secondary", onclick: act("resolve", { happened: false }) }, "It did not happen (retry)"));
  } else if (item.kind === "budget") {
    const amount = h("input", { name: "amount", size: 8, placeholder: "10, 1.5, 10m" });
    const raise = () => {
      const raw = amount.value.trim();
      return act("budget", { add: { [item.name]: /^\d+(\.\d+)?$/.test(raw) ? Number(raw) : raw }, reason: reason.value || null })();
    };
    actions = h("div", { class: "actions" }, h("label", {}, `raise ${item.name || ""} by`, amount), reason, h("button", { onclick: raise }, "Raise budget"));
  } else {
    const name = encodeURIComponent(item.name || "");
    actions = h("div", { class: "actions" }, reason,
      h("button", { onclick: () => act(`approvals/${name}`, { decision: "approve", reason: reason.value || null })() }, "Approve"),
      h("button", { class: "danger", onclick: () => act(`approvals/${name}`, { decision: "deny", reason: reason.value || null })() }, "Deny"));
  }
  const TITLES = { doubt: "Tool call in doubt: ", budget: "Budget reached: " };
  const title = item.kind in TITLES ? TITLES[item.kind] + (item.name || "") : `Approve “${item.name || ""}”`;
  const role = item.kind === "budget" ? "operator" : "approver";
  if (!may(role)) actions.querySelectorAll("button").forEach((b) => (b.disabled = true));
  const card = h("div", { class: "card inbox-item", "data-run": item.run_id },
    h("div", {}, h("strong", {}, title), " — run ", runLink(item.run_id),
      ` (${item.agent}${item.tenant ? ", tenant " + item.tenant : ""}, position ${item.position ?? "?"}), waiting since ${when(item.since)}`),
    item.problem ? h("div", { class: "error" }, item.problem) : null,
    h("h2", {}, { doubt: "The call (input, and why it is in doubt)", budget: "The limit, and what the run used" }[item.kind] || "What is asked"), json(item.payload ?? null),
    item.key ? h("p", { class: "muted" }, "idempotency key: ", h("code", {}, item.key)) : null,
    item.approvers ? h("p", { class: "muted" }, "approvers: ", item.approvers.join(", ")) : null,
    item.until ? h("p", { class: "muted" }, "decide before ", when(item.until)) : null, actions, needs(role), out);
  return card;
}

async function tablePage(title, path, columns) {
  show(h("h1", {}, title));
  try {
    const rows = await api(path);
    view.append(h("table", { id: path }, h("thead", {}, h("tr", {}, columns.map(([c]) => h("th", {}, c)))),
      h("tbody", {}, rows.length ? rows.map((r) => h("tr", {}, columns.map(([, f]) => h("td", {}, f(r))))) : h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, "None.")))));
  } catch (e) {
    view.append(fail(e));
  }
}

async function refreshCount() {
  try {
    const page = await api("approvals?limit=100");
    document.getElementById("inbox-count").textContent = page.items.length ? String(page.items.length) : "";
  } catch (e) {
    /* shown on the pages themselves */
  }
}

async function who() {
  const el = document.getElementById("who");
  try {
    const me = (current = await api("me"));
    el.replaceChildren(`${me.name} · ${me.role}${me.tenant ? " · " + me.tenant : ""}`,
      h("button", { class: "secondary", id: "logout", onclick: async () => {
        await api("logout", { method: "POST" }).catch(() => null);
        sessionStorage.removeItem(CSRF);
        go("#/login");
      } }, "Log out"));
    return true;
  } catch (e) {
    el.replaceChildren();
    return false;
  }
}

// -- routing -------------------------------------------------------------------------

async function route() {
  if (live) {
    live.close();
    live = null;
  }
  const [path, q] = (location.hash.slice(1) || "/runs").split("?");
  const parts = path.split("/").filter(Boolean);
  document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active", a.dataset.nav === parts[0]));
  if (parts[0] === "login") return loginPage();
  if (!(await who())) return;
  refreshCount();
  if (parts[0] === "runs" && parts[1]) return runPage(decodeURIComponent(parts[1]));
  if (parts[0] === "approvals") return inboxPage();
  const ui = { api, h, show, fail, json, when, may, needs, go, query, runLink, view };
  if (parts[0] === "schedules") return schedulesPage(ui);
  if (parts[0] === "boards" && parts[1]) return boardPage(ui, decodeURIComponent(parts[1]), new URLSearchParams(q || ""));
  if (parts[0] === "boards") return boardsPage(ui);
  if (parts[0] === "queues") return tablePage("Queues", "queues", [["queue", (r) => r.name], ["queued", (r) => (r.queued_at_least ? "≥ " : "") + r.queued], ["workers", (r) => r.workers.join(", ")]]);
  if (parts[0] === "workers") return tablePage("Workers", "workers", [["worker", (r) => r.id], ["host", (r) => r.host], ["pid", (r) => r.pid], ["queues", (r) => r.queues.join(", ")], ["concurrency", (r) => r.concurrency], ["heartbeat", (r) => `${r.heartbeat_age_s.toFixed(1)} s ago`], ["runs (leases)", (r) => r.runs.join(", ")]]);
  return runsPage(new URLSearchParams(q || ""));
}

window.addEventListener("hashchange", route);
route();
