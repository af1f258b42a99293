/*
 * render_json — the report as JSON, schema "gradprof-report/1" (documented in the README, "JSON
 * schema"). Every key is always present (zeros, "" and empty arrays when there is nothing), so
 * scripts can rely on them. Byte counts and times are integers (bytes, nanoseconds); strings are
 * UTF-8 with JSON escapes (gp__json_string). The ranked lists (tag_keys, sites, modules,
 * saved_tensors) hold the first o->top entries (0 = all) in the order of o->measure, and `counts`
 * gives each list's full length; devices, regions, iterations and findings are complete.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "render.h"
#include "render_common.h"

#define MAX_DEPTH 8
#define SITE_FRAMES 16 /* frames per site in "sites[].frames" */

typedef struct json_ctx {
    FILE *out;
    int depth;
    bool first[MAX_DEPTH];   /* nothing written yet at this depth */
    bool inline_[MAX_DEPTH]; /* this level's members go on one line */
    bool oom;
} json_ctx;

/* Starts a value: the comma and newline before it, the indentation and the key, if any. */
static void j_key(json_ctx *j, const char *key)
{
    if (j->depth > 0) {
        if (!j->first[j->depth])
            fputs(j->inline_[j->depth] ? ", " : ",", j->out);
        j->first[j->depth] = false;
        if (!j->inline_[j->depth])
            fprintf(j->out, "\n%*s", 2 * j->depth, "");
    }
    if (key) {
        gp__json_string(j->out, key);
        fputs(": ", j->out);
    }
}

/* Opens an object or array; `one_line` puts its members on one line (inside a one-line value
 * everything is on that line). The nesting of this renderer is at most 6 deep. */
static void j_open(json_ctx *j, const char *key, char bracket, bool one_line)
{
    j_key(j, key);
    fputc(bracket, j->out);
    bool outer_inline = j->inline_[j->depth];
    j->depth++;
    j->first[j->depth] = true;
    j->inline_[j->depth] = one_line || outer_inline;
}

static void j_close(json_ctx *j, char bracket)
{
    bool empty = j->first[j->depth], was_inline = j->inline_[j->depth];
    j->depth--;
    if (!empty && !was_inline)
        fprintf(j->out, "\n%*s", 2 * j->depth, "");
    fputc(bracket, j->out);
}

static void j_obj(json_ctx *j, const char *key)
{
    j_open(j, key, '{', false);
}
static void j_obj1(json_ctx *j, const char *key)
{
    j_open(j, key, '{', true);
}
static void j_end_obj(json_ctx *j)
{
    j_close(j, '}');
}
static void j_arr(json_ctx *j, const char *key)
{
    j_open(j, key, '[', false);
}
static void j_arr1(json_ctx *j, const char *key)
{
    j_open(j, key, '[', true);
}
static void j_end_arr(json_ctx *j)
{
    j_close(j, ']');
}

static void j_str(json_ctx *j, const char *key, const char *v)
{
    j_key(j, key);
    gp__json_string(j->out, v);
}

static void j_u64(json_ctx *j, const char *key, uint64_t v)
{
    j_key(j, key);
    fprintf(j->out, "%" PRIu64, v);
}

static void j_i64(json_ctx *j, const char *key, int64_t v)
{
    j_key(j, key);
    fprintf(j->out, "%" PRId64, v);
}

static void j_bool(json_ctx *j, const char *key, bool v)
{
    j_key(j, key);
    fputs(v ? "true" : "false", j->out);
}

static void j_device(json_ctx *j, const char *key, int32_t device)
{
    char dev[16];
    j_str(j, key, gp__device_name(device, dev, sizeof dev));
}

/* ---- sections -------------------------------------------------------------------------------- */

static void trace_section(json_ctx *j, const gp_profile *p)
{
    static const char *const keys[] = {"command",          "pid", "host", "start_time",
                                       "gradprof_version", "mode"};
    const gp_trace_info *in = p->info;
    j_obj(j, "trace");
    j_str(j, "path", p->path);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = p->trace ? gp_trace_meta(p->trace, keys[i]) : NULL;
        j_str(j, keys[i], v ? v : "");
    }
    char version[16];
    snprintf(version, sizeof version, "%u.%u", in ? in->version_major : 0,
             in ? in->version_minor : 0);
    j_str(j, "format_version", version);
    j_u64(j, "file_bytes", in ? in->file_bytes : 0);
    j_u64(j, "chunks", in ? in->chunks : 0);
    j_u64(j, "events", in ? in->events : 0);
    j_bool(j, "clean_end", in && in->clean_end);
    j_bool(j, "damaged", in && in->damaged);
    j_u64(j, "damage_offset", in && in->damaged ? in->damage_offset : 0);
    j_u64(j, "bytes_lost", in && in->damaged ? in->bytes_lost : 0);
    j_str(j, "damage_reason", in && in->damaged ? in->damage_reason : "");
    j_u64(j, "lost_events", in ? in->lost_events : 0);
    j_end_obj(j);
}

/* {"<category>": {"bytes_at_peak", "live_at_end", "max_live"}} for all categories. */
static void by_category(json_ctx *j, const char *key, const gp_device_stats *d)
{
    j_obj(j, key);
    for (int k = 0; k < LP_CAT_COUNT; k++) {
        j_obj1(j, lp_category_name((lp_category)k));
        j_u64(j, "bytes_at_peak", d ? d->by_category_at_peak[k] : 0);
        j_u64(j, "live_at_end", d ? d->by_category_live[k] : 0);
        j_u64(j, "max_live", d ? d->by_category_max[k] : 0);
        j_end_obj(j);
    }
    j_end_obj(j);
}

static void devices(json_ctx *j, const gp_profile *p)
{
    j_arr(j, "devices");
    for (size_t i = 0; i < p->n_devices; i++) {
        const gp_device_stats *d = &p->devices[i];
        j_obj(j, NULL);
        j_device(j, "device", d->device);
        j_u64(j, "peak_bytes", d->peak_bytes);
        j_u64(j, "peak_time_ns", d->peak_time_ns);
        j_u64(j, "live_at_end", d->live_bytes);
        by_category(j, "by_category", d);
        j_end_obj(j);
    }
    j_end_arr(j);
}

static void stats_fields(json_ctx *j, const gp_stats *s)
{
    j_u64(j, "bytes_at_peak", s->peak_bytes);
    j_u64(j, "total_bytes", s->total_bytes);
    j_u64(j, "count", s->count);
    j_u64(j, "frees", s->frees);
    j_u64(j, "live_at_end", s->live_bytes);
    j_u64(j, "live_count_at_end", s->live_count);
    j_u64(j, "max_live", s->max_live_bytes);
    j_u64(j, "temporaries", s->temporaries);
}

static size_t limit(size_t n, size_t top)
{
    return top && top < n ? top : n;
}

static void tag_keys(json_ctx *j, const gp_profile *p, gp__measure m, size_t top)
{
    size_t n = 0;
    size_t *ix = gp__sorted_tag_keys(p, m, &n);
    if (p->n_tag_keys && !ix)
        j->oom = true;
    j_arr(j, "tag_keys");
    for (size_t i = 0; i < limit(n, top); i++) {
        const gp_tag_key *k = &p->tag_keys[ix[i]];
        j_obj(j, NULL);
        j_str(j, "category", lp_category_name(k->category));
        j_str(j, "op", k->op);
        j_str(j, "module", k->module);
        j_device(j, "device", k->device);
        stats_fields(j, &k->stats);
        j_end_obj(j);
    }
    j_end_arr(j);
    free(ix);
}

static void sites(json_ctx *j, gp_profile *p, gp__measure m, size_t top)
{
    size_t n = 0;
    size_t *ix = gp__sorted_sites(p, m, &n);
    if (p->n_sites && !ix)
        j->oom = true;
    j_arr(j, "sites");
    for (size_t i = 0; i < limit(n, top); i++) {
        const gp_site *s = &p->sites[ix[i]];
        j_obj(j, NULL);
        j_str(j, "label", gp_site_label(p, s->stack));
        j_str(j, "key", gp_site_key(p, s->stack));
        j_u64(j, "stack", s->stack);
        const char *frames[SITE_FRAMES];
        size_t nf = gp_site_frames(p, s->stack, frames, SITE_FRAMES);
        j_arr1(j, "frames");
        for (size_t f = 0; f < nf; f++)
            j_str(j, NULL, frames[f]);
        j_end_arr(j);
        j_str(j, "category", lp_category_name(s->category));
        j_str(j, "op", s->op);
        j_str(j, "module", s->module);
        j_device(j, "device", s->device);
        stats_fields(j, &s->stats);
        j_u64(j, "leaked_bytes", s->stats.live_bytes);
        j_u64(j, "leaked_count", s->stats.live_count);
        j_end_obj(j);
    }
    j_end_arr(j);
    free(ix);
}

static void modules(json_ctx *j, const gp_profile *p, gp__measure m, size_t top)
{
    size_t n = 0;
    size_t *ix = gp__sorted_modules(p, m, &n);
    if (p->n_modules && !ix)
        j->oom = true;
    j_arr(j, "modules");
    for (size_t i = 0; i < limit(n, top); i++) {
        const gp_module_stats *ms = &p->modules[ix[i]];
        j_obj(j, NULL);
        j_str(j, "module", ms->module);
        stats_fields(j, &ms->stats);
        j_obj1(j, "bytes_at_peak_by_category");
        for (int k = 0; k < LP_CAT_COUNT; k++)
            j_u64(j, lp_category_name((lp_category)k), ms->by_category[k].peak_bytes);
        j_end_obj(j);
        j_end_obj(j);
    }
    j_end_arr(j);
    free(ix);
}

static void regions(json_ctx *j, const gp_profile *p)
{
    size_t n = 0;
    size_t *ix = gp__sorted_regions(p, &n);
    if (p->n_regions && !ix)
        j->oom = true;
    j_arr(j, "regions");
    for (size_t i = 0; i < n; i++) {
        const gp_region_stats *r = &p->regions[ix[i]];
        j_obj(j, NULL);
        j_str(j, "name", r->name);
        j_u64(j, "entries", r->entries);
        j_u64(j, "allocated_bytes", r->allocated_bytes);
        j_u64(j, "max_live_bytes", r->max_live_bytes);
        j_u64(j, "retained_bytes", r->retained_bytes);
        j_u64(j, "graph_bytes", r->graph_bytes);
        j_end_obj(j);
    }
    j_end_arr(j);
    free(ix);
}

static void iterations(json_ctx *j, const gp_profile *p)
{
    j_arr(j, "iterations");
    for (size_t i = 0; i < p->n_iterations; i++) {
        const gp_iteration *it = &p->iterations[i];
        j_obj(j, NULL);
        j_str(j, "mark", it->mark);
        j_u64(j, "time_ns", it->time_ns);
        j_u64(j, "live_bytes", it->live_bytes);
        j_i64(j, "growth_bytes",
              i ? (int64_t)(it->live_bytes - p->iterations[i - 1].live_bytes) : 0);
        j_obj1(j, "live_by_category");
        for (int k = 0; k < LP_CAT_COUNT; k++)
            j_u64(j, lp_category_name((lp_category)k), it->live_by_category[k]);
        j_end_obj(j);
        j_end_obj(j);
    }
    j_end_arr(j);
}

static void saved_tensors(json_ctx *j, const gp_profile *p, size_t top)
{
    size_t n = 0;
    size_t *ix = gp__sorted_saved(p, &n);
    if (p->n_saved && !ix)
        j->oom = true;
    j_arr(j, "saved_tensors");
    for (size_t i = 0; i < limit(n, top); i++) {
        const gp_saved_tensor *s = &p->saved[ix[i]];
        j_obj(j, NULL);
        j_str(j, "module", s->module);
        j_str(j, "op", s->op);
        j_str(j, "shape", s->shape);
        j_device(j, "device", s->device);
        j_u64(j, "count", s->stats.count);
        j_u64(j, "bytes", s->stats.total_bytes);
        j_u64(j, "bytes_at_peak", s->stats.peak_bytes);
        j_u64(j, "max_live", s->stats.max_live_bytes);
        j_u64(j, "live_at_end", s->stats.live_bytes);
        j_end_obj(j);
    }
    j_end_arr(j);
    free(ix);
}

static void findings(json_ctx *j, gp_profile *p)
{
    j_arr(j, "findings");
    for (size_t i = 0; i < p->n_findings; i++) {
        const gp_finding *f = &p->findings[i];
        j_obj(j, NULL);
        j_str(j, "kind", gp_finding_kind_name(f->kind));
        j_str(j, "region", f->region);
        j_u64(j, "bytes", f->bytes);
        j_u64(j, "count", f->count);
        j_u64(j, "first_time_ns", f->first_time_ns);
        j_str(j, "message", gp__finding_text(f));
        size_t *ix = gp__sorted_finding_items(f);
        if (f->n_items && !ix)
            j->oom = true;
        j_arr(j, "items");
        for (size_t k = 0; ix && k < f->n_items; k++) {
            const gp_finding_item *it = &f->items[ix[k]];
            j_obj1(j, NULL);
            j_str(j, "category", lp_category_name(it->category));
            j_str(j, "op", it->op);
            j_str(j, "module", it->module);
            j_str(j, "site", it->stack ? gp_site_label(p, it->stack) : "");
            j_u64(j, "bytes", it->bytes);
            j_u64(j, "count", it->count);
            j_end_obj(j);
        }
        j_end_arr(j);
        free(ix);
        j_end_obj(j);
    }
    j_end_arr(j);
}

int gp_render_json(FILE *out, gp_profile *p, const gp_render_options *o)
{
    gp_render_options def;
    if (!o) {
        gp_render_options_default(&def);
        o = &def;
    }
    gp__measure m;
    if (gp__measure_parse(o->measure, &m) != 0)
        m = GP__MEASURE_PEAK;
    json_ctx j = {.out = out};

    j_obj(&j, NULL);
    j_str(&j, "schema", "gradprof-report/1");
    trace_section(&j, p);
    j_device(&j, "primary_device", p->primary_device);
    j_u64(&j, "peak_bytes", p->peak_bytes);
    j_u64(&j, "peak_time_ns", p->peak_time_ns);
    j_u64(&j, "duration_ns", p->duration_ns);
    j_u64(&j, "alloc_count", p->alloc_count);
    j_u64(&j, "free_count", p->free_count);
    j_u64(&j, "retag_count", p->retag_count);
    j_u64(&j, "total_allocated_bytes", p->total_allocated_bytes);
    j_u64(&j, "leaked_bytes", p->leaked_bytes);
    j_u64(&j, "leaked_count", p->leaked_count);
    j_u64(&j, "temporary_count", p->temporary_count);
    j_u64(&j, "unknown_frees", p->unknown_frees);
    by_category(&j, "by_category", gp__primary_device(p));
    devices(&j, p);
    j_str(&j, "order", gp__measure_name(m));
    j_obj(&j, "counts");
    j_u64(&j, "tag_keys", p->n_tag_keys);
    j_u64(&j, "sites", p->n_sites);
    j_u64(&j, "modules", p->n_modules);
    j_u64(&j, "saved_tensors", p->n_saved);
    j_end_obj(&j);
    tag_keys(&j, p, m, o->top);
    sites(&j, p, m, o->top);
    modules(&j, p, m, o->top);
    regions(&j, p);
    iterations(&j, p);
    saved_tensors(&j, p, o->top);
    findings(&j, p);
    j_end_obj(&j);
    fputc('\n', out);
    if (fflush(out) != 0 || ferror(out))
        return -1;
    return j.oom ? -1 : 0;
}
