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
 * program's ("pid" metadata), else 1. Written in the JSON writer's compact style (json.h), one
 * event per line.
 */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "render_common.h"

/* Starts an event (one line): {"name":...,"ph":...,"pid":...,"tid":...,"ts":... with ts in
 * microseconds with three decimals; the caller adds its fields and closes it (gp__jw_end). */
/* Added to every time written: 0, except while a job's process that started later than the
 * first is written (gp_render_chrome_job puts the processes of one host on one time axis). */
static uint64_t time_offset_ns;

static void event_begin(gp__jw *j, const char *name, const char *ph, long pid, uint32_t tid,
                        uint64_t ts_ns)
{
    gp__jw_object(j, NULL, true);
    gp__jw_str(j, "name", name ? name : "");
    gp__jw_str(j, "ph", ph);
    gp__jw_i64(j, "pid", pid);
    gp__jw_u64(j, "tid", tid);
    gp__jw_decimal(j, "ts", ts_ns + time_offset_ns, 3);
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

/* Metadata: the process's name ("gradprof: COMMAND", or "gradprof: rank R: COMMAND" in a
 * job) and each thread's name and order. */
static void metadata_events(gp__jw *j, const gp_profile *p, long pid, const char *command,
                            const char *rank)
{
    char name[512];
    snprintf(name, sizeof name, "gradprof: %s%s%s%s", rank ? "rank " : "", rank ? rank : "",
             rank ? ": " : "",
             command   ? command
             : p->path ? p->path
                       : "trace");
    event_begin(j, "process_name", "M", pid, 0, 0);
    gp__jw_object(j, "args", true);
    gp__jw_str(j, "name", name);
    gp__jw_end(j);
    gp__jw_end(j);
    uint32_t n_threads = p->trace != NULL ? gp_trace_thread_count(p->trace) : 0;
    for (uint32_t t = 1; t <= n_threads; t++) {
        const char *tn = gp_trace_thread_name(p->trace, t);
        char fallback[32];
        if (tn == NULL) {
            snprintf(fallback, sizeof fallback, "thread %u", t);
            tn = fallback;
        }
        event_begin(j, "thread_name", "M", pid, t, 0);
        gp__jw_object(j, "args", true);
        gp__jw_str(j, "name", tn);
        gp__jw_end(j);
        gp__jw_end(j);
        event_begin(j, "thread_sort_index", "M", pid, t, 0);
        gp__jw_object(j, "args", true);
        gp__jw_u64(j, "sort_index", t);
        gp__jw_end(j);
        gp__jw_end(j);
    }
}

/* One sample of the per-category counter: {"parameter":N,...} for the used categories. */
static void counter_event(gp__jw *j, long pid, uint64_t ts_ns, const uint64_t *by_cat,
                          const bool *used)
{
    event_begin(j, "live bytes", "C", pid, 0, ts_ns);
    gp__jw_object(j, "args", true);
    for (int c = 0; c < LP_CAT_COUNT; c++)
        if (used[c])
            gp__jw_u64(j, lp_category_name((lp_category)c), by_cat[c]);
    gp__jw_end(j);
    gp__jw_end(j);
}

/* One sample of the largest total in a bucket. */
static void max_event(gp__jw *j, long pid, uint64_t ts_ns, uint64_t total)
{
    event_begin(j, "live bytes (max in sample)", "C", pid, 0, ts_ns);
    gp__jw_object(j, "args", true);
    gp__jw_u64(j, "total", total);
    gp__jw_end(j);
    gp__jw_end(j);
}

/* The counters: live bytes per category over time, and the per-bucket maximum of the total. */
static void counter_events(gp__jw *j, const gp_profile *p, long pid)
{
    bool used[LP_CAT_COUNT] = {false};
    gp__timeline_used_categories(p, used);
    if (p->n_timeline == 0)
        return;
    uint64_t zero[LP_CAT_COUNT] = {0};
    if (p->timeline[0].time_ns > 0 && gp__timeline_start(p, 0) > 0) {
        counter_event(j, pid, 0, zero, used);
        max_event(j, pid, 0, 0);
    }
    for (size_t i = 0; i < p->n_timeline; i++) {
        const gp_timeline_point *pt = &p->timeline[i];
        uint64_t start = gp__timeline_start(p, i);
        counter_event(j, pid, start, pt->live_by_category, used);
        max_event(j, pid, start, pt->max_total);
        if (pt->max_total != pt->live_total && pt->time_ns > start)
            max_event(j, pid, pt->time_ns, pt->live_total);
    }
}

/* Regions as slices on their threads. */
static void region_events(gp__jw *j, const gp_profile *p, long pid)
{
    for (size_t i = 0; i < p->n_spans; i++) {
        const gp_region_span *s = &p->spans[i];
        uint64_t end = s->end_ns >= s->begin_ns ? s->end_ns : s->begin_ns;
        event_begin(j, s->name, "X", pid, s->thread, s->begin_ns);
        gp__jw_decimal(j, "dur", end - s->begin_ns, 3);
        gp__jw_str(j, "cat", "region");
        gp__jw_object(j, "args", true);
        gp__jw_u64(j, "depth", s->depth);
        gp__jw_end(j);
        gp__jw_end(j);
    }
}

/* Marks, the peak and the findings as instant events. */
static void instant_events(gp__jw *j, const gp_profile *p, long pid)
{
    for (size_t i = 0; i < p->n_iterations; i++) {
        const gp_iteration *it = &p->iterations[i];
        event_begin(j, it->mark, "i", pid, 0, it->time_ns);
        gp__jw_str(j, "s", "p");
        gp__jw_str(j, "cat", "mark");
        gp__jw_object(j, "args", true);
        gp__jw_u64(j, "live_bytes", it->live_bytes);
        gp__jw_end(j);
        gp__jw_end(j);
    }
    const gp_device_stats *dev = gp__primary_device(p);
    char name[64], human[32];
    snprintf(name, sizeof name, "peak %s", gp_format_bytes(p->peak_bytes, human, sizeof human));
    event_begin(j, name, "i", pid, 0, p->peak_time_ns);
    gp__jw_str(j, "s", "p");
    gp__jw_str(j, "cat", "peak");
    gp__jw_object(j, "args", true);
    gp__jw_u64(j, "peak_bytes", p->peak_bytes);
    for (int c = 0; dev != NULL && c < LP_CAT_COUNT; c++)
        if (dev->by_category_at_peak[c] != 0)
            gp__jw_u64(j, lp_category_name((lp_category)c), dev->by_category_at_peak[c]);
    gp__jw_end(j);
    gp__jw_end(j);
    for (size_t i = 0; i < p->n_findings; i++) {
        const gp_finding *f = &p->findings[i];
        event_begin(j, gp_finding_kind_name(f->kind), "i", pid, 0, f->first_time_ns);
        gp__jw_str(j, "s", "p");
        gp__jw_str(j, "cat", "finding");
        gp__jw_object(j, "args", true);
        gp__jw_str(j, "message", gp__finding_text(f));
        gp__jw_str(j, "region", f->region ? f->region : "");
        gp__jw_u64(j, "bytes", f->bytes);
        gp__jw_u64(j, "count", f->count);
        gp__jw_end(j);
        gp__jw_end(j);
    }
}

int gp_render_chrome(FILE *out, gp_profile *p, const gp_render_options *o)
{
    (void)o;
    long pid = trace_pid(p);
    const char *command = p->trace != NULL ? gp_trace_meta(p->trace, "command") : NULL;
    gp__jw j;
    gp__jw_begin_compact(&j, out);
    gp__jw_object(&j, NULL, true);
    gp__jw_array(&j, "traceEvents", false); /* one event per line */
    metadata_events(&j, p, pid, command, NULL);
    counter_events(&j, p, pid);
    region_events(&j, p, pid);
    instant_events(&j, p, pid);
    gp__jw_end(&j);
    gp__jw_str(&j, "displayTimeUnit", "ms");
    gp__jw_object(&j, "otherData", true);
    gp__jw_str(&j, "generator", "gradprof");
    gp__jw_str(&j, "command", command ? command : "");
    gp__jw_u64(&j, "peak_bytes", p->peak_bytes);
    gp__jw_u64(&j, "duration_ns", p->duration_ns);
    gp__jw_end(&j);
    gp__jw_end(&j);
    return gp__jw_finish(&j);
}

/* A trace's "start_monotonic_ns" metadata (its start on the host's CLOCK_MONOTONIC), or 0. */
static uint64_t start_monotonic(const gp_profile *p)
{
    const char *s = p->trace != NULL ? gp_trace_meta(p->trace, "start_monotonic_ns") : NULL;
    char *end;
    unsigned long long v = s != NULL ? strtoull(s, &end, 10) : 0;
    return s != NULL && *s && *end == '\0' ? (uint64_t)v : 0;
}

/* Whether the processes' times can share one axis: all on one host, each with its start on
 * that host's monotonic clock. */
static bool one_clock(const gp_render_process *procs, size_t n, uint64_t *first)
{
    const char *host = NULL;
    *first = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        const gp_trace *t = procs[i].p->trace;
        const char *h = t != NULL ? gp_trace_meta(t, "host") : NULL;
        uint64_t start = start_monotonic(procs[i].p);
        if (h == NULL || start == 0 || (host != NULL && strcmp(h, host) != 0))
            return false;
        host = h;
        if (start < *first)
            *first = start;
    }
    return n > 0;
}

int gp_render_chrome_job(FILE *out, const gp_render_process *procs, size_t n)
{
    long *pids = malloc((n ? n : 1) * sizeof *pids);
    if (!pids)
        return -1;
    uint64_t first;
    bool aligned = one_clock(procs, n, &first);
    gp__jw j;
    gp__jw_begin_compact(&j, out);
    gp__jw_object(&j, NULL, true);
    gp__jw_array(&j, "traceEvents", false); /* one event per line */
    uint64_t duration = 0;
    for (size_t i = 0; i < n; i++) {
        const gp_profile *p = procs[i].p;
        long pid = trace_pid(p);
        for (size_t k = 0; k < i; k++)
            if (pids[k] == pid) /* two hosts, one pid: keep the processes apart */
                pid = 1000000 + (long)i;
        pids[i] = pid;
        time_offset_ns = aligned ? start_monotonic(p) - first : 0;
        const char *command = p->trace != NULL ? gp_trace_meta(p->trace, "command") : NULL;
        metadata_events(&j, p, pid, command, procs[i].rank);
        char *end;
        long rank = procs[i].rank ? strtol(procs[i].rank, &end, 10) : (long)i;
        event_begin(&j, "process_sort_index", "M", pid, 0, 0);
        gp__jw_object(&j, "args", true);
        gp__jw_i64(&j, "sort_index", rank);
        gp__jw_end(&j);
        gp__jw_end(&j);
        counter_events(&j, p, pid);
        region_events(&j, p, pid);
        instant_events(&j, p, pid);
        if (p->duration_ns + time_offset_ns > duration)
            duration = p->duration_ns + time_offset_ns;
        time_offset_ns = 0;
    }
    gp__jw_end(&j);
    gp__jw_str(&j, "displayTimeUnit", "ms");
    gp__jw_object(&j, "otherData", true);
    gp__jw_str(&j, "generator", "gradprof");
    gp__jw_u64(&j, "processes", n);
    gp__jw_bool(&j, "one_time_axis", aligned);
    gp__jw_u64(&j, "duration_ns", duration);
    gp__jw_end(&j);
    gp__jw_end(&j);
    free(pids);
    return gp__jw_finish(&j);
}
