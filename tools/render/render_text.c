/*
 * render_text — the human report of a gp_profile (`gradprof report`, the default format).
 *
 * Layout, top to bottom: a one-line summary; the trace and program (with a warning when the trace
 * was damaged); peak, live at exit and temporaries; live at peak by category (and per device); the
 * ranked tables (tag keys, sites, temporaries, leaks with stacks); regions; iterations; tensors
 * saved for backward; findings. Ranked tables show o->top rows (0 = all) and say how many more
 * there are. Every number comes from the profile; orderings are deterministic (render_common.h).
 * This file holds the report's context and writers and the parts down to the categories; the
 * tables after them are in render_text_tables.c (render_text_common.h).
 */
#define _GNU_SOURCE /* vasprintf */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "render.h"
#include "render_common.h"
#include "render_text_common.h"

/* ---- the context's writers ------------------------------------------------------------------- */

void gp__text_vput(gp__text_ctx *c, const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) {
        c->oom = true;
        return;
    }
    fputs(gp__sanitize_text(s, false), c->out);
    free(s);
}

void gp__text_put(gp__text_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gp__text_vput(c, fmt, ap);
    va_end(ap);
}

void gp__text_title(gp__text_ctx *c, const char *fmt, ...)
{
    fputc('\n', c->out);
    if (c->color)
        fputs("\033[1m", c->out);
    va_list ap;
    va_start(ap, fmt);
    gp__text_vput(c, fmt, ap);
    va_end(ap);
    if (c->color)
        fputs("\033[0m", c->out);
    fputc('\n', c->out);
}

void gp__text_field(gp__text_ctx *c, const char *label, const char *fmt, ...)
{
    fprintf(c->out, "%-14s", label ? label : "");
    va_list ap;
    va_start(ap, fmt);
    gp__text_vput(c, fmt, ap);
    va_end(ap);
    fputc('\n', c->out);
}

void gp__text_table_end_at(gp__text_ctx *c, gp__table *t, size_t shown, size_t total,
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

void gp__text_table_end(gp__text_ctx *c, gp__table *t, size_t shown, size_t total)
{
    gp__text_table_end_at(c, t, shown, total, GP__TEXT_INDENT);
}

static const char *meta(const gp_profile *p, const char *key)
{
    const char *v = p->trace ? gp_trace_meta(p->trace, key) : NULL;
    return v && *v ? v : NULL;
}

/* ---- summary and header ---------------------------------------------------------------------- */

static void summary(gp__text_ctx *c)
{
    const gp_profile *p = c->p;
    char b1[32], b2[32], b3[32], t1[32], dev[16];
    fprintf(c->out, "gradprof report: peak %s (%s) at %s, %s live at %s, ",
            gp_format_bytes(p->peak_bytes, b1, sizeof b1),
            gp__device_name(p->primary_device, dev, sizeof dev),
            gp__format_ns(p->peak_time_ns, t1, sizeof t1),
            gp_format_bytes(p->leaked_bytes, b2, sizeof b2),
            p->info && p->info->clean_end ? "exit" : "the end");
    /* graphs still alive then are what no backward used, found or not by a detector */
    uint64_t saved = 0;
    for (size_t i = 0; i < p->n_devices; i++)
        saved += p->devices[i].by_category_live[LP_CAT_SAVED];
    if (saved)
        fprintf(c->out, "%s of it saved for backward, ", gp_format_bytes(saved, b3, sizeof b3));
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
    char verdict[512];
    if (gp__verdict(p, verdict, sizeof verdict)) {
        gp__text_put(c, "verdict: %s", verdict);
        fputc('\n', c->out);
    }
}

static void header(gp__text_ctx *c)
{
    const gp_profile *p = c->p;
    const gp_trace_info *in = p->info;
    char b1[32], b2[32], n1[32], n2[32], n3[32], n4[32], x1[64];
    fputc('\n', c->out);
    gp__text_field(c, "Program", "%s", meta(p, "command") ? meta(p, "command") : "(unknown)");

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
    gp__text_field(c, "Process", "%s", proc);

    if (in) {
        gp__text_field(
            c, "Trace", "%s: %s, format %u.%u, %s events in %s chunks%s", gp__text_dash(p->path),
            gp_format_bytes(in->file_bytes, b1, sizeof b1), in->version_major, in->version_minor,
            gp__format_count(in->events, n1, sizeof n1),
            gp__format_count(in->chunks, n2, sizeof n2), in->clean_end ? ", ended cleanly" : "");
    } else {
        gp__text_field(c, "Trace", "%s", gp__text_dash(p->path));
    }
    gp__text_field(c, "Duration", "%s", gp__format_ns(p->duration_ns, b1, sizeof b1));
    gp__text_field(c, "Activity", "%s allocation%s (%s in total), %s free%s, %s retag%s",
                   gp__format_count(p->alloc_count, n1, sizeof n1), gp__text_plural(p->alloc_count),
                   gp_format_bytes(p->total_allocated_bytes, b2, sizeof b2),
                   gp__format_count(p->free_count, n2, sizeof n2), gp__text_plural(p->free_count),
                   gp__format_count(p->retag_count, n3, sizeof n3),
                   gp__text_plural(p->retag_count));
    if (p->unknown_frees)
        gp__text_field(c, NULL, "%s free%s of memory allocated before recording started (ignored)",
                       gp__format_count(p->unknown_frees, n4, sizeof n4),
                       gp__text_plural(p->unknown_frees));

    if (!in)
        return;
    const char *warn = c->color ? "\033[33mWarning\033[0m       " : "Warning       ";
    char how[200];
    if (in->damaged) {
        fprintf(c->out, "%strace damaged at byte %s (%s):\n", warn,
                gp__format_count(in->damage_offset, n1, sizeof n1), in->damage_reason);
        gp__text_field(c, NULL, "%s lost after it, with the end of the program's recording;",
                       gp__format_bytes_exact(in->bytes_lost, x1, sizeof x1));
        gp__text_field(c, NULL, "this report covers the %s events recorded before it",
                       gp__format_count(in->events, n3, sizeof n3));
    } else if (!in->clean_end && gp_check_end_reason(gp_trace_meta(p->trace, "end_reason"), how,
                                                     sizeof how)) {
        fprintf(c->out, "%sthe trace ends where the program %s;\n", warn, how);
        gp__text_field(c, NULL, "the report covers what was written");
    } else if (!in->clean_end) {
        fprintf(c->out, "%sthe trace has no end record: the program did not finish recording\n",
                warn);
        gp__text_field(c, NULL,
                       "(it crashed, was killed or is still running); the report covers what "
                       "was written");
    }
    if (in->lost_events)
        fprintf(c->out, "%sthe recorder dropped %s events (out of memory or buffers full)\n", warn,
                gp__format_count(in->lost_events, n1, sizeof n1));
}

static void headline(gp__text_ctx *c)
{
    const gp_profile *p = c->p;
    char x1[64], n1[32], t1[32], dev[16];
    fputc('\n', c->out);
    gp__text_field(c, "Peak", "%s at %s on %s",
                   gp__format_bytes_exact(p->peak_bytes, x1, sizeof x1),
                   gp__format_ns(p->peak_time_ns, t1, sizeof t1),
                   gp__device_name(p->primary_device, dev, sizeof dev));
    for (size_t i = 0; i < p->n_devices; i++) {
        const gp_device_stats *d = &p->devices[i];
        if (d->device == p->primary_device)
            continue;
        gp__text_field(c, NULL, "%s at %s on %s",
                       gp__format_bytes_exact(d->peak_bytes, x1, sizeof x1),
                       gp__format_ns(d->peak_time_ns, t1, sizeof t1),
                       gp__device_name(d->device, dev, sizeof dev));
    }
    gp__text_field(c, gp__text_ended_cleanly(p) ? "Live at exit" : "Live at end",
                   "%s in %s allocation%s", gp__format_bytes_exact(p->leaked_bytes, x1, sizeof x1),
                   gp__format_count(p->leaked_count, n1, sizeof n1),
                   p->leaked_count == 1 ? "" : "s");
    gp__text_field(c, "Temporaries", "%s allocation%s freed before their thread's next allocation",
                   gp__format_count(p->temporary_count, n1, sizeof n1),
                   p->temporary_count == 1 ? "" : "s");
    char oom[320];
    if (gp__failed_alloc_text(p, oom, sizeof oom))
        gp__text_field(c, "Failed", "%s allocation%s (out of memory); %s%s",
                       gp__format_count(p->failed_allocs, n1, sizeof n1),
                       p->failed_allocs == 1 ? "" : "s",
                       p->failed_allocs == 1 ? "" : "the first: ", oom);
}

/* ---- categories ------------------------------------------------------------------------------ */

static void categories(gp__text_ctx *c, const gp_device_stats *d, bool primary)
{
    char dev[16];
    gp__text_title(c, "Live at peak by category (%s)", gp__device_name(d->device, dev, sizeof dev));
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
    gp__text_table_end(c, t, 0, 0);
}

int gp_render_text(FILE *out, gp_profile *p, const gp_render_options *o)
{
    gp_render_options def;
    if (!o) {
        gp_render_options_default(&def);
        o = &def;
    }
    gp__text_ctx c = {.out = out, .p = p, .top = o->top ? o->top : SIZE_MAX, .color = o->color};
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
    gp__text_tag_keys(&c);
    gp__text_sites(&c);
    gp__text_temporaries(&c);
    gp__text_leaks(&c);
    gp__text_regions(&c);
    gp__text_iterations(&c);
    gp__text_saved(&c);
    gp__text_findings(&c);
    if (fflush(out) != 0 || ferror(out))
        return -1;
    return c.oom ? -1 : 0;
}
