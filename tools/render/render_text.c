/*
 * render_text — the human report of a gp_profile (`gradprof report`, the default format).
 *
 * Layout, top to bottom: a one-line summary; the trace and program (with a warning when the trace
 * was damaged); peak, live at exit and temporaries; live at peak by category (and per device); the
 * ranked tables (tag keys, sites, temporaries, leaks with stacks); regions; iterations; tensors
 * saved for backward; findings. Ranked tables show o->top rows (0 = all) and say how many more
 * there are. Every number comes from the profile; orderings are deterministic (render_common.h).
 */
#define _GNU_SOURCE /* vasprintf */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "render.h"
#include "render_common.h"

#define INDENT "  "
#define LEAK_FRAMES 4 /* frames printed per leaking site */

typedef struct text_ctx {
    FILE *out;
    gp_profile *p;
    size_t top; /* SIZE_MAX = all */
    gp__measure measure;
    bool color;
    bool oom; /* an allocation failed: the report is incomplete, return -1 */
} text_ctx;

/* Writes the formatted text with control characters from trace strings, newlines included, made
 * harmless (gp__sanitize_text): one call writes within one line. */
static void vput(text_ctx *c, const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) {
        c->oom = true;
        return;
    }
    fputs(gp__sanitize_text(s, false), c->out);
    free(s);
}

static void put(text_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vput(c, fmt, ap);
    va_end(ap);
}

static void title(text_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void title(text_ctx *c, const char *fmt, ...)
{
    fputc('\n', c->out);
    if (c->color)
        fputs("\033[1m", c->out);
    va_list ap;
    va_start(ap, fmt);
    vput(c, fmt, ap);
    va_end(ap);
    if (c->color)
        fputs("\033[0m", c->out);
    fputc('\n', c->out);
}

/* One "Label      value" line of the header block; `label` NULL continues the previous one. */
static void field(text_ctx *c, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void field(text_ctx *c, const char *label, const char *fmt, ...)
{
    fprintf(c->out, "%-14s", label ? label : "");
    va_list ap;
    va_start(ap, fmt);
    vput(c, fmt, ap);
    va_end(ap);
    fputc('\n', c->out);
}

static const char *plural(uint64_t n)
{
    return n == 1 ? "" : "s";
}

static const char *dash(const char *s)
{
    return s && *s ? s : "-";
}

static const char *meta(const gp_profile *p, const char *key)
{
    const char *v = p->trace ? gp_trace_meta(p->trace, key) : NULL;
    return v && *v ? v : NULL;
}

static uint64_t device_peak(const gp_profile *p, int32_t device)
{
    for (size_t i = 0; i < p->n_devices; i++)
        if (p->devices[i].device == device)
            return p->devices[i].peak_bytes;
    return 0;
}

/* Prints the table and the "(N more)" line; frees it. */
static void finish_table_at(text_ctx *c, gp__table *t, size_t shown, size_t total,
                            const char *indent)
{
    if (!t) {
        c->oom = true;
        return;
    }
    if (total > shown)
        gp__table_note(t, "(%zu more; --top 0 shows all)", total - shown);
    if (gp__table_print(c->out, t, indent) != 0)
        c->oom = c->oom || !ferror(c->out);
    gp__table_free(t);
}

static void finish_table(text_ctx *c, gp__table *t, size_t shown, size_t total)
{
    finish_table_at(c, t, shown, total, INDENT);
}

/* ---- summary and header ---------------------------------------------------------------------- */

static void summary(text_ctx *c)
{
    const gp_profile *p = c->p;
    char b1[32], b2[32], t1[32], dev[16];
    fprintf(c->out, "gradprof report: peak %s (%s) at %s, %s live at %s, ",
            gp_format_bytes(p->peak_bytes, b1, sizeof b1),
            gp__device_name(p->primary_device, dev, sizeof dev),
            gp__format_ns(p->peak_time_ns, t1, sizeof t1),
            gp_format_bytes(p->leaked_bytes, b2, sizeof b2),
            p->info && p->info->clean_end ? "exit" : "the end");
    if (p->n_findings) {
        fprintf(c->out, "%zu gradient-leak finding%s (", p->n_findings,
                p->n_findings == 1 ? "" : "s");
        bool seen[GP_FIND_KIND_COUNT] = {false}, first = true;
        for (size_t i = 0; i < p->n_findings; i++) {
            gp_finding_kind k = p->findings[i].kind;
            if ((unsigned)k < GP_FIND_KIND_COUNT && seen[k])
                continue;
            if ((unsigned)k < GP_FIND_KIND_COUNT)
                seen[k] = true;
            fprintf(c->out, "%s%s", first ? "" : ", ", gp_finding_kind_name(k));
            first = false;
        }
        fputc(')', c->out);
    } else
        fputs("no gradient-leak findings", c->out);
    if (p->info && p->info->damaged)
        fputs("; trace damaged", c->out);
    fputc('\n', c->out);
}

static void header(text_ctx *c)
{
    const gp_profile *p = c->p;
    const gp_trace_info *in = p->info;
    char b1[32], b2[32], n1[32], n2[32], n3[32], n4[32], x1[64];
    fputc('\n', c->out);
    field(c, "Program", "%s", meta(p, "command") ? meta(p, "command") : "(unknown)");

    char proc[512];
    int k = snprintf(proc, sizeof proc, "pid %s", meta(p, "pid") ? meta(p, "pid") : "?");
    if (meta(p, "host") && k > 0 && (size_t)k < sizeof proc)
        k += snprintf(proc + k, sizeof proc - (size_t)k, " on %s", meta(p, "host"));
    if (meta(p, "start_time") && k > 0 && (size_t)k < sizeof proc)
        k += snprintf(proc + k, sizeof proc - (size_t)k, ", started %s", meta(p, "start_time"));
    if (meta(p, "mode") && k > 0 && (size_t)k < sizeof proc)
        k += snprintf(proc + k, sizeof proc - (size_t)k, ", recorded by %s", meta(p, "mode"));
    if (meta(p, "gradprof_version") && k > 0 && (size_t)k < sizeof proc)
        snprintf(proc + k, sizeof proc - (size_t)k, " (gradprof %s)", meta(p, "gradprof_version"));
    field(c, "Process", "%s", proc);

    if (in) {
        field(c, "Trace", "%s: %s, format %u.%u, %s events in %s chunks%s", dash(p->path),
              gp_format_bytes(in->file_bytes, b1, sizeof b1), in->version_major, in->version_minor,
              gp__format_count(in->events, n1, sizeof n1),
              gp__format_count(in->chunks, n2, sizeof n2), in->clean_end ? ", ended cleanly" : "");
    } else {
        field(c, "Trace", "%s", dash(p->path));
    }
    field(c, "Duration", "%s", gp__format_ns(p->duration_ns, b1, sizeof b1));
    field(c, "Activity", "%s allocation%s (%s in total), %s free%s, %s retag%s",
          gp__format_count(p->alloc_count, n1, sizeof n1), plural(p->alloc_count),
          gp_format_bytes(p->total_allocated_bytes, b2, sizeof b2),
          gp__format_count(p->free_count, n2, sizeof n2), plural(p->free_count),
          gp__format_count(p->retag_count, n3, sizeof n3), plural(p->retag_count));
    if (p->unknown_frees)
        field(c, NULL, "%s free%s of memory allocated before recording started (ignored)",
              gp__format_count(p->unknown_frees, n4, sizeof n4), plural(p->unknown_frees));

    if (!in)
        return;
    const char *warn = c->color ? "\033[33mWarning\033[0m       " : "Warning       ";
    if (in->damaged) {
        fprintf(c->out, "%strace damaged at byte %s (%s):\n", warn,
                gp__format_count(in->damage_offset, n1, sizeof n1), in->damage_reason);
        field(c, NULL, "%s lost after it, with the end of the program's recording;",
              gp__format_bytes_exact(in->bytes_lost, x1, sizeof x1));
        field(c, NULL, "this report covers the %s events recorded before it",
              gp__format_count(in->events, n3, sizeof n3));
    } else if (!in->clean_end) {
        fprintf(c->out, "%sthe trace has no end record: the program did not finish recording\n",
                warn);
        field(c, NULL,
              "(it crashed, was killed or is still running); the report covers what "
              "was written");
    }
    if (in->lost_events)
        fprintf(c->out, "%sthe recorder dropped %s events (out of memory or buffers full)\n", warn,
                gp__format_count(in->lost_events, n1, sizeof n1));
}

/* "exit" when the program finished recording, else "the end of the trace". */
static bool ended_cleanly(const gp_profile *p)
{
    return p->info && p->info->clean_end;
}

static void headline(text_ctx *c)
{
    const gp_profile *p = c->p;
    char x1[64], n1[32], t1[32], dev[16];
    fputc('\n', c->out);
    field(c, "Peak", "%s at %s on %s", gp__format_bytes_exact(p->peak_bytes, x1, sizeof x1),
          gp__format_ns(p->peak_time_ns, t1, sizeof t1),
          gp__device_name(p->primary_device, dev, sizeof dev));
    for (size_t i = 0; i < p->n_devices; i++) {
        const gp_device_stats *d = &p->devices[i];
        if (d->device == p->primary_device)
            continue;
        field(c, NULL, "%s at %s on %s", gp__format_bytes_exact(d->peak_bytes, x1, sizeof x1),
              gp__format_ns(d->peak_time_ns, t1, sizeof t1),
              gp__device_name(d->device, dev, sizeof dev));
    }
    field(c, ended_cleanly(p) ? "Live at exit" : "Live at end", "%s in %s allocation%s",
          gp__format_bytes_exact(p->leaked_bytes, x1, sizeof x1),
          gp__format_count(p->leaked_count, n1, sizeof n1), p->leaked_count == 1 ? "" : "s");
    field(c, "Temporaries", "%s allocation%s freed before their thread's next allocation",
          gp__format_count(p->temporary_count, n1, sizeof n1), p->temporary_count == 1 ? "" : "s");
}

/* ---- categories ------------------------------------------------------------------------------ */

static void categories(text_ctx *c, const gp_device_stats *d, bool primary)
{
    char dev[16];
    title(c, "Live at peak by category (%s)", gp__device_name(d->device, dev, sizeof dev));
    static const char *const h[] = {"category",  "at peak", "bytes",
                                    "% of peak", "own max", "live at end"};
    gp__table *t = gp__table_new(6, h, "lrrrrr");
    uint64_t sum_end = 0;
    for (int k = 0; k < LP_CAT_COUNT; k++) {
        uint64_t at = d->by_category_at_peak[k], end = d->by_category_live[k];
        uint64_t mx = d->by_category_max[k];
        sum_end += end;
        /* The primary device lists every category (a 0 is an answer: "nothing saved"); the
         * others only what they held. */
        if (!primary && !at && !end && !mx)
            continue;
        char b1[32], b2[32], b3[32], n1[32], pc[16];
        gp__table_cell(t, "%s", lp_category_name((lp_category)k));
        gp__table_cell(t, "%s", gp_format_bytes(at, b1, sizeof b1));
        gp__table_cell(t, "%s", gp__format_count(at, n1, sizeof n1));
        gp__table_cell(t, "%s", gp__format_percent(at, d->peak_bytes, pc, sizeof pc));
        gp__table_cell(t, "%s", gp_format_bytes(mx, b2, sizeof b2));
        gp__table_cell(t, "%s", gp_format_bytes(end, b3, sizeof b3));
    }
    char b1[32], b2[32], b3[32], n1[32], pc[16];
    gp__table_cell(t, "total");
    gp__table_cell(t, "%s", gp_format_bytes(d->peak_bytes, b1, sizeof b1));
    gp__table_cell(t, "%s", gp__format_count(d->peak_bytes, n1, sizeof n1));
    gp__table_cell(t, "%s", gp__format_percent(d->peak_bytes, d->peak_bytes, pc, sizeof pc));
    gp__table_cell(t, "%s", gp_format_bytes(d->peak_bytes, b2, sizeof b2));
    gp__table_cell(t, "%s", gp_format_bytes(sum_end, b3, sizeof b3));
    finish_table(c, t, 0, 0);
}

/* ---- ranked tables --------------------------------------------------------------------------- */

static const char *measure_title(gp__measure m)
{
    switch (m) {
    case GP__MEASURE_TOTAL:
        return "bytes allocated";
    case GP__MEASURE_COUNT:
        return "allocations";
    case GP__MEASURE_LEAKED:
        return "bytes live at exit";
    default:
        return "bytes at peak";
    }
}

/* Counts the rows of an ordering whose measure is non-zero (the ranked tables skip zeros). */
static size_t nonzero_sites(const gp_profile *p, const size_t *ix, size_t n, gp__measure m)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += gp__stats_measure(&p->sites[ix[i]].stats, m) != 0;
    return k;
}

static void tag_keys(text_ctx *c)
{
    gp_profile *p = c->p;
    size_t n = 0;
    size_t *ix = gp__sorted_tag_keys(p, c->measure, &n);
    if (n && !ix) {
        c->oom = true;
        return;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += gp__stats_measure(&p->tag_keys[ix[i]].stats, c->measure) != 0;
    title(c, "Top tags by %s (category, op, module)", measure_title(c->measure));
    if (!total) {
        fprintf(c->out, INDENT "none\n");
        free(ix);
        return;
    }
    bool multi = p->n_devices > 1;
    static const char *const h[] = {"#",      "at peak",  "% of peak", "allocated", "count",
                                    "device", "category", "op",        "module"};
    static const char *const h1[] = {"#",     "at peak",  "% of peak", "allocated",
                                     "count", "category", "op",        "module"};
    gp__table *t = multi ? gp__table_new(9, h, "rrrrrllll") : gp__table_new(8, h1, "rrrrrlll");
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < c->top; i++) {
        const gp_tag_key *k = &p->tag_keys[ix[i]];
        if (!gp__stats_measure(&k->stats, c->measure))
            continue;
        char b1[32], b2[32], n1[32], pc[16], dev[16];
        gp__table_cell(t, "%zu", ++shown);
        gp__table_cell(t, "%s", gp_format_bytes(k->stats.peak_bytes, b1, sizeof b1));
        gp__table_cell(
            t, "%s",
            gp__format_percent(k->stats.peak_bytes, device_peak(p, k->device), pc, sizeof pc));
        gp__table_cell(t, "%s", gp_format_bytes(k->stats.total_bytes, b2, sizeof b2));
        gp__table_cell(t, "%s", gp__format_count(k->stats.count, n1, sizeof n1));
        if (multi)
            gp__table_cell(t, "%s", gp__device_name(k->device, dev, sizeof dev));
        gp__table_cell(t, "%s", lp_category_name(k->category));
        gp__table_cell(t, "%s", dash(k->op));
        gp__table_cell(t, "%s", dash(k->module));
    }
    finish_table(c, t, shown, total);
    free(ix);
}

static void sites(text_ctx *c)
{
    gp_profile *p = c->p;
    size_t n = 0;
    size_t *ix = gp__sorted_sites(p, c->measure, &n);
    if (n && !ix) {
        c->oom = true;
        return;
    }
    size_t total = nonzero_sites(p, ix, n, c->measure);
    title(c, "Top sites by %s", measure_title(c->measure));
    if (!total) {
        fprintf(c->out, INDENT "none\n");
        free(ix);
        return;
    }
    /* op: the op whose buffers this call stack made last (a stack is the same for every layer
     * that runs the same code, so no module is shown here; the tag tables have them). */
    bool multi = p->n_devices > 1;
    static const char *const h[] = {"#",      "at peak",  "% of peak", "allocated", "count",
                                    "device", "category", "op",        "site"};
    static const char *const h1[] = {"#",     "at peak",  "% of peak", "allocated",
                                     "count", "category", "op",        "site"};
    gp__table *t = multi ? gp__table_new(9, h, "rrrrrllll") : gp__table_new(8, h1, "rrrrrlll");
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < c->top; i++) {
        const gp_site *s = &p->sites[ix[i]];
        if (!gp__stats_measure(&s->stats, c->measure))
            continue;
        char b1[32], b2[32], n1[32], pc[16], dev[16];
        gp__table_cell(t, "%zu", ++shown);
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.peak_bytes, b1, sizeof b1));
        gp__table_cell(
            t, "%s",
            gp__format_percent(s->stats.peak_bytes, device_peak(p, s->device), pc, sizeof pc));
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.total_bytes, b2, sizeof b2));
        gp__table_cell(t, "%s", gp__format_count(s->stats.count, n1, sizeof n1));
        if (multi)
            gp__table_cell(t, "%s", gp__device_name(s->device, dev, sizeof dev));
        gp__table_cell(t, "%s", lp_category_name(s->category));
        gp__table_cell(t, "%s", dash(s->op));
        gp__table_cell(t, "%s", gp_site_label(p, s->stack));
    }
    finish_table(c, t, shown, total);
    free(ix);
}

static void temporaries(text_ctx *c)
{
    gp_profile *p = c->p;
    char n1[32];
    title(c, "Temporaries: %s allocation%s freed before their thread's next allocation",
          gp__format_count(p->temporary_count, n1, sizeof n1), p->temporary_count == 1 ? "" : "s");
    size_t n = 0;
    size_t *ix = gp__sorted_sites(p, GP__MEASURE_TEMPORARIES, &n);
    if (n && !ix) {
        c->oom = true;
        return;
    }
    size_t total = nonzero_sites(p, ix, n, GP__MEASURE_TEMPORARIES);
    if (!total) {
        fprintf(c->out, INDENT "none\n");
        free(ix);
        return;
    }
    static const char *const h[] = {"#", "temporaries", "of allocations", "allocated", "site"};
    gp__table *t = gp__table_new(5, h, "rrrrl");
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < c->top; i++) {
        const gp_site *s = &p->sites[ix[i]];
        if (!s->stats.temporaries)
            continue;
        char b1[32], n2[32], pc[16];
        gp__table_cell(t, "%zu", ++shown);
        gp__table_cell(t, "%s", gp__format_count(s->stats.temporaries, n2, sizeof n2));
        gp__table_cell(t, "%s",
                       gp__format_percent(s->stats.temporaries, s->stats.count, pc, sizeof pc));
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.total_bytes, b1, sizeof b1));
        gp__table_cell(t, "%s", gp_site_label(p, s->stack));
    }
    finish_table(c, t, shown, total);
    free(ix);
}

static void leaks(text_ctx *c)
{
    gp_profile *p = c->p;
    char x1[64], n1[32];
    if (ended_cleanly(p))
        title(c, "Live at exit (leaks): %s in %s allocation%s",
              gp__format_bytes_exact(p->leaked_bytes, x1, sizeof x1),
              gp__format_count(p->leaked_count, n1, sizeof n1), p->leaked_count == 1 ? "" : "s");
    else
        title(c,
              "Live at the end of the trace: %s in %s allocation%s (the recording stopped "
              "early, so not all are leaks)",
              gp__format_bytes_exact(p->leaked_bytes, x1, sizeof x1),
              gp__format_count(p->leaked_count, n1, sizeof n1), p->leaked_count == 1 ? "" : "s");
    size_t n = 0;
    size_t *ix = gp__sorted_sites(p, GP__MEASURE_LEAKED, &n);
    if (n && !ix) {
        c->oom = true;
        return;
    }
    size_t total = nonzero_sites(p, ix, n, GP__MEASURE_LEAKED);
    if (!total) {
        fprintf(c->out, INDENT "none\n");
        free(ix);
        return;
    }
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < c->top; i++) {
        const gp_site *s = &p->sites[ix[i]];
        if (!s->stats.live_bytes)
            continue;
        char dev[16];
        fprintf(c->out, INDENT "%zu. %s in %s allocation%s, %s", ++shown,
                gp__format_bytes_exact(s->stats.live_bytes, x1, sizeof x1),
                gp__format_count(s->stats.live_count, n1, sizeof n1),
                s->stats.live_count == 1 ? "" : "s", lp_category_name(s->category));
        if (p->n_devices > 1)
            fprintf(c->out, ", %s", gp__device_name(s->device, dev, sizeof dev));
        fputc('\n', c->out);
        const char *frames[64];
        size_t nf = gp_site_frames(p, s->stack, frames, 64);
        if (nf == 0) {
            put(c, INDENT "     at %s", gp_site_label(p, s->stack));
            fputc('\n', c->out);
        }
        for (size_t f = 0; f < nf && f < LEAK_FRAMES; f++) {
            put(c, INDENT "     %s %s", f ? "  " : "at", frames[f]);
            fputc('\n', c->out);
        }
        if (nf > LEAK_FRAMES)
            fprintf(c->out, INDENT "        (%zu more frame%s)\n", nf - LEAK_FRAMES,
                    nf - LEAK_FRAMES == 1 ? "" : "s");
    }
    if (total > shown)
        fprintf(c->out, INDENT "(%zu more; --top 0 shows all)\n", total - shown);
    free(ix);
}

/* ---- regions, iterations, saved tensors ------------------------------------------------------ */

static void regions(text_ctx *c)
{
    gp_profile *p = c->p;
    title(c, "Regions (graph = saved + autograd + gradient)");
    size_t n = 0;
    size_t *ix = gp__sorted_regions(p, &n);
    if (n && !ix) {
        c->oom = true;
        return;
    }
    if (!n) {
        fprintf(c->out, INDENT "none (the program marked no regions)\n");
        return;
    }
    static const char *const h[] = {"region",   "entries",  "allocated",
                                    "max live", "retained", "graph allocated"};
    gp__table *t = gp__table_new(6, h, "lrrrrr");
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < c->top; i++, shown++) {
        const gp_region_stats *r = &p->regions[ix[i]];
        char b1[32], b2[32], b3[32], b4[32], n1[32];
        gp__table_cell(t, "%s", dash(r->name));
        gp__table_cell(t, "%s", gp__format_count(r->entries, n1, sizeof n1));
        gp__table_cell(t, "%s", gp_format_bytes(r->allocated_bytes, b1, sizeof b1));
        gp__table_cell(t, "%s", gp_format_bytes(r->max_live_bytes, b2, sizeof b2));
        gp__table_cell(t, "%s", gp_format_bytes(r->retained_bytes, b3, sizeof b3));
        gp__table_cell(t, "%s", gp_format_bytes(r->graph_bytes, b4, sizeof b4));
    }
    finish_table(c, t, shown, n);
    free(ix);
}

static uint64_t graph_bytes(const uint64_t *by_category)
{
    uint64_t sum = 0;
    for (int c = 0; c < LP_CAT_COUNT; c++)
        sum += lp_category_is_graph((lp_category)c) ? by_category[c] : 0;
    return sum;
}

static void iteration_row(text_ctx *c, gp__table *t, size_t i)
{
    const gp_iteration *it = &c->p->iterations[i];
    char t1[32], b1[32], b2[32], b3[32];
    gp__table_cell(t, "%s", dash(it->mark));
    gp__table_cell(t, "%s", gp__format_ns(it->time_ns, t1, sizeof t1));
    gp__table_cell(t, "%s", gp_format_bytes(it->live_bytes, b1, sizeof b1));
    if (i == 0) {
        gp__table_cell(t, "-");
    } else {
        int64_t d = (int64_t)(it->live_bytes - c->p->iterations[i - 1].live_bytes);
        gp__table_cell(t, "%s", gp__format_delta(d, b2, sizeof b2));
    }
    gp__table_cell(t, "%s", gp_format_bytes(graph_bytes(it->live_by_category), b3, sizeof b3));
}

static void iterations(text_ctx *c)
{
    gp_profile *p = c->p;
    size_t n = p->n_iterations;
    if (!n) {
        title(c, "Iterations");
        fprintf(c->out, INDENT "none (the program made no marks)\n");
        return;
    }
    const gp_iteration *first = &p->iterations[0], *last = &p->iterations[n - 1];
    char b1[32], b2[32], b3[32];
    title(c, "Iterations: %zu mark%s, live %s at '%s', %s at '%s' (%s)", n, n == 1 ? "" : "s",
          gp_format_bytes(first->live_bytes, b1, sizeof b1), dash(first->mark),
          gp_format_bytes(last->live_bytes, b2, sizeof b2), dash(last->mark),
          gp__format_delta((int64_t)(last->live_bytes - first->live_bytes), b3, sizeof b3));
    static const char *const h[] = {"mark", "at", "live", "change", "graph live"};
    gp__table *t = gp__table_new(5, h, "lrrrr");
    if (n <= c->top) {
        for (size_t i = 0; i < n; i++)
            iteration_row(c, t, i);
        finish_table(c, t, n, n);
        return;
    }
    /* Truncated: the first top - 1 marks, then the last one (growth shows at the end). */
    size_t head = c->top - 1;
    for (size_t i = 0; i < head; i++)
        iteration_row(c, t, i);
    gp__table_note(t, "(%zu more; --top 0 shows all)", n - head - 1);
    iteration_row(c, t, n - 1);
    finish_table(c, t, n, n); /* the note is already in */
}

static void saved(text_ctx *c)
{
    gp_profile *p = c->p;
    title(c, "Tensors saved for backward");
    size_t n = 0;
    size_t *ix = gp__sorted_saved(p, &n);
    if (n && !ix) {
        c->oom = true;
        return;
    }
    if (!n) {
        fprintf(c->out, INDENT "none (no op saved a tensor for backward)\n");
        return;
    }
    static const char *const h[] = {"#",      "at peak", "saved", "times", "max live",
                                    "at end", "module",  "op",    "shape"};
    gp__table *t = gp__table_new(9, h, "rrrrrrlll");
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < c->top; i++) {
        const gp_saved_tensor *s = &p->saved[ix[i]];
        char b1[32], b2[32], b3[32], b4[32], n1[32];
        gp__table_cell(t, "%zu", ++shown);
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.peak_bytes, b1, sizeof b1));
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.total_bytes, b2, sizeof b2));
        gp__table_cell(t, "%s", gp__format_count(s->stats.count, n1, sizeof n1));
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.max_live_bytes, b3, sizeof b3));
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.live_bytes, b4, sizeof b4));
        gp__table_cell(t, "%s", dash(s->module));
        gp__table_cell(t, "%s", dash(s->op));
        gp__table_cell(t, "%s", dash(s->shape));
    }
    finish_table(c, t, shown, n);
    free(ix);
}

/* ---- findings -------------------------------------------------------------------------------- */

static void findings(text_ctx *c)
{
    gp_profile *p = c->p;
    if (!p->n_findings) {
        title(c, "Findings");
        fprintf(c->out, INDENT "No gradient-leak findings.\n");
        return;
    }
    title(c, "Findings: %zu gradient-leak finding%s", p->n_findings, p->n_findings == 1 ? "" : "s");
    for (size_t i = 0; i < p->n_findings; i++) {
        const gp_finding *f = &p->findings[i];
        char x1[64], c1[32], t1[32];
        put(c, "%s%zu. [%s] %s", INDENT, i + 1, gp_finding_kind_name(f->kind), gp__finding_text(f));
        fputc('\n', c->out);
        fprintf(c->out, "%s   ", INDENT);
        if (f->region && *f->region)
            put(c, "region '%s'; ", f->region);
        fprintf(c->out, "%s, %s event%s, first at %s\n",
                gp__format_bytes_exact(f->bytes, x1, sizeof x1),
                gp__format_count(f->count, c1, sizeof c1), f->count == 1 ? "" : "s",
                gp__format_ns(f->first_time_ns, t1, sizeof t1));
        if (!f->n_items)
            continue;
        size_t *ix = gp__sorted_finding_items(f);
        if (!ix) {
            c->oom = true;
            continue;
        }
        static const char *const h[] = {"bytes", "count", "category", "op", "module", "site"};
        gp__table *t = gp__table_new(6, h, "rrllll");
        size_t shown = 0;
        for (size_t k = 0; k < f->n_items && shown < c->top; k++, shown++) {
            const gp_finding_item *it = &f->items[ix[k]];
            char b2[32], n2[32];
            gp__table_cell(t, "%s", gp_format_bytes(it->bytes, b2, sizeof b2));
            gp__table_cell(t, "%s", gp__format_count(it->count, n2, sizeof n2));
            gp__table_cell(t, "%s", lp_category_name(it->category));
            gp__table_cell(t, "%s", dash(it->op));
            gp__table_cell(t, "%s", dash(it->module));
            gp__table_cell(t, "%s", it->stack ? gp_site_label(p, it->stack) : "-");
        }
        finish_table_at(c, t, shown, f->n_items, INDENT "     ");
        free(ix);
    }
}

int gp_render_text(FILE *out, gp_profile *p, const gp_render_options *o)
{
    gp_render_options def;
    if (!o) {
        gp_render_options_default(&def);
        o = &def;
    }
    text_ctx c = {.out = out, .p = p, .top = o->top ? o->top : SIZE_MAX, .color = o->color};
    if (gp__measure_parse(o->measure, &c.measure) != 0)
        c.measure = GP__MEASURE_PEAK;

    summary(&c);
    header(&c);
    headline(&c);
    const gp_device_stats *primary = gp__primary_device(p);
    if (primary)
        categories(&c, primary, true);
    for (size_t i = 0; i < p->n_devices; i++)
        if (&p->devices[i] != primary)
            categories(&c, &p->devices[i], false);
    tag_keys(&c);
    sites(&c);
    temporaries(&c);
    leaks(&c);
    regions(&c);
    iterations(&c);
    saved(&c);
    findings(&c);
    if (fflush(out) != 0 || ferror(out))
        return -1;
    return c.oom ? -1 : 0;
}
