/*
 * kameleon_client.h: a small C client of the Kameleon ask/tell protocol (v1).
 *
 * Your code holds the log density; the service holds the sampler. A worker asks for
 * proposals, evaluates the log density at each, and tells the values back while asking
 * for the next ones (`step`), until the session is done. Several worker processes may
 * work on one session: each proposal is leased to one of them for `lease_seconds`.
 *
 * Needs libcurl and cJSON (Debian: libcurl4-openssl-dev libcjson-dev):
 *
 *     cc -O2 -o banana banana.c kameleon_client.c -lcurl -lcjson -lm
 *
 * Every function that talks to the service retries connection errors and 503 answers
 * with exponential backoff (a retried tell is safe: the service answers `duplicate`),
 * drops the results that a 409 names, and prints the service's problem detail for
 * anything else. Functions return 0 on success and -1 on failure.
 */
#ifndef KAMELEON_CLIENT_H
#define KAMELEON_CLIENT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The log density at x[0..dim-1]; return -INFINITY outside the support (it is sent as
 * JSON null). `data` is passed through untouched. */
typedef double (*kc_log_density)(const double *x, int dim, void *data);

/* For the algorithms that use gradients (mala, hmc, nuts): the log density at
 * x[0..dim-1], and its gradient written into gradient[0..dim-1]. Outside the support,
 * return -INFINITY; the gradient is then not sent. */
typedef double (*kc_log_density_gradient)(const double *x, int dim, double *gradient,
                                          void *data);

/* 1 when `algorithm` needs a gradient with every result (mala, hmc, nuts), else 0. */
int kc_needs_gradient(const char *algorithm);

typedef struct kc_client kc_client;

/* A connection to the service at `url` (e.g. "http://127.0.0.1:8000"). `api_key` is sent
 * as X-API-Key unless it is NULL or empty. NULL if out of memory. */
kc_client *kc_open(const char *url, const char *api_key);
void kc_close(kc_client *kc);

/* Create a session and write its id (NUL-terminated) into id[0..id_size-1].
 * `initial` holds `chains` rows of `dim` numbers (row after row), or is NULL for the
 * service's default; `options_json` is a JSON object of algorithm options, or NULL or "". */
int kc_create_session(kc_client *kc, const char *algorithm, int dim, int chains, int warmup,
                      int max_iterations, long seed, const double *initial,
                      const char *options_json, char *id, size_t id_size);

/* Counts of one worker's evaluations. */
typedef struct {
    long evaluations; /* log densities told */
    long outside;     /* of which -inf (outside the support) */
} kc_counts;

/* Work on session `id` until it is done: ask for up to `max` proposals at a time, each
 * leased for `lease_seconds` (<= 0: the service's default), evaluate `f` at each and tell
 * the values back. `counts` may be NULL. */
int kc_work(kc_client *kc, const char *id, int max, double lease_seconds, kc_log_density f,
            void *data, kc_counts *counts);

/* kc_work for the algorithms that use gradients: tells `f`'s gradient with each log
 * density. A transition may take several evaluations (proposals of kind `leapfrog` or
 * `gradient_check`): each is evaluated and told like any proposal. */
int kc_work_gradient(kc_client *kc, const char *id, int max, double lease_seconds,
                     kc_log_density_gradient f, void *data, kc_counts *counts);

/* Fork `workers` processes that each open their own connection and run kc_work; print
 * one line of counts per worker and wait for all of them. 0 when every worker succeeded. */
int kc_run_workers(const char *url, const char *api_key, const char *id, int workers, int max,
                   double lease_seconds, kc_log_density f, void *data);

/* kc_run_workers with kc_work_gradient. */
int kc_run_workers_gradient(const char *url, const char *api_key, const char *id, int workers,
                            int max, double lease_seconds, kc_log_density_gradient f,
                            void *data);

/* Print the session's diagnostics (mean, sd, MCSE, ESS, R-hat per parameter). */
int kc_print_diagnostics(kc_client *kc, const char *id);

#ifdef __cplusplus
}
#endif

#endif /* KAMELEON_CLIENT_H */
