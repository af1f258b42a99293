/*
 * A job's report and checks (render.h): several processes of one program, the per-process table
 * with the worst process first, then each process's own output. What is compared is what the
 * engine computed for each process (its peak, its findings, its check verdict); graph_bytes comes
 * with the process (gp_render_process).
 */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "render.h"
#include "render_common.h"

/* A rank for ordering: the number, or a large value when the trace does not say. */
static long rank_of(const gp_render_process *rp)
{
    char *end;
    long v = rp->rank ? strtol(rp->rank, &end, 10) : -1;
    return rp->rank && *end == '\0' && v >= 0 ? v : 1L << 30;
}

typedef struct order_ctx {
    const gp_render_process *procs;
    gp_check_result *const *results;
} order_ctx;

static order_ctx g_order; /* qsort has no context argument; set around each sort */

static int severity(const gp_check_result *r)
{
    return !r ? 3 : r->verdict == GP_CHECK_UNJUDGED ? 0 : r->verdict == GP_CHECK_FAILED ? 1 : 2;
}

static int cmp_worst(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, k = *(const size_t *)b;
    const gp_render_process *x = &g_order.procs[i], *y = &g_order.procs[k];
    if (g_order.results) {
        int sx = severity(g_order.results[i]), sy = severity(g_order.results[k]);
        if (sx != sy)
            return sx < sy ? -1 : 1;
    }
    if (x->p->peak_bytes != y->p->peak_bytes)
        return x->p->peak_bytes > y->p->peak_bytes ? -1 : 1;
    if (x->graph_bytes != y->graph_bytes)
        return x->graph_bytes > y->graph_bytes ? -1 : 1;
    long rx = rank_of(x), ry = rank_of(y);
    if (rx != ry)
        return rx < ry ? -1 : 1;
    return (i > k) - (i < k);
}

/* Indexes of procs, the worst first (caller frees); NULL when out of memory. */
static size_t *worst_first(const gp_render_process *procs, gp_check_result *const *results,
                           size_t n)
{
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!order)
        return NULL;
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    g_order = (order_ctx){procs, results};
    qsort(order, n, sizeof *order, cmp_worst);
    g_order = (order_ctx){0};
    return order;
}

static const char *or_dash(const char *s)
{
    return s && *s ? s : "-";
}

static const char *verdict_name(const gp_check_result *r)
{
    return r->verdict == GP_CHECK_PASSED   ? "pass"
           : r->verdict == GP_CHECK_FAILED ? "fail"
                                           : "unjudged";
}

/* "rank 1 (pid 1234)", or "pid 1234" when the trace has no rank. */
static void process_name(FILE *out, const gp_render_process *rp)
{
    if (rp->rank)
        fprintf(out, "rank %s (pid %ld)", rp->rank, rp->pid);
    else
        fprintf(out, "pid %ld", rp->pid);
}

/* "== rank 1 (pid 1234): path ==", the line above a process's own output. */
static void process_title(FILE *out, const gp_render_process *rp)
{
    fputs("== ", out);
    process_name(out, rp);
    fprintf(out, ": %s ==\n", rp->p->path);
}

/* The world size the processes agree on, or NULL. */
static const char *world_size(const gp_render_process *procs, size_t n)
{
    const char *w = n ? procs[0].world_size : NULL;
    for (size_t i = 1; w && i < n; i++)
        if (!procs[i].world_size || strcmp(procs[i].world_size, w) != 0)
            return NULL;
    return w;
}

int gp_render_job_text(FILE *out, const gp_render_process *procs, size_t n,
                       const gp_render_options *o)
{
    size_t *order = worst_first(procs, NULL, n);
    static const char *const headers[] = {"rank",          "pid",      "peak",
                                          "graph at peak", "findings", "trace"};
    gp__table *t = order ? gp__table_new(6, headers, "lrrrrl") : NULL;
    if (!t) {
        free(order);
        return -1;
    }
    const char *w = world_size(procs, n);
    char peak[32], graph[32];
    const gp_render_process *worst = n ? &procs[order[0]] : NULL;
    fprintf(out, "gradprof job: %zu processes%s%s%s", n, w ? " (world size " : "", w ? w : "",
            w ? ")" : "");
    if (worst) {
        fputs("; the worst: ", out);
        process_name(out, worst);
        fprintf(out, ", peak %s, %s at peak in graph memory, %zu finding%s",
                gp_format_bytes(worst->p->peak_bytes, peak, sizeof peak),
                gp_format_bytes(worst->graph_bytes, graph, sizeof graph), worst->p->n_findings,
                worst->p->n_findings == 1 ? "" : "s");
    }
    fputs("\n\n", out);
    for (size_t k = 0; k < n; k++) {
        const gp_render_process *rp = &procs[order[k]];
        gp__table_cell(t, "%s", or_dash(rp->rank));
        gp__table_cell(t, "%ld", rp->pid);
        gp__table_cell(t, "%s", gp_format_bytes(rp->p->peak_bytes, peak, sizeof peak));
        gp__table_cell(t, "%s", gp_format_bytes(rp->graph_bytes, graph, sizeof graph));
        gp__table_cell(t, "%zu", rp->p->n_findings);
        gp__table_cell(t, "%s", rp->p->path);
    }
    int rc = gp__table_print(out, t, "  ");
    gp__table_free(t);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        fputc('\n', out);
        process_title(out, &procs[order[k]]);
        rc = gp_render_text(out, procs[order[k]].p, o);
    }
    free(order);
    if (fflush(out) != 0 || ferror(out))
        rc = -1;
    return rc;
}

/* A metadata number as a JSON number, or null when absent or not a number. */
static void meta_number(gp__jw *j, const char *key, const char *value)
{
    char *end;
    long long v = value ? strtoll(value, &end, 10) : -1;
    if (value && *value && *end == '\0' && v >= 0)
        gp__jw_i64(j, key, v);
    else
        gp__jw_null(j, key);
}

static void process_head(gp__jw *j, const gp_render_process *rp)
{
    meta_number(j, "rank", rp->rank);
    meta_number(j, "local_rank", rp->local_rank);
    meta_number(j, "world_size", rp->world_size);
    gp__jw_i64(j, "pid", rp->pid);
    gp__jw_str(j, "path", rp->p->path);
}

int gp_render_job_json(FILE *out, const gp_render_process *procs, size_t n)
{
    size_t *order = worst_first(procs, NULL, n);
    if (!order)
        return -1;
    gp__jw j;
    gp__jw_begin(&j, out);
    gp__jw_object(&j, NULL, false);
    gp__jw_str(&j, "schema", "gradprof-job/1");
    meta_number(&j, "world_size", world_size(procs, n));
    gp__jw_array(&j, "processes", false);
    for (size_t k = 0; k < n; k++) {
        const gp_render_process *rp = &procs[order[k]];
        const gp_trace *t = rp->p->trace;
        gp__jw_object(&j, NULL, true);
        process_head(&j, rp);
        gp__jw_str(&j, "command", t ? gp_trace_meta(t, "command") : "");
        gp__jw_str(&j, "host", t ? gp_trace_meta(t, "host") : "");
        gp__jw_u64(&j, "peak_bytes", rp->p->peak_bytes);
        gp__jw_u64(&j, "peak_time_ns", rp->p->peak_time_ns);
        gp__jw_u64(&j, "graph_bytes", rp->graph_bytes);
        gp__jw_u64(&j, "leaked_bytes", rp->p->leaked_bytes);
        gp__jw_array(&j, "findings", true);
        for (size_t f = 0; f < rp->p->n_findings; f++)
            gp__jw_str(&j, NULL, gp_finding_kind_name(rp->p->findings[f].kind));
        gp__jw_end(&j);
        gp__jw_end(&j);
    }
    gp__jw_end(&j);
    gp__jw_end(&j);
    free(order);
    return gp__jw_finish(&j);
}

int gp_render_check_job_text(FILE *out, const gp_render_process *procs,
                             gp_check_result *const *results, size_t n)
{
    size_t *order = worst_first(procs, results, n);
    static const char *const headers[] = {"rank",          "pid",        "verdict", "peak",
                                          "graph at peak", "violations", "trace"};
    gp__table *t = order ? gp__table_new(7, headers, "lrlrrrl") : NULL;
    if (!t) {
        free(order);
        return -1;
    }
    size_t counts[3] = {0};
    for (size_t i = 0; i < n; i++)
        counts[results[i]->verdict]++;
    gp_check_verdict v = gp_check_job_verdict(results, n);
    fprintf(out, "%s job of %zu processes: %zu passed, %zu failed, %zu not judged\n\n",
            v == GP_CHECK_PASSED   ? "PASS"
            : v == GP_CHECK_FAILED ? "FAIL"
                                   : "UNJUDGED",
            n, counts[GP_CHECK_PASSED], counts[GP_CHECK_FAILED], counts[GP_CHECK_UNJUDGED]);
    char peak[32], graph[32];
    for (size_t k = 0; k < n; k++) {
        const gp_render_process *rp = &procs[order[k]];
        gp__table_cell(t, "%s", or_dash(rp->rank));
        gp__table_cell(t, "%ld", rp->pid);
        gp__table_cell(t, "%s", verdict_name(results[order[k]]));
        gp__table_cell(t, "%s", gp_format_bytes(rp->p->peak_bytes, peak, sizeof peak));
        gp__table_cell(t, "%s", gp_format_bytes(rp->graph_bytes, graph, sizeof graph));
        gp__table_cell(t, "%zu", results[order[k]]->n_violations);
        gp__table_cell(t, "%s", rp->p->path);
    }
    int rc = gp__table_print(out, t, "  ");
    gp__table_free(t);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        fputc('\n', out);
        process_title(out, &procs[order[k]]);
        rc = gp_render_check_text(out, procs[order[k]].p, results[order[k]]);
    }
    free(order);
    if (fflush(out) != 0 || ferror(out))
        rc = -1;
    return rc;
}

int gp_render_check_job_json(FILE *out, const gp_render_process *procs,
                             gp_check_result *const *results, size_t n)
{
    size_t *order = worst_first(procs, results, n);
    if (!order)
        return -1;
    gp_check_verdict v = gp_check_job_verdict(results, n);
    gp__jw j;
    gp__jw_begin(&j, out);
    gp__jw_object(&j, NULL, false);
    gp__jw_str(&j, "schema", "gradprof-check-job/1");
    gp__jw_str(&j, "verdict",
               v == GP_CHECK_PASSED   ? "pass"
               : v == GP_CHECK_FAILED ? "fail"
                                      : "unjudged");
    gp__jw_bool(&j, "passed", v == GP_CHECK_PASSED);
    gp__jw_array(&j, "processes", false);
    for (size_t k = 0; k < n; k++) {
        const gp_render_process *rp = &procs[order[k]];
        const gp_check_result *r = results[order[k]];
        gp__jw_object(&j, NULL, true);
        process_head(&j, rp);
        gp__jw_str(&j, "verdict", verdict_name(r));
        gp__jw_bool(&j, "passed", r->verdict == GP_CHECK_PASSED);
        gp__jw_u64(&j, "peak_bytes", rp->p->peak_bytes);
        gp__jw_u64(&j, "graph_bytes", rp->graph_bytes);
        gp__jw_u64(&j, "violations", r->n_violations);
        gp__jw_array(&j, "failed_rules", true);
        for (size_t i = 0; i < r->n_rules; i++)
            if (r->rules[i].n > 0)
                gp__jw_str(&j, NULL, r->rules[i].name);
        gp__jw_end(&j);
        gp__jw_end(&j);
    }
    gp__jw_end(&j);
    gp__jw_end(&j);
    free(order);
    return gp__jw_finish(&j);
}
