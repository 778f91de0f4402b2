/*
 * kameleon_client.c: the ask/tell loop over HTTP (libcurl) and JSON (cJSON).
 * See kameleon_client.h for the interface.
 */
#define _POSIX_C_SOURCE 200809L

#include "kameleon_client.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KC_ATTEMPTS 10        /* tries per request on connection errors and 503 */
#define KC_BACKOFF_FIRST 0.1  /* seconds before the first retry, doubled each time... */
#define KC_BACKOFF_MAX 5.0    /* ...up to this */
#define KC_IDLE_SECONDS 0.1   /* pause before asking again when nothing is free */

struct kc_client {
    CURL *curl;
    char *url;
    struct curl_slist *headers;
    char *body;  /* the last answer's body */
    size_t size;
};

static void pause_for(double seconds) {
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
}

static size_t on_body(char *data, size_t size, size_t count, void *user) {
    kc_client *kc = user;
    size_t n = size * count;
    char *grown = realloc(kc->body, kc->size + n + 1);
    if (grown == NULL) return 0; /* makes curl fail the transfer */
    memcpy(grown + kc->size, data, n);
    kc->body = grown;
    kc->size += n;
    kc->body[kc->size] = '\0';
    return n;
}

kc_client *kc_open(const char *url, const char *api_key) {
    static int curl_ready = 0;
    if (!curl_ready) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        curl_ready = 1;
    }
    kc_client *kc = calloc(1, sizeof *kc);
    if (kc == NULL) return NULL;
    kc->curl = curl_easy_init();
    kc->url = strdup(url);
    kc->headers = curl_slist_append(NULL, "Content-Type: application/json");
    kc->headers = curl_slist_append(kc->headers, "Accept: application/json");
    if (api_key != NULL && api_key[0] != '\0') {
        char header[512];
        snprintf(header, sizeof header, "X-API-Key: %s", api_key);
        kc->headers = curl_slist_append(kc->headers, header);
    }
    if (kc->curl == NULL || kc->url == NULL || kc->headers == NULL) {
        kc_close(kc);
        return NULL;
    }
    size_t n = strlen(kc->url);
    while (n > 0 && kc->url[n - 1] == '/') kc->url[--n] = '\0'; /* no trailing slash */
    curl_easy_setopt(kc->curl, CURLOPT_HTTPHEADER, kc->headers);
    curl_easy_setopt(kc->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(kc->curl, CURLOPT_WRITEDATA, kc);
    curl_easy_setopt(kc->curl, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(kc->curl, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(kc->curl, CURLOPT_NOSIGNAL, 1L);
    return kc;
}

void kc_close(kc_client *kc) {
    if (kc == NULL) return;
    if (kc->curl != NULL) curl_easy_cleanup(kc->curl);
    curl_slist_free_all(kc->headers);
    free(kc->url);
    free(kc->body);
    free(kc);
}

/* Send one request (body NULL: GET) and parse the answer into *answer (NULL if it is not
 * JSON). Connection errors and 503 are retried with backoff. Returns the HTTP status, or
 * -1 when the service could not be reached. */
static long request(kc_client *kc, const char *path, const cJSON *body, cJSON **answer) {
    char url[1024];
    snprintf(url, sizeof url, "%s%s", kc->url, path);
    char *text = body != NULL ? cJSON_PrintUnformatted(body) : NULL;
    long status = -1;
    double backoff = KC_BACKOFF_FIRST;
    *answer = NULL;
    for (int attempt = 1;; attempt++) {
        kc->size = 0;
        curl_easy_setopt(kc->curl, CURLOPT_URL, url);
        if (text != NULL) {
            curl_easy_setopt(kc->curl, CURLOPT_POSTFIELDS, text);
        } else {
            curl_easy_setopt(kc->curl, CURLOPT_HTTPGET, 1L);
        }
        CURLcode rc = curl_easy_perform(kc->curl);
        status = -1;
        if (rc == CURLE_OK) curl_easy_getinfo(kc->curl, CURLINFO_RESPONSE_CODE, &status);
        if (status != -1 && status != 503) break;
        if (attempt == KC_ATTEMPTS) {
            fprintf(stderr, "kameleon: %s: giving up after %d attempts\n", path, attempt);
            status = -1;
            break;
        }
        double wait = backoff * (0.5 + 0.5 * rand() / (double)RAND_MAX); /* jitter */
        fprintf(stderr, "kameleon: %s: %s; retrying in %.2f s\n", path,
                rc != CURLE_OK ? curl_easy_strerror(rc) : "503 service unavailable", wait);
        pause_for(wait);
        backoff = fmin(2 * backoff, KC_BACKOFF_MAX);
    }
    free(text);
    if (status != -1 && kc->size > 0) *answer = cJSON_Parse(kc->body);
    return status;
}

/* Report an error answer (RFC 9457 problem details) on stderr. */
static void report(const char *what, long status, const cJSON *problem) {
    const cJSON *detail = cJSON_GetObjectItemCaseSensitive(problem, "detail");
    fprintf(stderr, "kameleon: %s: HTTP %ld: %s\n", what, status,
            cJSON_IsString(detail) ? detail->valuestring : "(no detail)");
}

int kc_create_session(kc_client *kc, const char *algorithm, int dim, int chains, int warmup,
                      int max_iterations, long seed, const double *initial,
                      const char *options_json, char *id, size_t id_size) {
    cJSON *body = cJSON_CreateObject();
    cJSON_AddStringToObject(body, "algorithm", algorithm);
    cJSON_AddNumberToObject(body, "dim", dim);
    cJSON_AddNumberToObject(body, "chains", chains);
    cJSON_AddNumberToObject(body, "warmup", warmup);
    cJSON_AddNumberToObject(body, "max_iterations", max_iterations);
    cJSON_AddNumberToObject(body, "seed", (double)seed);
    if (initial != NULL) {
        cJSON *rows = cJSON_AddArrayToObject(body, "initial");
        for (int c = 0; c < chains; c++) {
            cJSON_AddItemToArray(rows, cJSON_CreateDoubleArray(initial + (size_t)c * dim, dim));
        }
    }
    if (options_json != NULL && options_json[0] != '\0') {
        cJSON *options = cJSON_Parse(options_json);
        if (!cJSON_IsObject(options)) {
            fprintf(stderr, "kameleon: the options are not a JSON object: %s\n", options_json);
            cJSON_Delete(options);
            cJSON_Delete(body);
            return -1;
        }
        cJSON_AddItemToObject(body, "options", options);
    }
    cJSON *answer;
    long status = request(kc, "/v1/sessions", body, &answer);
    cJSON_Delete(body);
    const cJSON *sid = cJSON_GetObjectItemCaseSensitive(answer, "id");
    int rc = -1;
    if (status == 201 && cJSON_IsString(sid) && strlen(sid->valuestring) < id_size) {
        strcpy(id, sid->valuestring);
        rc = 0;
    } else if (status != -1) {
        report("create session", status, answer);
    }
    cJSON_Delete(answer);
    return rc;
}

/* Remove from `results` every result whose id a 409 answer lists in `ids`; how many. */
static int drop_conflicts(cJSON *results, const cJSON *problem) {
    int dropped = 0;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(problem, "ids");
    const cJSON *bad;
    cJSON_ArrayForEach(bad, ids) {
        for (int i = cJSON_GetArraySize(results) - 1; i >= 0; i--) {
            const cJSON *rid = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(results, i), "id");
            if (cJSON_IsString(bad) && strcmp(rid->valuestring, bad->valuestring) == 0) {
                fprintf(stderr, "kameleon: %s was answered by another worker; dropped\n",
                        bad->valuestring);
                cJSON_DeleteItemFromArray(results, i);
                dropped++;
            }
        }
    }
    return dropped;
}

/* The log density a worker evaluates: without a gradient, or with one. */
typedef struct {
    kc_log_density f;
    kc_log_density_gradient fg;
    void *data;
} target;

int kc_needs_gradient(const char *algorithm) {
    static const char *const gradient_algorithms[] = {"mala", "hmc", "nuts"};
    for (size_t i = 0; i < sizeof gradient_algorithms / sizeof *gradient_algorithms; i++) {
        if (algorithm != NULL && strcmp(algorithm, gradient_algorithms[i]) == 0) return 1;
    }
    return 0;
}

/* Evaluate the target at every proposal of an ask/step answer: a new array of results.
 * Every kind of proposal (init, proposal, leapfrog, gradient_check, or one this client
 * does not know) is evaluated the same way. */
static cJSON *evaluate(const cJSON *proposals, const target *t, kc_counts *counts) {
    cJSON *results = cJSON_CreateArray();
    const cJSON *p;
    cJSON_ArrayForEach(p, proposals) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(p, "x");
        int dim = cJSON_GetArraySize(x);
        size_t n = (size_t)(dim > 0 ? dim : 1);
        double *point = malloc(2 * sizeof(double) * n);
        double *gradient = point + n;
        for (int j = 0; j < dim; j++) point[j] = cJSON_GetArrayItem(x, j)->valuedouble;
        double value = t->fg != NULL ? t->fg(point, dim, gradient, t->data)
                                     : t->f(point, dim, t->data);
        cJSON *result = cJSON_CreateObject();
        cJSON_AddStringToObject(result, "id", cJSON_GetObjectItemCaseSensitive(p, "id")->valuestring);
        if (isinf(value) && value < 0) {
            cJSON_AddNullToObject(result, "log_density"); /* JSON has no -Infinity */
            counts->outside++;
        } else {
            cJSON_AddNumberToObject(result, "log_density", value);
            /* The gradient only where the log density is finite (outside, none is due). */
            if (t->fg != NULL)
                cJSON_AddItemToObject(result, "gradient", cJSON_CreateDoubleArray(gradient, dim));
        }
        free(point);
        counts->evaluations++;
        cJSON_AddItemToArray(results, result);
    }
    return results;
}

/* A chain whose initial point is outside the support waits for a new one: say so. */
static int check_outcomes(const cJSON *answer) {
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(answer, "results")) {
        const cJSON *outcome = cJSON_GetObjectItemCaseSensitive(r, "outcome");
        if (cJSON_IsString(outcome) && strcmp(outcome->valuestring, "outside_support") == 0) {
            fprintf(stderr, "kameleon: the initial point %s is outside the support; reset its chain\n",
                    cJSON_GetObjectItemCaseSensitive(r, "id")->valuestring);
            return -1;
        }
    }
    return 0;
}

static int work(kc_client *kc, const char *id, int max, double lease_seconds, const target *t,
                kc_counts *counts) {
    kc_counts ignored = {0, 0};
    if (counts == NULL) counts = &ignored;
    char ask_path[512], step_path[512];
    snprintf(ask_path, sizeof ask_path, "/v1/sessions/%s/ask", id);
    snprintf(step_path, sizeof step_path, "/v1/sessions/%s/step", id);

    cJSON *ask = cJSON_CreateObject();
    cJSON_AddNumberToObject(ask, "max", max);
    if (lease_seconds > 0) cJSON_AddNumberToObject(ask, "lease_seconds", lease_seconds);

    cJSON *answer;
    long status = request(kc, ask_path, ask, &answer);
    int rc = -1;
    for (;;) {
        if (status != 200) {
            if (status != -1) report("ask/step", status, answer);
            break;
        }
        if (check_outcomes(answer) != 0) break;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(answer, "done"))) {
            rc = 0;
            break;
        }
        const cJSON *proposals = cJSON_GetObjectItemCaseSensitive(answer, "proposals");
        if (cJSON_GetArraySize(proposals) == 0) {
            /* Every unfinished chain is leased to another worker: wait, then ask again. */
            cJSON_Delete(answer);
            pause_for(KC_IDLE_SECONDS);
            status = request(kc, ask_path, ask, &answer);
            continue;
        }
        /* Tell the values and ask for the next proposals in one round trip. */
        cJSON *step = cJSON_CreateObject();
        cJSON *results = evaluate(proposals, t, counts);
        cJSON_AddItemToObject(step, "results", results);
        cJSON_AddNumberToObject(step, "max", max);
        if (lease_seconds > 0) cJSON_AddNumberToObject(step, "lease_seconds", lease_seconds);
        cJSON_Delete(answer);
        status = request(kc, step_path, step, &answer);
        while (status == 409) {
            /* Another worker told some of these first (our lease had run out): drop the
             * ids the service names and send the rest (any already applied among them
             * answer `duplicate`). */
            if (drop_conflicts(results, answer) == 0) break; /* names none of ours */
            cJSON_Delete(answer);
            status = request(kc, step_path, step, &answer);
        }
        cJSON_Delete(step);
    }
    cJSON_Delete(answer);
    cJSON_Delete(ask);
    return rc;
}

int kc_work(kc_client *kc, const char *id, int max, double lease_seconds, kc_log_density f,
            void *data, kc_counts *counts) {
    target t = {f, NULL, data};
    return work(kc, id, max, lease_seconds, &t, counts);
}

int kc_work_gradient(kc_client *kc, const char *id, int max, double lease_seconds,
                     kc_log_density_gradient f, void *data, kc_counts *counts) {
    target t = {NULL, f, data};
    return work(kc, id, max, lease_seconds, &t, counts);
}

static int run_workers(const char *url, const char *api_key, const char *id, int workers, int max,
                       double lease_seconds, const target *t) {
    fflush(stdout);
    fflush(stderr);
    pid_t *pids = calloc((size_t)workers, sizeof *pids);
    if (pids == NULL) return -1;
    for (int w = 0; w < workers; w++) {
        pids[w] = fork();
        if (pids[w] == 0) {
            /* The worker: its own connection, its own backoff jitter. */
            srand((unsigned)getpid());
            kc_client *kc = kc_open(url, api_key);
            kc_counts counts = {0, 0};
            int rc = kc != NULL ? work(kc, id, max, lease_seconds, t, &counts) : -1;
            kc_close(kc);
            printf("worker %d: %ld log densities, %ld outside the support\n", w,
                   counts.evaluations, counts.outside);
            fflush(stdout);
            _exit(rc == 0 ? 0 : 1);
        }
        if (pids[w] < 0) perror("kameleon: fork");
    }
    int failed = 0;
    for (int w = 0; w < workers; w++) {
        int wstatus = 0;
        if (pids[w] < 0 || waitpid(pids[w], &wstatus, 0) < 0 || !WIFEXITED(wstatus) ||
            WEXITSTATUS(wstatus) != 0) {
            failed++;
        }
    }
    free(pids);
    if (failed) fprintf(stderr, "kameleon: %d of %d workers failed\n", failed, workers);
    return failed ? -1 : 0;
}

int kc_run_workers(const char *url, const char *api_key, const char *id, int workers, int max,
                   double lease_seconds, kc_log_density f, void *data) {
    target t = {f, NULL, data};
    return run_workers(url, api_key, id, workers, max, lease_seconds, &t);
}

int kc_run_workers_gradient(const char *url, const char *api_key, const char *id, int workers,
                            int max, double lease_seconds, kc_log_density_gradient f,
                            void *data) {
    target t = {NULL, f, data};
    return run_workers(url, api_key, id, workers, max, lease_seconds, &t);
}

static double number(const cJSON *object, const char *key) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
    return cJSON_IsNumber(item) ? item->valuedouble : NAN;
}

/* The warnings, one line per kind with the parameters and chains it concerns. */
static void print_warnings(const cJSON *warnings) {
    int n = cJSON_GetArraySize(warnings);
    for (int i = 0; i < n; i++) {
        const cJSON *w = cJSON_GetArrayItem(warnings, i);
        const char *code = cJSON_GetObjectItemCaseSensitive(w, "code")->valuestring;
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) {
            const cJSON *v = cJSON_GetArrayItem(warnings, j);
            seen = strcmp(cJSON_GetObjectItemCaseSensitive(v, "code")->valuestring, code) == 0;
        }
        if (seen) continue; /* printed with the first of its kind */
        printf("warning [%s]", code);
        int same = 0, on = 0;
        for (int j = i; j < n; j++) {
            const cJSON *v = cJSON_GetArrayItem(warnings, j);
            if (strcmp(cJSON_GetObjectItemCaseSensitive(v, "code")->valuestring, code) != 0)
                continue;
            same++;
            const cJSON *param = cJSON_GetObjectItemCaseSensitive(v, "parameter");
            const cJSON *chain = cJSON_GetObjectItemCaseSensitive(v, "chain");
            if (cJSON_IsString(param))
                printf("%s%s", on++ ? ", " : " on ", param->valuestring);
            else if (cJSON_IsNumber(chain))
                printf("%schain %d", on++ ? ", " : " on ", chain->valueint);
        }
        printf(": %s", cJSON_GetObjectItemCaseSensitive(w, "message")->valuestring);
        if (same > 1) printf(" (and %d more)", same - 1);
        printf("\n");
    }
    if (n > 0)
        printf("    try: a longer run (KAMELEON_WARMUP, KAMELEON_ITERATIONS); the README, \"Has it "
               "converged?\", says what each warning means\n");
}

int kc_print_diagnostics(kc_client *kc, const char *id) {
    char path[512];
    snprintf(path, sizeof path, "/v1/sessions/%s/diagnostics", id);
    cJSON *answer;
    long status = request(kc, path, NULL, &answer);
    if (status != 200) {
        if (status != -1) report("diagnostics", status, answer);
        cJSON_Delete(answer);
        return -1;
    }
    if (!(number(answer, "draws") >= 1)) {
        printf("no draws after warm-up yet: nothing to summarise (KAMELEON_ITERATIONS counts the "
               "draws kept after warm-up)\n");
        cJSON_Delete(answer);
        return 0;
    }
    printf("%-10s %10s %10s %10s %10s %8s\n", "parameter", "mean", "sd", "mcse_mean", "ess_bulk",
           "r_hat");
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(answer, "parameters")) {
        printf("%-10s %10.4f %10.4f %10.4f %10.1f %8.4f\n",
               cJSON_GetObjectItemCaseSensitive(p, "name")->valuestring, number(p, "mean"),
               number(p, "sd"), number(p, "mcse_mean"), number(p, "ess_bulk"), number(p, "r_hat"));
    }
    print_warnings(cJSON_GetObjectItemCaseSensitive(answer, "warnings"));
    cJSON_Delete(answer);
    return 0;
}
