#!/usr/bin/env Rscript
# banana.R: sample a 2-d banana with Kameleon from R, with several worker processes.
# Needs the packages httr and jsonlite (Debian: r-base-core r-cran-httr r-cran-jsonlite);
# the workers are forked with parallel::mclapply (Linux, macOS).
#
#     KAMELEON_URL=http://127.0.0.1:8000 Rscript banana.R
#
# Settings (environment):
#     KAMELEON_URL            the service (default http://127.0.0.1:8000)
#     KAMELEON_API_KEY        sent as X-API-Key when set
#     KAMELEON_SESSION        work on this existing session instead of creating one
#                             (how workers on other machines join a run)
#     KAMELEON_ALGORITHM      am (default), rwm, kameleon, kmc-lite, kmc-finite; or one
#                             that uses gradients, mala, hmc, nuts: each result then
#                             carries the banana's gradient (log_density_gradient). A
#                             worker that joins such a session names its algorithm too.
#     KAMELEON_OPTIONS        algorithm options as a JSON object (default: none)
#     KAMELEON_CHAINS         chains (default 4)
#     KAMELEON_ITERATIONS     draws kept per chain after warm-up (default 2000)
#     KAMELEON_WARMUP         warm-up iterations per chain (default 1000)
#     KAMELEON_SEED           seed (default 1)
#     KAMELEON_WORKERS        worker processes (default 2)
#     KAMELEON_MAX            proposals per request and worker (default chains / workers)
#     KAMELEON_LEASE_SECONDS  how long a worker holds its proposals (default: the service's)
#
# The target is the banana B(b, v) of Haario et al.: x ~ N(0, diag(v, 1)) twisted by
# y2 = x2 + b (x1^2 - v), cut off (log density -Inf) outside the band
# |y2 - b (y1^2 - v)| <= band around its ridge. Its mean is 0 and Var y1 = v.

suppressPackageStartupMessages({
  library(httr)
  library(jsonlite)
})

setting <- function(name, default) {
  value <- Sys.getenv(name)
  if (nzchar(value)) value else default
}
URL <- sub("/+$", "", setting("KAMELEON_URL", "http://127.0.0.1:8000"))
CHAINS <- as.integer(setting("KAMELEON_CHAINS", 4))
ITERATIONS <- as.integer(setting("KAMELEON_ITERATIONS", 2000))  # kept after warm-up
WARMUP <- as.integer(setting("KAMELEON_WARMUP", 1000))
WORKERS <- as.integer(setting("KAMELEON_WORKERS", 2))
MAX <- as.integer(setting("KAMELEON_MAX", ceiling(CHAINS / WORKERS)))
LEASE <- as.numeric(setting("KAMELEON_LEASE_SECONDS", 0))
ALGORITHM <- setting("KAMELEON_ALGORITHM", "am")
GRADIENT <- ALGORITHM %in% c("mala", "hmc", "nuts")  # these need the gradient with every result

# The target: your model goes here.
B <- 0.03   # twist
V <- 25     # variance of y1
BAND <- 4   # half-width of the support around the ridge

log_density <- function(y) {
  u <- y[2] - B * (y[1]^2 - V)  # the untwisted second coordinate
  if (abs(u) > BAND) return(-Inf)  # outside the support
  -0.5 * (y[1]^2 / V + u^2)
}

# The same log density and its gradient, list(value, gradient), for the algorithms that
# use gradients. The service checks the gradient against finite differences at the first
# chain's initial point and stops the session, naming the coordinate, when it is wrong.
log_density_gradient <- function(y) {
  u <- y[2] - B * (y[1]^2 - V)
  list(value = log_density(y), gradient = c(-y[1] / V + 2 * B * y[1] * u, -u))
}

# ------------------------------------------------------------------ HTTP with retries

ATTEMPTS <- 10  # tries per request on connection errors and 503
HEADERS <- add_headers(.headers = c(
  "Content-Type" = "application/json", Accept = "application/json",
  if (nzchar(Sys.getenv("KAMELEON_API_KEY"))) c("X-API-Key" = Sys.getenv("KAMELEON_API_KEY"))
))

# GET `path` (no body) or POST `body` to it; list(status, answer). Connection errors and
# 503 are retried with exponential backoff: every request of the protocol is safe to
# repeat (a re-told result answers "duplicate"). `...`: more httr settings.
call <- function(path, body = NULL, ...) {
  backoff <- 0.1
  for (attempt in seq_len(ATTEMPTS)) {
    response <- tryCatch(
      if (is.null(body)) {
        GET(paste0(URL, path), HEADERS, timeout(120), ...)
      } else {
        # null: JSON has no -Inf. jsonlite writes at most 15 significant digits.
        json <- toJSON(body, auto_unbox = TRUE, digits = NA, null = "null")
        POST(paste0(URL, path), HEADERS, timeout(120), ..., body = json)
      },
      error = function(e) e
    )
    if (inherits(response, "error")) {
      why <- conditionMessage(response)
    } else if (status_code(response) == 503) {
      why <- "503 service unavailable"
    } else {
      text <- content(response, as = "text", encoding = "UTF-8")
      answer <- if (nzchar(text)) fromJSON(text, simplifyVector = FALSE) else NULL
      return(list(status = status_code(response), answer = answer))
    }
    if (attempt == ATTEMPTS) stop(sprintf("%s: giving up after %d attempts (%s)", path, attempt, why))
    wait <- backoff * runif(1, 0.5, 1)  # jitter: workers do not retry in step
    message(sprintf("kameleon: %s: %s; retrying in %.2f s", path, why, wait))
    Sys.sleep(wait)
    backoff <- min(2 * backoff, 5)
  }
}

# The answer of a call that must have `status`, else stop with the problem's detail.
expect <- function(reply, status) {
  if (reply$status != status) {
    stop(sprintf("HTTP %d: %s", reply$status, reply$answer$detail %||% "(no detail)"))
  }
  reply$answer
}
`%||%` <- function(a, b) if (is.null(a)) b else a

# ------------------------------------------------------------------ the ask/tell loop

# One worker: ask for proposals, evaluate them, tell the values while asking for the
# next ones (step), until the session is done.
work <- function(worker, id) {
  ask <- list(max = MAX)
  if (LEASE > 0) ask$lease_seconds <- LEASE
  evaluations <- 0
  outside <- 0
  answer <- expect(call(sprintf("/v1/sessions/%s/ask", id), ask), 200)
  while (!answer$done) {
    if (length(answer$proposals) == 0) {
      # Every unfinished chain is leased to another worker: wait, then ask again.
      Sys.sleep(0.1)
      answer <- expect(call(sprintf("/v1/sessions/%s/ask", id), ask), 200)
      next
    }
    # Every kind of proposal (init, proposal, and the leapfrog and gradient_check points
    # within a transition of a gradient sampler) is evaluated the same way.
    results <- lapply(answer$proposals, function(p) {
      y <- unlist(p$x)
      if (GRADIENT) {
        both <- log_density_gradient(y)
        value <- both$value
      } else {
        value <- log_density(y)
      }
      if (is.nan(value) || value == Inf) stop(sprintf("log density %s at %s", value, p$id))
      if (value == -Inf) return(list(id = p$id, log_density = NULL))  # no gradient due there
      if (GRADIENT) return(list(id = p$id, log_density = value, gradient = I(both$gradient)))  # I(): an array even when dim is 1
      list(id = p$id, log_density = value)
    })
    evaluations <- evaluations + length(results)
    outside <- outside + sum(vapply(results, function(r) is.null(r$log_density), TRUE))
    repeat {
      # Tell the values and ask for the next proposals in one round trip.
      reply <- call(sprintf("/v1/sessions/%s/step", id), c(list(results = results), ask))
      if (reply$status != 409) break
      # Another worker told some of these first (our lease had run out): drop the ids
      # the service names and send the rest.
      ids <- unlist(reply$answer$ids)
      kept <- Filter(function(r) !(r$id %in% ids), results)
      if (length(kept) == length(results)) break
      message(sprintf("kameleon: %s answered by another worker; dropped", paste(ids, collapse = ", ")))
      results <- kept
    }
    answer <- expect(reply, 200)
    for (r in answer$results) {
      if (r$outcome == "outside_support") {
        stop(sprintf("the initial point %s is outside the support; reset its chain", r$id))
      }
    }
  }
  cat(sprintf("worker %d: %d log densities, %d outside the support\n", worker, evaluations, outside))
  invisible(TRUE)
}

create_session <- function() {
  # Start the chains on the ridge, spread over +-1.5 sd of y1.
  y1 <- if (CHAINS > 1) 1.5 * sqrt(V) * seq(-1, 1, length.out = CHAINS) else 0
  body <- list(
    algorithm = ALGORITHM, dim = 2L, chains = CHAINS,
    warmup = WARMUP, max_iterations = WARMUP + ITERATIONS,  # counts warm-up
    seed = as.numeric(setting("KAMELEON_SEED", 1)),
    initial = lapply(y1, function(a) c(a, B * (a^2 - V))),
    options = fromJSON(setting("KAMELEON_OPTIONS", "{}"), simplifyVector = FALSE)
  )
  if (length(body$options) == 0) body$options <- NULL  # an empty list would be []
  # Close the connection afterwards: forked workers must not share an open one.
  expect(call("/v1/sessions", body, config(forbid_reuse = TRUE)), 201)$id
}

print_diagnostics <- function(id) {
  d <- expect(call(sprintf("/v1/sessions/%s/diagnostics", id)), 200)
  num <- function(x) if (is.null(x)) NA_real_ else x
  if (d$draws < 1) {
    cat("no draws after warm-up yet: nothing to summarise (KAMELEON_ITERATIONS counts the draws kept after warm-up)\n")
    return(invisible(NULL))
  }
  cat(sprintf("%-10s %10s %10s %10s %10s %8s\n", "parameter", "mean", "sd", "mcse_mean", "ess_bulk", "r_hat"))
  for (p in d$parameters) {
    cat(sprintf("%-10s %10.4f %10.4f %10.4f %10.1f %8.4f\n", p$name, num(p$mean), num(p$sd),
                num(p$mcse_mean), num(p$ess_bulk), num(p$r_hat)))
  }
  # The warnings, one line per kind with the parameters and chains it concerns.
  codes <- unique(vapply(d$warnings, function(w) w$code, ""))
  for (code in codes) {
    same <- Filter(function(w) w$code == code, d$warnings)
    on <- unique(unlist(lapply(same, function(w) {
      if (!is.null(w$parameter)) w$parameter else if (!is.null(w$chain)) paste("chain", w$chain)
    })))
    more <- if (length(same) > 1) sprintf(" (and %d more)", length(same) - 1) else ""
    where <- if (length(on) > 0) paste0(" on ", paste(on, collapse = ", ")) else ""
    cat(sprintf("warning [%s]%s: %s%s\n", code, where, same[[1]]$message, more))
  }
  if (length(d$warnings) > 0) {
    cat("    try: a longer run (KAMELEON_WARMUP, KAMELEON_ITERATIONS); the README, \"Has it converged?\", says what each warning means\n")
  }
}

main <- function() {
  id <- setting("KAMELEON_SESSION", "")
  if (!nzchar(id)) id <- create_session()
  cat(sprintf("session %s\n", id))
  # A failed worker's error comes back as its outcome (reported below), not as a warning.
  outcomes <- suppressWarnings(parallel::mclapply(seq_len(WORKERS) - 1L, work, id = id,
                                                  mc.cores = WORKERS, mc.preschedule = FALSE))
  failed <- Filter(function(o) !isTRUE(o), outcomes)
  for (f in failed) message("kameleon: a worker failed: ", conditionMessage(attr(f, "condition")) %||% f)
  if (length(failed) > 0) stop(sprintf("%d of %d workers failed", length(failed), WORKERS))
  print_diagnostics(id)
}

tryCatch(main(), error = function(e) {
  message("kameleon: ", conditionMessage(e))
  quit(status = 1)
})
