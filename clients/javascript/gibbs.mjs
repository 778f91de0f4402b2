#!/usr/bin/env node
// gibbs.mjs: a Gibbs sampler whose conditional draws JavaScript makes, the service doing
// the rest (algorithm gibbs). Node 18 or later (global fetch); no packages.
//
//     KAMELEON_URL=http://127.0.0.1:8000 node gibbs.mjs
//
// Settings (environment):
//     KAMELEON_URL            the service (default http://127.0.0.1:8000)
//     KAMELEON_API_KEY        sent as X-API-Key when set
//     KAMELEON_CHAINS         chains (default 4)
//     KAMELEON_ITERATIONS     draws kept per chain after warm-up (default 2000)
//     KAMELEON_WARMUP         warm-up iterations per chain (default 1000)
//     KAMELEON_SEED           seed (default 1)
//
// The model: data y_1..y_n ~ N(mu, 1 / tau), mu ~ N(0, 1 / KAPPA), tau ~ Gamma(A, B)
// (shape, rate). Its parameters are (mu, tau). The mean mu given tau has a closed form,
// a normal: block 0 is "conditional", and this client draws it when asked (kind
// "conditional"), telling the draw with the log density at the point it makes. The
// precision tau is block 1, updated by the service's Metropolis-Hastings: asked and told
// as any proposal. One iteration is a sweep of both blocks, each one evaluation.

const env = process.env;
const setting = (name, fallback) => (env[name] ? env[name] : fallback);
const BASE = setting("KAMELEON_URL", "http://127.0.0.1:8000").replace(/\/+$/, "");
const CHAINS = Number(setting("KAMELEON_CHAINS", 4));
const ITERATIONS = Number(setting("KAMELEON_ITERATIONS", 2000)); // kept after warm-up
const WARMUP = Number(setting("KAMELEON_WARMUP", 1000));

// The data (deterministic, so that a test can compute the exact posterior) and priors.
const Y = Array.from({ length: 30 }, (_, i) => 1 + 2 * Math.sin(1.7 * i + 0.3));
const N = Y.length;
const SUM = Y.reduce((s, y) => s + y, 0);
const KAPPA = 0.01, A = 2, B = 1;

function logDensity([mu, tau]) {
  if (!(tau > 0)) return -Infinity; // outside the support
  const squares = Y.reduce((s, y) => s + (y - mu) * (y - mu), 0);
  return (N / 2 + A - 1) * Math.log(tau) - tau * (B + squares / 2) - (KAPPA * mu * mu) / 2;
}

// mu | tau, y ~ N(tau SUM / (KAPPA + N tau), 1 / (KAPPA + N tau)).
function drawMean([, tau]) {
  const precision = KAPPA + N * tau;
  return [(tau * SUM) / precision + standardNormal() / Math.sqrt(precision)];
}

function standardNormal() {
  // Box-Muller; 1 - random() is in (0, 1].
  return Math.sqrt(-2 * Math.log(1 - Math.random())) * Math.cos(2 * Math.PI * Math.random());
}

const DRAWS = { 0: drawMean }; // by block: the blocks whose conditionals this client draws

// ---------------------------------------------------------------- HTTP

const headers = { "Content-Type": "application/json", Accept: "application/json" };
if (env.KAMELEON_API_KEY) headers["X-API-Key"] = env.KAMELEON_API_KEY;

async function call(path, body) {
  const response = await fetch(BASE + path, {
    method: body === undefined ? "GET" : "POST",
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}: ${answer?.detail}`);
  return answer;
}

// ---------------------------------------------------------------- the ask/tell loop

function result(proposal) {
  if (proposal.kind === "conditional") {
    // Draw the block from its full conditional at the chain's current point x, and tell
    // the draw (in the order of proposal.indices) with the log density where it lands.
    const draw = DRAWS[proposal.block](proposal.x);
    const x = [...proposal.x];
    proposal.indices.forEach((k, j) => (x[k] = draw[j]));
    return { id: proposal.id, draw, log_density: logDensity(x) };
  }
  const value = logDensity(proposal.x); // init, or a Metropolis-Hastings proposal
  return { id: proposal.id, log_density: value === -Infinity ? null : value };
}

async function main() {
  const session = await call("/v1/sessions", {
    algorithm: "gibbs",
    dim: 2,
    chains: CHAINS,
    warmup: WARMUP,
    max_iterations: WARMUP + ITERATIONS, // counts warm-up
    seed: Number(setting("KAMELEON_SEED", 1)),
    initial: [0, 1],
    initial_radius: 0.5,
    options: { blocks: [{ indices: [0], conditional: true }, { indices: [1] }] },
  });
  console.log(`session ${session.id}`);
  let conditionals = 0;
  let answer = await call(`/v1/sessions/${session.id}/ask`, { max: CHAINS });
  while (!answer.done) {
    const results = answer.proposals.map(result);
    conditionals += answer.proposals.filter((p) => p.kind === "conditional").length;
    answer = await call(`/v1/sessions/${session.id}/step`, { results, max: CHAINS, wait_seconds: 1 });
  }
  console.log(`conditional draws: ${conditionals}`);
  const { parameters } = await call(`/v1/sessions/${session.id}/diagnostics`);
  for (const p of parameters) {
    console.log(`${p.name} mean ${p.mean.toFixed(4)} sd ${p.sd.toFixed(4)} mcse ${p.mcse_mean.toFixed(4)}`);
  }
}

main().catch((error) => {
  console.error(`kameleon: ${error.message}`);
  process.exit(1);
});
