// The sessions list: every session of this key, live, sortable and filterable.
"use strict";

(() => {
  const K = Kameleon;
  const POLL_MS = 2000;
  // Diagnostics read every draw: asked again for a session at most this often, and only
  // when its iterations changed.
  const DIAGNOSTICS_MS = 10000;

  const rows = new Map(); // id -> row model
  const diagnostics = new Map(); // id -> {at, iterations, rhat, ess}
  let sort = { key: "age", dir: 1 };
  const body = document.querySelector("#sessions tbody");
  const keys = K.keyForm(() => poller.now());

  async function allSessions() {
    const out = [];
    let cursor = null;
    for (let page = 0; page < 20; page++) {
      const query = cursor ? `?limit=1000&cursor=${encodeURIComponent(cursor)}` : "?limit=1000";
      const { body } = await K.get("/sessions" + query);
      out.push(...body.sessions);
      cursor = body.next;
      if (!cursor) break;
    }
    return out;
  }

  function model(summary, now) {
    const previous = rows.get(summary.id);
    const created = Date.parse(summary.created_at);
    const ageSeconds = (now - created) / 1000;
    let rate = ageSeconds > 0 ? summary.evaluations / ageSeconds : null;
    if (previous && now > previous.seen) {
      const delta = (summary.evaluations - previous.evaluations) / ((now - previous.seen) / 1000);
      // Smoothed over polls; a finished session shows 0.
      rate = previous.rate === null ? delta : 0.5 * previous.rate + 0.5 * delta;
      if (summary.evaluations === previous.evaluations && summary.status === "done") rate = 0;
    }
    const d = diagnostics.get(summary.id);
    const warnings = d && d.codes ? d.codes : (summary.warnings || []).map((w) => w.code);
    return {
      id: summary.id,
      algorithm: summary.algorithm,
      status: summary.status,
      shape: summary.chains * 1e6 + summary.dim,
      chains: summary.chains,
      dim: summary.dim,
      iterations: summary.iterations,
      evaluations: summary.evaluations,
      rate,
      rhat: d && d.codes ? d.rhat : null,
      ess: d && d.codes ? d.ess : null,
      warnings,
      warningsText: warnings.join(" "),
      age: ageSeconds,
      seen: now,
    };
  }

  // Diagnostics read every draw (a minute for 64 x 100 000): asked in the background,
  // a few sessions at a time, while the list goes on updating.
  const diagnosing = new Set();
  function refreshDiagnostics(list, now) {
    const due = list.filter((s) => {
      const d = diagnostics.get(s.id);
      return !diagnosing.has(s.id) && (!d || (d.iterations !== s.iterations && now - d.at > DIAGNOSTICS_MS));
    });
    for (const s of due.slice(0, Math.max(0, 4 - diagnosing.size))) {
      diagnosing.add(s.id);
      K.get(`/sessions/${encodeURIComponent(s.id)}/diagnostics`)
        .then(({ body }) => {
          const codes = body.warnings.map((w) => w.code);
          diagnostics.set(s.id, { at: Date.now(), iterations: s.iterations, codes, ...K.worst(body) });
          const row = rows.get(s.id);
          if (row) rows.set(s.id, { ...row, ...withDiagnostics(row, diagnostics.get(s.id)) });
          render();
        })
        .catch(() => {
          diagnostics.set(s.id, { ...(diagnostics.get(s.id) || { rhat: null, ess: null, codes: null }), at: Date.now(), iterations: -1 });
        })
        .finally(() => diagnosing.delete(s.id));
    }
  }

  function withDiagnostics(row, d) {
    if (!d || d.codes === null) return {};
    return { rhat: d.rhat, ess: d.ess, warnings: d.codes, warningsText: d.codes.join(" ") };
  }

  function matches(row, text, status) {
    if (status && row.status !== status) return false;
    if (!text) return true;
    const hay = `${row.id} ${row.algorithm} ${row.status} ${row.warningsText}`.toLowerCase();
    return text
      .toLowerCase()
      .split(/\s+/)
      .every((word) => hay.includes(word));
  }

  function compare(a, b) {
    const x = a[sort.key];
    const y = b[sort.key];
    if (x === y) return 0;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    if (Array.isArray(x)) return sort.dir * (x.length - y.length);
    return sort.dir * (x < y ? -1 : 1);
  }

  function render() {
    const text = document.getElementById("filter").value.trim();
    const status = document.getElementById("status-filter").value;
    const shown = [...rows.values()].filter((r) => matches(r, text, status)).sort(compare);
    body.replaceChildren(
      ...shown.map((r) => {
        const link = K.el("a", { href: `ui/sessions/${encodeURIComponent(r.id)}`, text: r.id });
        const warnings = K.el("td", { class: "warnings" });
        const counts = {};
        for (const code of r.warnings) counts[code] = (counts[code] || 0) + 1;
        for (const [code, n] of Object.entries(counts)) {
          warnings.append(K.el("span", { class: "badge warn", text: n > 1 ? `${code} ×${n}` : code }));
        }
        const rhatClass = r.rhat !== null && r.rhat > 1.01 ? "num bad" : "num";
        const essClass = r.ess !== null && r.ess < 100 * r.chains ? "num bad" : "num";
        const tr = K.el(
          "tr",
          { "data-session": r.id },
          K.el("td", { class: "id" }, link),
          K.el("td", { text: r.algorithm }),
          K.el("td", {}, K.el("span", { class: `badge status-${r.status}`, text: r.status })),
          K.el("td", { class: "num", text: `${r.chains} × ${r.dim}` }),
          K.el("td", { class: "num", text: K.int(r.iterations) }),
          K.el("td", { class: "num", text: r.rate === null ? "–" : K.int(r.rate) }),
          K.el("td", { class: rhatClass, text: K.rhat(r.rhat) }),
          K.el("td", { class: essClass, text: K.int(r.ess) }),
          warnings,
          K.el("td", { class: "num", text: K.age(r.age) }),
        );
        return tr;
      }),
    );
    document.getElementById("count").textContent = `${shown.length} of ${rows.size} sessions`;
    document.getElementById("empty").hidden = rows.size > 0;
    for (const th of document.querySelectorAll("#sessions th")) {
      th.classList.toggle("sorted", th.dataset.key === sort.key);
      th.dataset.dir = th.dataset.key === sort.key ? (sort.dir > 0 ? "▲" : "▼") : "";
    }
  }

  async function tick() {
    const error = document.getElementById("error");
    try {
      const list = await allSessions();
      const now = Date.now();
      const ids = new Set(list.map((s) => s.id));
      for (const id of rows.keys()) if (!ids.has(id)) rows.delete(id);
      for (const s of list) rows.set(s.id, model(s, now));
      render();
      refreshDiagnostics(list, now);
      error.hidden = true;
      keys.clear();
      K.status(`live · ${new Date(now).toLocaleTimeString()}`, true);
    } catch (e) {
      if (e instanceof K.AuthError) {
        keys.ask(e.message);
        K.status("needs an API key", false);
      } else {
        error.textContent = `Could not reach the service: ${e.message}`;
        error.hidden = false;
        K.status("offline", false);
      }
    }
  }

  for (const th of document.querySelectorAll("#sessions th")) {
    th.addEventListener("click", () => {
      const key = th.dataset.key;
      sort = { key, dir: sort.key === key ? -sort.dir : key === "age" ? 1 : -1 };
      render();
    });
  }
  document.getElementById("filter").addEventListener("input", render);
  document.getElementById("status-filter").addEventListener("change", render);
  const poller = K.poll(tick, POLL_MS);
})();
