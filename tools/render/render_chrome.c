/*
 * Chrome Trace Event JSON of a gp_profile ({"traceEvents": [...], "displayTimeUnit": "ms"}; the
 * format: https://docs.google.com/document/d/1CvAClvFfyA5R-PBIu5nHfVpcLZGxcsSsTKSuZeMkp7s), for
 * Perfetto (ui.perfetto.dev) and chrome://tracing. What it holds, all from the profile:
 *   - metadata events ("ph":"M") naming the process (after the traced command) and its threads;
 *   - a counter "live bytes" ("ph":"C") with one series per category, one event per timeline
 *     point of the primary device, holding what was live at the end of the point's bucket from
 *     the bucket's start (gp__timeline_start), starting from 0 at time 0; only categories that
 *     were ever live appear, in lp_category order;
 *   - a counter "live bytes (max in sample)": the largest total within each bucket, from the
 *     bucket's start to its end, then the live total, so a peak inside a bucket is visible;
 *   - regions as complete events ("ph":"X", "cat":"region") on the thread that entered them;
 *   - marks (the iterations' starts) as instant events ("ph":"i", "cat":"mark") with the live
 *     total at the mark, the peak as an instant event "peak" with the bytes per category at the
 *     peak, and each finding as an instant event ("cat":"finding") at its first occurrence.
 * Times are microseconds with three decimals (exact nanoseconds). The pid is the traced
 * program's ("pid" metadata), else 1.
 */
#include <stdlib.h>
#include <string.h>

#include "render_common.h"
#include "render_html.h" /* gp__timeline_width, gp__timeline_start */

/* Nanoseconds as microseconds with exactly three decimals. */
static void json_us(FILE *out, uint64_t ns)
{
    fprintf(out, "%llu.%03llu", (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000));
}

/* Starts an event: the separator, then {"name":...,"ph":...,"pid":...,"tid":...,"ts":... (open). */
static void event_begin(FILE *out, bool *first, const char *name, const char *ph, long pid,
                        uint32_t tid, uint64_t ts_ns)
{
    fputs(*first ? "\n" : ",\n", out);
    *first = false;
    fputs("{\"name\":", out);
    gp__json_string(out, name);
    fprintf(out, ",\"ph\":\"%s\",\"pid\":%ld,\"tid\":%u,\"ts\":", ph, pid, tid);
    json_us(out, ts_ns);
}

/* The trace's pid metadata when it is a plain positive number, else 1. */
static long trace_pid(const gp_profile *p)
{
    const char *s = p->trace != NULL ? gp_trace_meta(p->trace, "pid") : NULL;
    if (s == NULL || *s == '\0')
        return 1;
    char *end;
    long v = strtol(s, &end, 10);
    return *end == '\0' && v > 0 ? v : 1;
}

/* The per-category counter arguments of one sample: {"parameter":N,...} for the used categories. */
static void counter_args(FILE *out, const uint64_t *by_cat, const bool *used)
{
    fputs(",\"args\":{", out);
    bool first = true;
    for (int c = 0; c < LP_CAT_COUNT; c++) {
        if (!used[c])
            continue;
        fprintf(out, "%s\"%s\":%llu", first ? "" : ",", lp_category_name((lp_category)c),
                (unsigned long long)by_cat[c]);
        first = false;
    }
    fputs("}}", out);
}

int gp_render_chrome(FILE *out, gp_profile *p, const gp_render_options *o)
{
    (void)o;
    long pid = trace_pid(p);
    bool first = true;
    const char *command = p->trace != NULL ? gp_trace_meta(p->trace, "command") : NULL;
    char name[512];
    char human[32];

    fputs("{\"traceEvents\":[", out);

    /* metadata: process and thread names */
    snprintf(name, sizeof name, "gradprof: %s", command ? command : p->path ? p->path : "trace");
    event_begin(out, &first, "process_name", "M", pid, 0, 0);
    fputs(",\"args\":{\"name\":", out);
    gp__json_string(out, name);
    fputs("}}", out);
    uint32_t n_threads = p->trace != NULL ? gp_trace_thread_count(p->trace) : 0;
    for (uint32_t t = 1; t <= n_threads; t++) {
        const char *tn = gp_trace_thread_name(p->trace, t);
        char fallback[32];
        if (tn == NULL) {
            snprintf(fallback, sizeof fallback, "thread %u", t);
            tn = fallback;
        }
        event_begin(out, &first, "thread_name", "M", pid, t, 0);
        fputs(",\"args\":{\"name\":", out);
        gp__json_string(out, tn);
        fputs("}}", out);
        event_begin(out, &first, "thread_sort_index", "M", pid, t, 0);
        fprintf(out, ",\"args\":{\"sort_index\":%u}}", t);
    }

    /* counters: live bytes per category over time, and the per-bucket maximum of the total */
    bool used[LP_CAT_COUNT] = {false};
    for (size_t i = 0; i < p->n_timeline; i++)
        for (int c = 0; c < LP_CAT_COUNT; c++)
            if (p->timeline[i].live_by_category[c] != 0)
                used[c] = true;
    if (p->n_timeline > 0) {
        uint64_t zero[LP_CAT_COUNT] = {0};
        uint64_t width = gp__timeline_width(p);
        if (p->timeline[0].time_ns > 0 && gp__timeline_start(p, width, 0) > 0) {
            event_begin(out, &first, "live bytes", "C", pid, 0, 0);
            counter_args(out, zero, used);
            event_begin(out, &first, "live bytes (max in sample)", "C", pid, 0, 0);
            fputs(",\"args\":{\"total\":0}}", out);
        }
        for (size_t i = 0; i < p->n_timeline; i++) {
            const gp_timeline_point *pt = &p->timeline[i];
            uint64_t start = gp__timeline_start(p, width, i);
            event_begin(out, &first, "live bytes", "C", pid, 0, start);
            counter_args(out, pt->live_by_category, used);
            event_begin(out, &first, "live bytes (max in sample)", "C", pid, 0, start);
            fprintf(out, ",\"args\":{\"total\":%llu}}", (unsigned long long)pt->max_total);
            if (pt->max_total != pt->live_total && pt->time_ns > start) {
                event_begin(out, &first, "live bytes (max in sample)", "C", pid, 0, pt->time_ns);
                fprintf(out, ",\"args\":{\"total\":%llu}}", (unsigned long long)pt->live_total);
            }
        }
    }

    /* regions as slices */
    for (size_t i = 0; i < p->n_spans; i++) {
        const gp_region_span *s = &p->spans[i];
        uint64_t end = s->end_ns >= s->begin_ns ? s->end_ns : s->begin_ns;
        event_begin(out, &first, s->name, "X", pid, s->thread, s->begin_ns);
        fputs(",\"dur\":", out);
        json_us(out, end - s->begin_ns);
        fprintf(out, ",\"cat\":\"region\",\"args\":{\"depth\":%u}}", s->depth);
    }

    /* marks, the peak, findings as instant events */
    for (size_t i = 0; i < p->n_iterations; i++) {
        const gp_iteration *it = &p->iterations[i];
        event_begin(out, &first, it->mark, "i", pid, 0, it->time_ns);
        fprintf(out, ",\"s\":\"p\",\"cat\":\"mark\",\"args\":{\"live_bytes\":%llu}}",
                (unsigned long long)it->live_bytes);
    }
    const gp_device_stats *dev = gp__primary_device(p);
    snprintf(name, sizeof name, "peak %s", gp_format_bytes(p->peak_bytes, human, sizeof human));
    event_begin(out, &first, name, "i", pid, 0, p->peak_time_ns);
    fprintf(out, ",\"s\":\"p\",\"cat\":\"peak\",\"args\":{\"peak_bytes\":%llu",
            (unsigned long long)p->peak_bytes);
    if (dev != NULL)
        for (int c = 0; c < LP_CAT_COUNT; c++)
            if (dev->by_category_at_peak[c] != 0)
                fprintf(out, ",\"%s\":%llu", lp_category_name((lp_category)c),
                        (unsigned long long)dev->by_category_at_peak[c]);
    fputs("}}", out);
    for (size_t i = 0; i < p->n_findings; i++) {
        const gp_finding *f = &p->findings[i];
        event_begin(out, &first, gp_finding_kind_name(f->kind), "i", pid, 0, f->first_time_ns);
        fputs(",\"s\":\"p\",\"cat\":\"finding\",\"args\":{\"message\":", out);
        gp__json_string(out, gp__finding_text(f));
        fputs(",\"region\":", out);
        gp__json_string(out, f->region);
        fprintf(out, ",\"bytes\":%llu,\"count\":%llu}}", (unsigned long long)f->bytes,
                (unsigned long long)f->count);
    }

    fputs("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"gradprof\",\"command\":",
          out);
    gp__json_string(out, command);
    fprintf(out, ",\"peak_bytes\":%llu,\"duration_ns\":%llu}}\n", (unsigned long long)p->peak_bytes,
            (unsigned long long)p->duration_ns);
    if (fflush(out) != 0 || ferror(out))
        return -1;
    return 0;
}
