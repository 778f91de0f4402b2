// The dashboard's access to the API: the key (kept in sessionStorage), GET with
// ETags, polling, and formatting. No framework, no build step.
"use strict";

const Kameleon = (() => {
  const KEY = "kameleon-api-key";
  // The service's root: the dashboard is at <root>/ui, the API at <root>/v1 (a proxy
  // may serve both under a path prefix).
  const match = location.pathname.match(/^(.*?)\/ui(\/|$)/);
  const ROOT = match ? match[1] : "";
  const API = ROOT + "/v1";

  class AuthError extends Error {}

  function key() {
    return sessionStorage.getItem(KEY) || "";
  }

  function setKey(value) {
    if (value) sessionStorage.setItem(KEY, value);
    else sessionStorage.removeItem(KEY);
  }

  // GET an API path; {body, etag}, or {notModified: true} when `etag` still holds.
  async function get(path, etag) {
    const headers = { Accept: "application/json" };
    if (key()) headers["X-API-Key"] = key();
    if (etag) headers["If-None-Match"] = etag;
    const response = await fetch(API + path, { headers, cache: "no-store" });
    if (response.status === 401 || response.status === 403) {
      throw new AuthError(response.status === 401 ? "this service needs an API key" : "this API key is not accepted");
    }
    if (response.status === 304) return { notModified: true, etag };
    if (!response.ok) {
      let detail = `${response.status} ${response.statusText}`;
      try {
        detail = (await response.json()).detail || detail;
      } catch (_) {
        /* not JSON */
      }
      const error = new Error(detail);
      error.status = response.status;
      throw error;
    }
    return { body: await response.json(), etag: response.headers.get("ETag") };
  }

  // The key form in the page's header: shown when the API asks for a key, or on demand.
  function keyForm(onKey) {
    const form = document.getElementById("key-form");
    const input = document.getElementById("key-input");
    const toggle = document.getElementById("key-toggle");
    toggle.addEventListener("click", () => {
      form.hidden = !form.hidden;
      if (!form.hidden) input.focus();
    });
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      setKey(input.value.trim());
      input.value = "";
      form.hidden = true;
      onKey();
    });
    return {
      ask(message) {
        form.hidden = false;
        document.getElementById("key-message").textContent = message;
        input.focus();
      },
      clear() {
        document.getElementById("key-message").textContent = "";
      },
    };
  }

  // Call `tick` now and every `ms` while the page is visible; `tick` may be async.
  function poll(tick, ms) {
    let timer = null;
    async function run() {
      clearTimeout(timer);
      try {
        await tick();
      } finally {
        timer = setTimeout(run, document.hidden ? ms * 5 : ms);
      }
    }
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) run();
    });
    run();
    return { now: run };
  }

  function status(text, ok) {
    const el = document.getElementById("live");
    el.textContent = text;
    el.className = ok ? "live ok" : "live stale";
  }

  // Formatting.
  function num(value, digits = 3) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    const a = Math.abs(value);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return value.toExponential(digits - 1);
    return Number(value.toPrecision(digits)).toString();
  }

  // R-hat: four decimals, so 1.0102 does not read as 1.01.
  function rhat(value) {
    if (value === null || value === undefined) return "–";
    if (value === Infinity) return "∞";
    return value.toFixed(4);
  }

  function int(value) {
    if (value === null || value === undefined) return "–";
    return Math.round(value).toLocaleString("en-US");
  }

  function age(seconds) {
    if (seconds < 60) return `${Math.max(0, Math.round(seconds))} s`;
    if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
    if (seconds < 86400) return `${(seconds / 3600).toFixed(1)} h`;
    return `${(seconds / 86400).toFixed(1)} d`;
  }

  // One colour per chain, far apart for neighbours.
  function color(i, alpha = 1) {
    return `hsla(${(i * 137.508) % 360}, 70%, 42%, ${alpha})`;
  }

  // Worst R-hat and smallest ESS of a diagnostics document.
  function worst(diagnostics) {
    let rhat = null;
    let ess = null;
    let unbounded = false;
    for (const p of diagnostics.parameters) {
      if (p.r_hat === null && p.ess_bulk !== null) unbounded = true;
      if (p.r_hat !== null) rhat = rhat === null ? p.r_hat : Math.max(rhat, p.r_hat);
      for (const e of [p.ess_bulk, p.ess_tail]) {
        if (e !== null) ess = ess === null ? e : Math.min(ess, e);
      }
    }
    return { rhat: unbounded ? Infinity : rhat, ess };
  }

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else node.setAttribute(name, value);
    }
    for (const child of children) node.append(child);
    return node;
  }

  return { API, ROOT, AuthError, get, key, setKey, keyForm, poll, status, num, rhat, int, age, color, worst, el };
})();
