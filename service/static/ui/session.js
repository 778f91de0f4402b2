// One session's page: facts, warnings, trace plots, running R-hat and ESS, acceptance,
// histograms, a pair plot and the diagnostics table, live.
"use strict";

(() => {
  const K = Kameleon;
  const POLL_MS = 1500;
  const DIAGNOSTICS_MS = 3000; // diagnostics read every draw: at most this often
  const MAX_PICKED = 4;
  const WARNINGS_SHOWN = 8;

  const sid = decodeURIComponent(location.pathname.replace(/\/+$/, "").split("/").pop());
  const base = `/sessions/${encodeURIComponent(sid)}`;
  document.getElementById("session-id").textContent = sid;
  document.title = `Kameleon · ${sid}`;

  let summary = null;
  let diagnostics = null;
  let diagnosedAt = 0;
  let diagnosedIterations = -1;
  let diagnosing = false;
  let trace = null;
  let traceTag = null;
  let traceQuery = "";
  let picked = null;
  let rate = null;
  let previous = null;
  const traces = new Map(); // parameter index -> Plots.Lines
  let rhatPlot = null;
  let essPlot = null;
  const keys = K.keyForm(() => poller.now());

  // ------------------------------------------------------------------ facts

  function fact(label, value, cls = "") {
    return K.el("div", { class: `fact ${cls}` }, K.el("span", { class: "label", text: label }), K.el("span", { class: "value", text: value }));
  }

  function renderFacts(s, now) {
    if (previous && now > previous.at) {
      const delta = (s.evaluations - previous.evaluations) / ((now - previous.at) / 1000);
      rate = rate === null ? delta : 0.5 * rate + 0.5 * delta;
    }
    previous = { evaluations: s.evaluations, at: now };
    const perChain = s.chain_summaries.map((c) => c.iterations);
    const lo = Math.min(...perChain);
    const hi = Math.max(...perChain);
    const age = (now - Date.parse(s.created_at)) / 1000;
    const stop = s.stop ? `R-hat < ${s.stop.rhat}, ESS > ${s.stop.ess}` : "none";
    document.getElementById("facts").replaceChildren(
      K.el("div", { class: "fact" }, K.el("span", { class: "label", text: "status" }), K.el("span", { class: `badge status-${s.status}`, text: s.status })),
      fact("algorithm", s.algorithm),
      fact("chains × dim", `${s.chains} × ${s.dim}`),
      fact("iterations per chain", lo === hi ? K.int(lo) : `${K.int(lo)}–${K.int(hi)}`),
      fact("warm-up", K.int(s.warmup)),
      fact("max iterations", s.max_iterations === null ? "–" : K.int(s.max_iterations)),
      fact("evaluations", K.int(s.evaluations)),
      fact("evals/s", rate === null ? K.int(age > 0 ? s.evaluations / age : null) : K.int(rate)),
      fact("acceptance", K.num(s.acceptance_rate, 3)),
      fact("stopping rule", stop),
      fact("stopped by", s.stopped_by || "–"),
      fact("age", K.age(age)),
    );
    document.getElementById("options").textContent = JSON.stringify(
      { options: s.options, seed: s.seed, pseudo_marginal: s.pseudo_marginal, initial_radius: s.initial_radius },
      null,
      2,
    );
  }

  // ------------------------------------------------------------ parameters

  function buildPicker(s) {
    const box = document.getElementById("param-picker");
    box.replaceChildren(
      ...s.param_names.map((name, i) => {
        const input = K.el("input", { type: "checkbox", value: String(i) });
        input.checked = picked.includes(i);
        input.addEventListener("change", () => {
          const chosen = [...box.querySelectorAll("input:checked")].map((x) => Number(x.value));
          picked = chosen.length ? chosen : [0];
          poller.now();
        });
        return K.el("label", { class: "pick" }, input, ` ${name}`);
      }),
    );
  }

  function points(chains) {
    const width = document.getElementById("traces").clientWidth || 800;
    return Math.max(50, Math.min(1000, Math.round(width), Math.floor(100000 / chains)));
  }

  // ---------------------------------------------------------------- traces

  function chainColumns(t, k) {
    // x: the longest chain's iterations (every chain shares the stride and the start);
    // one column per chain, padded with nulls.
    const longest = t.chains.reduce((a, c) => (c.iterations.length > a.length ? c.iterations : a), []);
    const ys = t.chains.map((c) => {
      const y = c.draws.map((row) => row[k]);
      while (y.length < longest.length) y.push(null);
      return y;
    });
    return [longest, ...ys];
  }

  function renderTraces(t) {
    const box = document.getElementById("traces");
    const shape = t.chains.length;
    for (const [param, plot] of traces) {
      if (!t.params.includes(param) || plot.shape.split("|").length !== shape) {
        plot.destroy();
        plot.container.remove();
        traces.delete(param);
      }
    }
    const warm = document.getElementById("include-warmup").checked ? t.warmup : null;
    t.params.forEach((param, k) => {
      let plot = traces.get(param);
      if (!plot) {
        const container = K.el("div", { class: "plot trace-plot", "data-param": String(param) });
        box.append(container);
        plot = new Plots.Lines(container, {
          yLabel: t.param_names[k],
          series: t.chains.map((c) => ({ label: `chain ${c.chain}`, color: K.color(c.chain) })),
          height: 170,
          until: warm,
        });
        traces.set(param, plot);
      }
      plot.update(chainColumns(t, k), warm);
    });
    // Keep the plots in the picked order, each as wide as its place.
    for (const param of t.params) box.append(traces.get(param).container);
    for (const plot of traces.values()) plot.resize();
    const kept = t.chains.reduce((n, c) => n + c.iterations.length, 0);
    const drawn = t.chains.reduce((n, c) => n + c.length, 0);
    document.getElementById("trace-note").textContent =
      drawn === 0 ? "no draws yet" : `${K.int(kept)} of ${K.int(drawn)} draws plotted${t.stride === 1 ? "" : ` (1 in ${t.stride}, thinned on the server)`}`;
  }

  function renderRunning(t) {
    const r = t.running;
    const series = t.param_names.map((name, k) => ({ label: name, color: K.color(k + 7) }));
    const shape = series.map((s) => s.label).join("|");
    if (!rhatPlot || rhatPlot.shape !== shape) {
      if (rhatPlot) rhatPlot.destroy();
      if (essPlot) essPlot.destroy();
      document.getElementById("running-rhat").replaceChildren();
      document.getElementById("running-ess").replaceChildren();
      rhatPlot = new Plots.Lines(document.getElementById("running-rhat"), { yLabel: "R-hat", series, levels: [1.01], legend: true });
      essPlot = new Plots.Lines(document.getElementById("running-ess"), { yLabel: "ESS", series, legend: true });
    }
    const column = (rows, k) => rows.map((row) => row[k]);
    rhatPlot.update([r.iterations, ...t.param_names.map((_, k) => column(r.r_hat, k))]);
    essPlot.update([r.iterations, ...t.param_names.map((_, k) => column(r.ess_bulk, k))]);
  }

  // Kept draws after warm-up (or every kept draw, before there are any).
  function postWarmup(t) {
    const rows = [];
    for (const c of t.chains) {
      c.iterations.forEach((it, j) => {
        if (it > t.warmup) rows.push([c.chain, c.draws[j]]);
      });
    }
    if (rows.length) return rows;
    for (const c of t.chains) c.draws.forEach((d) => rows.push([c.chain, d]));
    return rows;
  }

  function renderHistograms(t) {
    const box = document.getElementById("histograms");
    const rows = postWarmup(t);
    const canvases = t.params.map((param, k) => {
      let canvas = box.querySelector(`canvas[data-param="${param}"]`);
      if (!canvas) canvas = K.el("canvas", { class: "hist", "data-param": String(param) });
      return canvas;
    });
    box.replaceChildren(...canvases);
    canvases.forEach((canvas, k) => Plots.histogram(canvas, t.param_names[k], rows.map(([, d]) => d[k])));
  }

  function renderPair(t) {
    const xs = document.getElementById("pair-x");
    const ys = document.getElementById("pair-y");
    const options = t.param_names.join("|");
    if (xs.dataset.options !== options) {
      const keepX = Number(xs.value || 0);
      const keepY = Number(ys.value || 1);
      for (const [select, keep] of [[xs, keepX], [ys, keepY]]) {
        select.replaceChildren(...t.param_names.map((name, k) => K.el("option", { value: String(k), text: name })));
        select.value = String(Math.min(keep, t.param_names.length - 1));
        select.dataset.options = options;
      }
    }
    const x = Number(xs.value);
    const y = Number(ys.value);
    const rows = postWarmup(t);
    Plots.scatter(
      document.getElementById("pair"),
      t.param_names[x],
      t.param_names[y],
      rows.map(([chain, d]) => [d[x], d[y], chain]),
    );
  }

  // ---------------------------------------------------------- diagnostics

  function renderAcceptance(s, d) {
    const post = d ? new Map(d.chains.map((c) => [c.chain, c.acceptance_rate])) : new Map();
    const box = document.getElementById("acceptance");
    box.replaceChildren(
      ...s.chain_summaries.map((c) => {
        const value = post.has(c.chain) && post.get(c.chain) !== null ? post.get(c.chain) : c.acceptance_rate;
        const bar = K.el("span", { class: "bar" });
        bar.style.width = `${Math.round((value || 0) * 100)}%`;
        bar.style.background = K.color(c.chain);
        const low = value !== null && (value < 0.05 || value > 0.95);
        return K.el(
          "div",
          { class: low ? "bar-row bad" : "bar-row", "data-chain": String(c.chain) },
          K.el("span", { class: "bar-label", text: `chain ${c.chain}` }),
          K.el("span", { class: "bar-track" }, bar),
          K.el("span", { class: "bar-value", text: K.num(value, 2) }),
        );
      }),
    );
  }

  function renderWarnings(warnings) {
    const box = document.getElementById("warnings");
    const list = document.getElementById("warning-list");
    box.hidden = !warnings || warnings.length === 0;
    const item = (w) => {
        const where = [w.parameter !== null ? w.parameter : null, w.chain !== null ? `chain ${w.chain}` : null].filter((x) => x !== null).join(", ");
        return K.el(
          "li",
          { class: "warning", "data-code": w.code },
          K.el("span", { class: "badge warn", text: w.code }),
          where ? K.el("span", { class: "where", text: where }) : "",
          K.el("span", { text: w.message }),
        );
    };
    const all = warnings || [];
    const shown = all.slice(0, WARNINGS_SHOWN).map(item);
    if (all.length > WARNINGS_SHOWN) {
      const more = K.el("ul", {}, ...all.slice(WARNINGS_SHOWN).map(item));
      const open = list.querySelector("details") && list.querySelector("details").open;
      const details = K.el("details", {}, K.el("summary", { text: `${all.length - WARNINGS_SHOWN} more` }), more);
      details.open = Boolean(open);
      shown.push(K.el("li", { class: "more" }, details));
    }
    list.replaceChildren(...shown);
  }

  function renderDiagnostics(d, s) {
    const body = document.querySelector("#diagnostics tbody");
    body.replaceChildren(
      ...d.parameters.map((p) => {
        const unbounded = p.r_hat === null && p.ess_bulk !== null;
        const rhatBad = unbounded || (p.r_hat !== null && p.r_hat > 1.01);
        const essBad = (v) => v !== null && v < 100 * s.chains;
        return K.el(
          "tr",
          {},
          K.el("td", { text: p.name }),
          K.el("td", { class: "num", text: K.num(p.mean, 4) }),
          K.el("td", { class: "num", text: K.num(p.sd, 4) }),
          K.el("td", { class: "num", text: K.num(p.mcse_mean, 2) }),
          K.el("td", { class: essBad(p.ess_bulk) ? "num bad" : "num", text: K.int(p.ess_bulk) }),
          K.el("td", { class: essBad(p.ess_tail) ? "num bad" : "num", text: K.int(p.ess_tail) }),
          K.el("td", { class: rhatBad ? "num bad" : "num", text: unbounded ? "∞" : K.rhat(p.r_hat) }),
        );
      }),
    );
    document.getElementById("diag-note").textContent = `(${K.int(d.draws)} post-warm-up draws per chain)`;
  }

  // ------------------------------------------------------------------ poll

  async function tick() {
    const error = document.getElementById("error");
    try {
      const now = Date.now();
      const s = (await K.get(base)).body;
      summary = s;
      if (picked === null) {
        picked = s.param_names.slice(0, MAX_PICKED).map((_, i) => i);
        buildPicker(s);
      }
      renderFacts(s, now);
      const warm = document.getElementById("include-warmup").checked;
      const query = `/trace?points=${points(s.chains)}&include_warmup=${warm}&checkpoints=40&${picked.map((p) => `param=${p}`).join("&")}`;
      const answer = await K.get(base + query, query === traceQuery ? traceTag : null);
      if (!answer.notModified) {
        trace = answer.body;
        traceTag = answer.etag;
        traceQuery = query;
        renderTraces(trace);
        renderRunning(trace);
        renderHistograms(trace);
        renderPair(trace);
      }
      if (!diagnosing && s.iterations !== diagnosedIterations && now - diagnosedAt > DIAGNOSTICS_MS) {
        // Not awaited: diagnostics read every draw (a minute for 64 x 100 000), and the
        // traces go on updating meanwhile.
        diagnosing = true;
        K.get(base + "/diagnostics")
          .then(({ body }) => {
            diagnostics = body;
            diagnosedAt = Date.now();
            diagnosedIterations = s.iterations;
            renderDiagnostics(body, summary);
            renderAcceptance(summary, body);
            renderWarnings(body.warnings);
          })
          .catch(() => {
            diagnosedAt = Date.now(); // tried: the next poll after DIAGNOSTICS_MS retries
          })
          .finally(() => {
            diagnosing = false;
          });
      }
      renderAcceptance(s, diagnostics);
      renderWarnings(diagnostics ? diagnostics.warnings : s.warnings);
      error.hidden = true;
      keys.clear();
      K.status(`live · ${new Date(now).toLocaleTimeString()}`, true);
    } catch (e) {
      if (e instanceof K.AuthError) {
        keys.ask(e.message);
        K.status("needs an API key", false);
      } else {
        error.textContent = e.status === 404 ? "No such session: deleted, expired, or created with another API key." : `Could not reach the service: ${e.message}`;
        error.hidden = false;
        K.status(e.status === 404 ? "not found" : "offline", false);
      }
    }
  }

  document.getElementById("include-warmup").addEventListener("change", () => poller.now());
  for (const id of ["pair-x", "pair-y"]) {
    document.getElementById(id).addEventListener("change", () => trace && renderPair(trace));
  }
  let resizing = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      for (const plot of traces.values()) plot.resize();
      if (rhatPlot) rhatPlot.resize();
      if (essPlot) essPlot.resize();
      if (trace) {
        renderHistograms(trace);
        renderPair(trace);
      }
    }, 150);
  });
  const poller = K.poll(tick, POLL_MS);
})();
