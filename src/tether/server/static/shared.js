// The inspector's pages of schedules and boards (the helpers come from inspector.js as
// `ui`, so that both files build the page the same way: text only, never HTML).

const enc = encodeURIComponent;

// -- schedules -------------------------------------------------------------------------

const timing = (w) => (w.startsWith("every:") ? `every ${w.slice(6)} s` : `cron ${w.slice(5)} (UTC)`);

export async function schedulesPage(ui) {
  const { api, h, show, fail, when, may, needs, view } = ui;
  const out = h("div", { id: "schedule-out" });
  show(h("h1", {}, "Schedules"), h("p", { class: "muted" }, "Each tick of a schedule starts one run of its agent in its queue; the workers of that queue fire them."), out);
  let rows;
  try {
    rows = await api("schedules");
  } catch (e) {
    view.append(fail(e));
    return;
  }
  const act = (s, path, method) => async () => {
    try {
      const done = await api(`schedules/${enc(s.name)}${path}`, { method });
      const what = method === "DELETE" ? "deleted" : path === "/pause" ? "paused" : "resumed";
      await schedulesPage(ui);
      document.getElementById("schedule-out").replaceChildren(h("p", { class: "s-completed", role: "status" }, `Schedule ${s.name} ${done.changed ? what : "was so already"}.`));
    } catch (e) {
      out.replaceChildren(fail(e));
    }
  };
  const admin = may("admin");
  const row = (s) =>
    h("tr", { "data-schedule": s.name },
      h("td", {}, h("code", {}, s.name)), h("td", {}, s.agent), h("td", {}, timing(s.when)), h("td", {}, s.queue),
      h("td", {}, h("span", { class: `badge ${s.paused ? "s-waiting" : "s-completed"}` }, s.paused ? "paused" : "active")),
      h("td", {}, s.paused ? "" : when(s.next_at)), h("td", {}, when(s.last_tick)),
      h("td", {}, s.paused
        ? h("button", { class: "secondary", disabled: !admin, onclick: act(s, "/resume", "POST") }, "Resume")
        : h("button", { class: "secondary", disabled: !admin, onclick: act(s, "/pause", "POST") }, "Pause"),
        " ", h("button", { class: "danger", disabled: !admin, onclick: act(s, "", "DELETE") }, "Delete")));
  const head = ["schedule", "agent", "when", "queue", "state", "next tick", "last tick", ""];
  view.append(h("table", { id: "schedules" }, h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.length ? rows.map(row) : h("tr", {}, h("td", { colspan: head.length, class: "muted" }, "No schedules."))),
  ), rows.length ? needs("admin") : null);
}

// -- boards ----------------------------------------------------------------------------

const boardHash = (name, tenant) => `#/boards/${enc(name)}` + (tenant ? `?tenant=${enc(tenant)}` : "");

export async function boardsPage(ui) {
  const { api, h, show, fail, when, go, view } = ui;
  show(h("h1", {}, "Boards"), h("p", { class: "muted" }, "Keyed, versioned state that runs share: each change is kept with its run and step."));
  let rows;
  try {
    rows = await api("boards");
  } catch (e) {
    view.append(fail(e));
    return;
  }
  const row = (b) =>
    h("tr", { class: "clickable", "data-board": b.board, "data-tenant": b.tenant || "", onclick: () => go(boardHash(b.board, b.tenant)) },
      h("td", {}, h("a", { href: boardHash(b.board, b.tenant) }, b.board)), h("td", {}, b.tenant || ""), h("td", {}, b.keys), h("td", {}, when(b.updated_at)));
  view.append(h("table", { id: "boards" }, h("thead", {}, h("tr", {}, ["board", "tenant", "keys", "last change"].map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.length ? rows.map(row) : h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No boards.")))));
}

const who = (ui, e) => [e.run_id ? ui.h("span", {}, ui.runLink(e.run_id), ` step ${e.position ?? "?"}`) : null, e.by && e.run_id ? " · " : null, e.by || (e.run_id ? null : "—")];
const shown = (e) => (e.deleted ? "(deleted)" : JSON.stringify(e.value));

export async function boardPage(ui, name, params) {
  const { api, h, show, fail, when, json, may, needs, query, view } = ui;
  const tenant = params.get("tenant") || "";
  const q = query({ tenant });
  const base = `boards/${enc(name)}/keys/`;
  let page;
  try {
    page = await api(`boards/${enc(name)}` + q);
  } catch (e) {
    show(h("h1", {}, "Board ", h("code", {}, name)), fail(e));
    return;
  }
  const detail = h("div", { class: "card", id: "key-history" }, h("p", { class: "muted" }, "Pick a key to see its every change."));
  const body = h("tbody");
  const key = h("input", { name: "key", size: 20, required: true });
  const value = h("textarea", { name: "value", placeholder: '"alice" or {"n": 1}' });
  const expected = h("input", { name: "expected_version", size: 6, placeholder: "any" });
  const out = h("div");
  const pick = async (k) => {
    body.querySelectorAll("tr.selected").forEach((r) => r.classList.remove("selected"));
    body.querySelector(`tr[data-key="${CSS.escape(k)}"]`)?.classList.add("selected");
    key.value = k;
    try {
      const hist = await api(`${base}${enc(k)}/history` + q + (q ? "&" : "?") + "limit=1000");
      const last = hist.changes[hist.changes.length - 1];
      expected.value = last ? String(last.version) : "0";
      value.value = last && !last.deleted ? JSON.stringify(last.value) : "";
      detail.replaceChildren(h("h2", {}, `History of ${k}`),
        h("table", { id: "history" }, h("thead", {}, h("tr", {}, ["version", "value", "by (run, step or name)", "at"].map((c) => h("th", {}, c)))),
          h("tbody", {}, hist.changes.map((e) => h("tr", { "data-version": e.version }, h("td", {}, e.version), h("td", {}, h("code", {}, shown(e))), h("td", {}, who(ui, e)), h("td", {}, when(e.at)))))));
    } catch (e) {
      detail.replaceChildren(fail(e));
    }
  };
  const row = (e) =>
    h("tr", { class: "clickable", "data-key": e.key, onclick: () => pick(e.key) },
      h("td", {}, h("code", {}, e.key)), h("td", {}, e.version), h("td", {}, h("code", {}, shown(e))), h("td", {}, who(ui, e)), h("td", {}, when(e.at)));
  body.append(...page.keys.map(row));
  if (!page.keys.length) body.append(h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No key holds a value.")));
  const set = h("form", { class: "card", id: "set-key", onsubmit: async (ev) => {
    ev.preventDefault();
    let parsed;
    try {
      parsed = JSON.parse(value.value);
    } catch (e) {
      out.replaceChildren(fail(new Error(`the value is not JSON: ${e.message}`)));
      return;
    }
    const body = { value: parsed };
    if (expected.value.trim()) body.expected_version = Number(expected.value.trim());
    try {
      const done = await api(base + enc(key.value.trim()) + q, { method: "PUT", body });
      await boardPage(ui, name, params);
      document.getElementById("set-out").replaceChildren(h("p", { class: "s-completed", role: "status" }, `Set ${done.key} to version ${done.version}.`));
      await pickAgain(done.key);
    } catch (e) {
      out.replaceChildren(fail(e.status === 409 ? new Error(`${e.message} (the key is at version ${e.extra.version})`) : e));
    }
  } }, h("h2", {}, "Set a key"),
    h("p", { class: "muted" }, "With an expected version, the value is written only if the key is still at it (0: never written); else nothing is written and the current version is shown."),
    h("label", {}, "key", key), h("label", {}, "value (JSON)", value), h("label", {}, "expected version", expected),
    h("p", {}, h("button", { type: "submit", disabled: !may("operator") }, "Set")), needs("operator"), h("div", { id: "set-out" }), out);
  const pickAgain = async (k) => {
    const again = document.querySelector(`#board-keys tr[data-key="${CSS.escape(k)}"]`);
    if (again) again.click();
  };
  show(h("h1", {}, "Board ", h("code", {}, name), page.tenant ? h("span", { class: "muted" }, ` · tenant ${page.tenant}`) : null),
    h("div", { class: "split" },
      h("div", {}, h("table", { id: "board-keys" }, h("thead", {}, h("tr", {}, ["key", "version", "value", "by (run, step or name)", "last change"].map((c) => h("th", {}, c)))), body)),
      h("div", {}, detail, set)));
  if (params.get("key")) await pick(params.get("key"));
}
