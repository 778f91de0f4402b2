/*
 * banana.c: sample a 2-d banana with Kameleon from C, with several worker processes.
 *
 * Build and run (Debian: apt-get install gcc make libcurl4-openssl-dev libcjson-dev):
 *
 *     make                  # or: cc -O2 -o banana banana.c kameleon_client.c -lcurl -lcjson -lm
 *     KAMELEON_URL=http://127.0.0.1:8000 ./banana
 *
 * Settings (environment):
 *     KAMELEON_URL            the service (default http://127.0.0.1:8000)
 *     KAMELEON_API_KEY        sent as X-API-Key when set
 *     KAMELEON_SESSION        work on this existing session instead of creating one
 *                             (how workers on other machines join a run)
 *     KAMELEON_ALGORITHM      am (default), rwm, kameleon, kmc-lite, kmc-finite; or one
 *                             that uses gradients, mala, hmc, nuts: each result then
 *                             carries the banana's gradient (log_density_gradient).
 *                             A worker that joins such a session (KAMELEON_SESSION)
 *                             names its algorithm here too.
 *     KAMELEON_OPTIONS        algorithm options as a JSON object (default: none)
 *     KAMELEON_CHAINS         chains (default 4)
 *     KAMELEON_ITERATIONS     draws kept per chain after warm-up (default 2000)
 *     KAMELEON_WARMUP         warm-up iterations per chain (default 1000)
 *     KAMELEON_SEED           seed (default 1)
 *     KAMELEON_WORKERS        worker processes (default 2)
 *     KAMELEON_MAX            proposals per request and worker (default chains / workers)
 *     KAMELEON_LEASE_SECONDS  how long a worker holds its proposals (default: the service's)
 *
 * The target is the banana B(b, v) of Haario et al.: x ~ N(0, diag(v, 1)) twisted by
 * y2 = x2 + b (x1^2 - v). Its mean is 0 and Var y1 = v. It is cut off (log density -inf)
 * outside a band of half-width BAND around the ridge, |y2 - b (y1^2 - v)| > BAND: the
 * cut is symmetric in the untwisted coordinate, so the mean stays 0 and Var y1 stays v,
 * and a sampler meets -inf at every proposal that leaves the band.
 * Replace log_density (and log_density_gradient, for mala, hmc, nuts) with your own.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kameleon_client.h"

#define DIM 2
static const double B = 0.03;  /* twist */
static const double V = 25.0;  /* variance of y1 */
static const double BAND = 4.0;

/* The (unnormalised) log density of the truncated banana. */
static double log_density(const double *y, int dim, void *data) {
    (void)dim;
    (void)data;
    double u = y[1] - B * (y[0] * y[0] - V); /* the untwisted second coordinate */
    if (fabs(u) > BAND) return -INFINITY;   /* outside the support */
    return -0.5 * (y[0] * y[0] / V + u * u);
}

/* The same log density and its gradient, for the algorithms that use gradients. The
 * service checks the gradient against finite differences at the first chain's initial
 * point and stops the session, naming the coordinate, when it is wrong. */
static double log_density_gradient(const double *y, int dim, double *gradient, void *data) {
    double u = y[1] - B * (y[0] * y[0] - V);
    double value = log_density(y, dim, data);
    gradient[0] = -y[0] / V + 2.0 * B * y[0] * u; /* d/dy1 of -(y1^2/v + u^2)/2 */
    gradient[1] = -u;                              /* d/dy2 */
    return value;
}

static const char *env(const char *name, const char *fallback) {
    const char *value = getenv(name);
    return value != NULL && value[0] != '\0' ? value : fallback;
}

static long env_long(const char *name, long fallback) {
    const char *value = getenv(name);
    return value != NULL && value[0] != '\0' ? strtol(value, NULL, 10) : fallback;
}

int main(void) {
    const char *url = env("KAMELEON_URL", "http://127.0.0.1:8000");
    const char *api_key = env("KAMELEON_API_KEY", NULL);
    int chains = (int)env_long("KAMELEON_CHAINS", 4);
    int iterations = (int)env_long("KAMELEON_ITERATIONS", 2000); /* kept after warm-up */
    int warmup = (int)env_long("KAMELEON_WARMUP", 1000);
    int workers = (int)env_long("KAMELEON_WORKERS", 2);
    int max = (int)env_long("KAMELEON_MAX", (chains + workers - 1) / workers);
    double lease = atof(env("KAMELEON_LEASE_SECONDS", "0"));

    const char *algorithm = env("KAMELEON_ALGORITHM", "am");
    kc_client *kc = kc_open(url, api_key);
    if (kc == NULL) return 1;
    char id[128];
    const char *session = env("KAMELEON_SESSION", NULL);
    if (session != NULL) {
        snprintf(id, sizeof id, "%s", session);
    } else {
        /* Start the chains on the ridge, spread over +-1.5 sd of y1. */
        double initial[DIM * 1024];
        if (chains < 1 || chains > 1024) {
            fprintf(stderr, "KAMELEON_CHAINS must be in 1..1024\n");
            return 1;
        }
        for (int c = 0; c < chains; c++) {
            double y1 = chains > 1 ? 1.5 * sqrt(V) * (2.0 * c / (chains - 1) - 1) : 0.0;
            initial[DIM * c] = y1;
            initial[DIM * c + 1] = B * (y1 * y1 - V);
        }
        if (kc_create_session(kc, algorithm, DIM, chains, warmup,
                              warmup + iterations, env_long("KAMELEON_SEED", 1), initial,
                              env("KAMELEON_OPTIONS", NULL), id, sizeof id) != 0) {
            kc_close(kc);
            return 1;
        }
    }
    printf("session %s\n", id);

    int rc = kc_needs_gradient(algorithm)
                 ? kc_run_workers_gradient(url, api_key, id, workers, max, lease,
                                           log_density_gradient, NULL)
                 : kc_run_workers(url, api_key, id, workers, max, lease, log_density, NULL);
    if (rc == 0) rc = kc_print_diagnostics(kc, id);
    kc_close(kc);
    return rc == 0 ? 0 : 1;
}
