#!/usr/bin/env node
// banana.mjs: sample a 2-d banana with Kameleon from JavaScript, with several worker
// processes. Node 18 or later (global fetch); no packages.
//
//     KAMELEON_URL=http://127.0.0.1:8000 node banana.mjs
//
// Settings (environment):
//     KAMELEON_URL            the service (default http://127.0.0.1:8000)
//     KAMELEON_API_KEY        sent as X-API-Key when set
//     KAMELEON_SESSION        work on this existing session instead of creating one
//                             (how workers on other machines join a run)
//     KAMELEON_ALGORITHM      am (default), rwm, kameleon, kmc-lite, kmc-finite; or one
//                             that uses gradients, mala, hmc, nuts: each result then
//                             carries the banana's gradient (logDensityGradient). A worker
//                             that joins such a session names its algorithm here too.
//     KAMELEON_OPTIONS        algorithm options as a JSON object (default: none)
//     KAMELEON_CHAINS         chains (default 4)
//     KAMELEON_ITERATIONS     draws kept per chain after warm-up (default 2000)
//     KAMELEON_WARMUP         warm-up iterations per chain (default 1000)
//     KAMELEON_SEED           seed (default 1)
//     KAMELEON_WORKERS        worker processes (default 2)
//     KAMELEON_MAX            proposals per request and worker (default chains / workers)
//     KAMELEON_LEASE_SECONDS  how long a worker holds its proposals (default: the service's)
//
// The target is the banana B(b, v) of Haario et al.: x ~ N(0, diag(v, 1)) twisted by
// y2 = x2 + b (x1^2 - v), cut off (log density -Infinity) outside the band
// |y2 - b (y1^2 - v)| <= BAND around its ridge. Its mean is 0 and Var y1 = v.
// Replace logDensity (and logDensityGradient, for mala, hmc, nuts) with your own (they
// may be async).

import { fork } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";

const env = process.env;
const setting = (name, fallback) => (env[name] ? env[name] : fallback);
const BASE = setting("KAMELEON_URL", "http://127.0.0.1:8000").replace(/\/+$/, "");
const CHAINS = Number(setting("KAMELEON_CHAINS", 4));
const ITERATIONS = Number(setting("KAMELEON_ITERATIONS", 2000)); // kept after warm-up
const WARMUP = Number(setting("KAMELEON_WARMUP", 1000));
const WORKERS = Number(setting("KAMELEON_WORKERS", 2));
const MAX = Number(setting("KAMELEON_MAX", Math.ceil(CHAINS / WORKERS)));
const LEASE = Number(setting("KAMELEON_LEASE_SECONDS", 0));

// The target: your model goes here.
const B = 0.03; // twist
const V = 25; // variance of y1
const BAND = 4; // half-width of the support around the ridge

function logDensity([y1, y2]) {
  const u = y2 - B * (y1 * y1 - V); // the untwisted second coordinate
  if (Math.abs(u) > BAND) return -Infinity; // outside the support
  return -0.5 * ((y1 * y1) / V + u * u);
}

// The same log density and its gradient, [value, gradient], for the algorithms that use
// gradients. The service checks the gradient against finite differences at the first
// chain's initial point and stops the session, naming the coordinate, when it is wrong.
function logDensityGradient([y1, y2]) {
  const u = y2 - B * (y1 * y1 - V);
  return [logDensity([y1, y2]), [-y1 / V + 2 * B * y1 * u, -u]];
}

const ALGORITHM = setting("KAMELEON_ALGORITHM", "am");
const GRADIENT = ["mala", "hmc", "nuts"].includes(ALGORITHM);

// ---------------------------------------------------------------- HTTP with retries

const ATTEMPTS = 10; // tries per request on connection errors and 503
const headers = { "Content-Type": "application/json", Accept: "application/json" };
if (env.KAMELEON_API_KEY) headers["X-API-Key"] = env.KAMELEON_API_KEY;

class ProblemError extends Error {
  constructor(path, status, problem) {
    super(`${path}: HTTP ${status}: ${problem?.detail ?? "(no detail)"}`);
    this.status = status;
    this.problem = problem;
  }
}

// GET (no body) or POST `path`; the parsed answer. Connection errors and 503 are retried
// with exponential backoff: every request of the protocol is safe to repeat (a re-told
// result answers "duplicate"). Any other error status throws a ProblemError.
async function call(path, body) {
  let backoff = 0.1;
  for (let attempt = 1; ; attempt++) {
    let why;
    try {
      const response = await fetch(BASE + path, {
        method: body === undefined ? "GET" : "POST",
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(120_000),
      });
      const text = await response.text();
      if (response.status !== 503) {
        const answer = text ? JSON.parse(text) : null;
        if (!response.ok) throw new ProblemError(path, response.status, answer);
        return answer;
      }
      why = "503 service unavailable";
    } catch (error) {
      if (error instanceof ProblemError) throw error;
      why = error.cause?.message ?? error.message; // fetch failed: connection refused, reset...
    }
    if (attempt === ATTEMPTS) throw new Error(`${path}: giving up after ${attempt} attempts (${why})`);
    const wait = backoff * (0.5 + 0.5 * Math.random()); // jitter: workers do not retry in step
    console.error(`kameleon: ${path}: ${why}; retrying in ${wait.toFixed(2)} s`);
    await sleep(wait * 1000);
    backoff = Math.min(2 * backoff, 5);
  }
}

// ---------------------------------------------------------------- the ask/tell loop

// One worker: ask for proposals, evaluate them, tell the values while asking for the
// next ones (step), until the session is done.
async function work(id) {
  const ask = { max: MAX, ...(LEASE > 0 && { lease_seconds: LEASE }) };
  const counts = { evaluations: 0, outside: 0 };
  let answer = await call(`/v1/sessions/${id}/ask`, ask);
  while (!answer.done) {
    if (answer.proposals.length === 0) {
      // Every unfinished chain is leased to another worker: wait, then ask again.
      await sleep(100);
      answer = await call(`/v1/sessions/${id}/ask`, ask);
      continue;
    }
    let results = [];
    for (const proposal of answer.proposals) {
      // Every kind of proposal (init, proposal, and the leapfrog and gradient_check points
      // within a transition of a gradient sampler) is evaluated the same way.
      const [value, gradient] = GRADIENT ? await logDensityGradient(proposal.x) : [await logDensity(proposal.x)];
      if (value === -Infinity) counts.outside++;
      else if (!Number.isFinite(value)) throw new Error(`log density ${value} at ${proposal.x}`);
      counts.evaluations++;
      // JSON has no -Infinity: null says "outside the support" (and needs no gradient).
      if (value === -Infinity) results.push({ id: proposal.id, log_density: null });
      else results.push({ id: proposal.id, log_density: value, ...(GRADIENT && { gradient }) });
    }
    for (;;) {
      try {
        answer = await call(`/v1/sessions/${id}/step`, { results, ...ask });
        break;
      } catch (error) {
        // 409: another worker told some of these first (our lease had run out). Drop the
        // ids the service names and send the rest.
        const ids = new Set(error.status === 409 ? (error.problem?.ids ?? []) : []);
        const kept = results.filter((r) => !ids.has(r.id));
        if (kept.length === results.length) throw error;
        for (const r of results) if (ids.has(r.id)) console.error(`kameleon: ${r.id} was answered by another worker; dropped`);
        results = kept;
      }
    }
    for (const r of answer.results) {
      if (r.outcome === "outside_support") {
        throw new Error(`the initial point ${r.id} is outside the support; reset its chain`);
      }
    }
  }
  return counts;
}

async function createSession() {
  // Start the chains on the ridge, spread over +-1.5 sd of y1.
  const initial = Array.from({ length: CHAINS }, (_, c) => {
    const y1 = CHAINS > 1 ? 1.5 * Math.sqrt(V) * ((2 * c) / (CHAINS - 1) - 1) : 0;
    return [y1, B * (y1 * y1 - V)];
  });
  const session = await call("/v1/sessions", {
    algorithm: ALGORITHM,
    dim: 2,
    chains: CHAINS,
    warmup: WARMUP,
    max_iterations: WARMUP + ITERATIONS, // counts warm-up
    seed: Number(setting("KAMELEON_SEED", 1)),
    initial,
    options: JSON.parse(setting("KAMELEON_OPTIONS", "{}")),
  });
  return session.id;
}

async function printDiagnostics(id) {
  const { parameters, warnings, draws } = await call(`/v1/sessions/${id}/diagnostics`);
  if (draws < 1) {
    console.log(
      "no draws after warm-up yet: nothing to summarise (KAMELEON_ITERATIONS counts the draws kept after warm-up)",
    );
    return;
  }
  const f = (x, digits) => (x === null ? "nan" : x.toFixed(digits));
  console.log("parameter        mean         sd  mcse_mean   ess_bulk    r_hat");
  for (const p of parameters) {
    console.log(
      p.name.padEnd(10),
      [f(p.mean, 4), f(p.sd, 4), f(p.mcse_mean, 4), f(p.ess_bulk, 1)].map((s) => s.padStart(10)).join(" "),
      f(p.r_hat, 4).padStart(8),
    );
  }
  // The warnings, one line per kind with the parameters and chains it concerns.
  const kinds = new Map();
  for (const w of warnings) kinds.set(w.code, [...(kinds.get(w.code) ?? []), w]);
  for (const [code, same] of kinds) {
    const on = [...new Set(same.map((w) => w.parameter ?? (w.chain === null ? null : `chain ${w.chain}`)).filter((x) => x !== null))];
    const more = same.length > 1 ? ` (and ${same.length - 1} more)` : "";
    console.log(`warning [${code}]${on.length ? " on " + on.join(", ") : ""}: ${same[0].message}${more}`);
  }
  if (warnings.length) {
    console.log('    try: a longer run (KAMELEON_WARMUP, KAMELEON_ITERATIONS); the README, "Has it converged?", says what each warning means');
  }
}

async function main() {
  if (env.KAMELEON_WORKER !== undefined) {
    // A worker process, forked below.
    const counts = await work(env.KAMELEON_SESSION);
    console.log(`worker ${env.KAMELEON_WORKER}: ${counts.evaluations} log densities, ${counts.outside} outside the support`);
    return;
  }
  const id = env.KAMELEON_SESSION || (await createSession());
  console.log(`session ${id}`);
  const workers = Array.from({ length: WORKERS }, (_, w) =>
    fork(fileURLToPath(import.meta.url), { env: { ...env, KAMELEON_SESSION: id, KAMELEON_WORKER: String(w) } }),
  );
  const codes = await Promise.all(workers.map((child) => new Promise((done) => child.on("exit", done))));
  const failed = codes.filter((code) => code !== 0).length;
  if (failed) throw new Error(`${failed} of ${WORKERS} workers failed`);
  await printDiagnostics(id);
}

main().catch((error) => {
  console.error(`kameleon: ${error.message}`);
  process.exit(1);
});
