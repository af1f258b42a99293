/*
 * render_json — the report as JSON, schema "gradprof-report/1" (documented in the README, "JSON
 * schema"). Every key is always present (zeros, "" and empty arrays when there is nothing), so
 * scripts can rely on them. Byte counts and times are integers (bytes, nanoseconds); strings are
 * UTF-8 with JSON escapes (the JSON writer, json.h). The ranked lists (tag_keys, sites, modules,
 * saved_tensors) hold the first o->top entries (0 = all) in the order of o->measure, and `counts`
 * gives each list's full length; devices, regions, iterations and findings are complete; notes
 * are the first GP_MAX_NOTES (counts.notes says how many there were).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "render.h"
#include "render_common.h"

#define SITE_FRAMES 16 /* frames per site in "sites[].frames" */

/* A string member; NULL is written "" (every key is always present, see above). */
static void j_str(gp__jw *j, const char *key, const char *v)
{
    gp__jw_str(j, key, v ? v : "");
}

static void j_device(gp__jw *j, const char *key, int32_t device)
{
    char dev[16];
    j_str(j, key, gp__device_name(device, dev, sizeof dev));
}

/* ---- sections -------------------------------------------------------------------------------- */

static void trace_section(gp__jw *j, const gp_profile *p)
{
    static const char *const keys[] = {"command",          "pid", "host", "start_time",
                                       "gradprof_version", "mode"};
    const gp_trace_info *in = p->info;
    gp__jw_object(j, "trace", false);
    j_str(j, "path", p->path);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = p->trace ? gp_trace_meta(p->trace, keys[i]) : NULL;
        j_str(j, keys[i], v ? v : "");
    }
    char version[16];
    snprintf(version, sizeof version, "%u.%u", in ? in->version_major : 0,
             in ? in->version_minor : 0);
    j_str(j, "format_version", version);
    gp__jw_u64(j, "file_bytes", in ? in->file_bytes : 0);
    gp__jw_u64(j, "chunks", in ? in->chunks : 0);
    gp__jw_u64(j, "events", in ? in->events : 0);
    gp__jw_bool(j, "clean_end", in && in->clean_end);
    gp__jw_bool(j, "damaged", in && in->damaged);
    gp__jw_u64(j, "damage_offset", in && in->damaged ? in->damage_offset : 0);
    gp__jw_u64(j, "bytes_lost", in && in->damaged ? in->bytes_lost : 0);
    j_str(j, "damage_reason", in && in->damaged ? in->damage_reason : "");
    gp__jw_u64(j, "lost_events", in ? in->lost_events : 0);
    gp__jw_end(j);
}

/* {"<category>": {"bytes_at_peak", "live_at_end", "max_live"}} for all categories. */
static void by_category(gp__jw *j, const char *key, const gp_device_stats *d)
{
    gp__jw_object(j, key, false);
    for (int k = 0; k < LP_CAT_COUNT; k++) {
        gp__jw_object(j, lp_category_name((lp_category)k), true);
        gp__jw_u64(j, "bytes_at_peak", d ? d->by_category_at_peak[k] : 0);
        gp__jw_u64(j, "live_at_end", d ? d->by_category_live[k] : 0);
        gp__jw_u64(j, "max_live", d ? d->by_category_max[k] : 0);
        gp__jw_end(j);
    }
    gp__jw_end(j);
}

static void devices(gp__jw *j, const gp_profile *p)
{
    gp__jw_array(j, "devices", false);
    for (size_t i = 0; i < p->n_devices; i++) {
        const gp_device_stats *d = &p->devices[i];
        gp__jw_object(j, NULL, false);
        j_device(j, "device", d->device);
        gp__jw_u64(j, "peak_bytes", d->peak_bytes);
        gp__jw_u64(j, "peak_time_ns", d->peak_time_ns);
        gp__jw_u64(j, "live_at_end", d->live_bytes);
        by_category(j, "by_category", d);
        gp__jw_end(j);
    }
    gp__jw_end(j);
}

static void stats_fields(gp__jw *j, const gp_stats *s)
{
    gp__jw_u64(j, "bytes_at_peak", s->peak_bytes);
    gp__jw_u64(j, "total_bytes", s->total_bytes);
    gp__jw_u64(j, "count", s->count);
    gp__jw_u64(j, "frees", s->frees);
    gp__jw_u64(j, "live_at_end", s->live_bytes);
    gp__jw_u64(j, "live_count_at_end", s->live_count);
    gp__jw_u64(j, "max_live", s->max_live_bytes);
    gp__jw_u64(j, "temporaries", s->temporaries);
}

static size_t limit(size_t n, size_t top)
{
    return top && top < n ? top : n;
}

static void tag_keys(gp__jw *j, const gp_profile *p, gp__measure m, size_t top)
{
    size_t n = 0;
    size_t *ix = gp__sorted_tag_keys(p, m, &n);
    if (p->n_tag_keys && !ix)
        gp__jw_fail(j);
    gp__jw_array(j, "tag_keys", false);
    for (size_t i = 0; i < limit(n, top); i++) {
        const gp_tag_key *k = &p->tag_keys[ix[i]];
        gp__jw_object(j, NULL, false);
        j_str(j, "category", lp_category_name(k->category));
        j_str(j, "op", k->op);
        j_str(j, "module", k->module);
        j_device(j, "device", k->device);
        stats_fields(j, &k->stats);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    free(ix);
}

static void sites(gp__jw *j, gp_profile *p, gp__measure m, size_t top)
{
    size_t n = 0;
    size_t *ix = gp__sorted_sites(p, m, top ? top : SIZE_MAX, &n);
    if (p->n_sites && !ix)
        gp__jw_fail(j);
    gp__jw_array(j, "sites", false);
    for (size_t i = 0; i < limit(n, top); i++) {
        const gp_site *s = &p->sites[ix[i]];
        gp__jw_object(j, NULL, false);
        j_str(j, "label", gp_site_label(p, s->stack));
        j_str(j, "key", gp_site_key(p, s->stack));
        gp__jw_u64(j, "stack", s->stack);
        const char *frames[SITE_FRAMES];
        size_t nf = gp_site_frames(p, s->stack, frames, SITE_FRAMES);
        gp__jw_array(j, "frames", true);
        for (size_t f = 0; f < nf; f++)
            j_str(j, NULL, frames[f]);
        gp__jw_end(j);
        j_str(j, "category", lp_category_name(gp_site_category(p, s)));
        j_str(j, "op", gp_site_op(p, s));
        j_str(j, "module", gp_site_module(p, s));
        j_device(j, "device", gp_site_device(p, s));
        stats_fields(j, &s->stats);
        gp__jw_u64(j, "leaked_bytes", s->stats.live_bytes);
        gp__jw_u64(j, "leaked_count", s->stats.live_count);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    free(ix);
}

static void modules(gp__jw *j, const gp_profile *p, gp__measure m, size_t top)
{
    size_t n = 0;
    size_t *ix = gp__sorted_modules(p, m, &n);
    if (p->n_modules && !ix)
        gp__jw_fail(j);
    gp__jw_array(j, "modules", false);
    for (size_t i = 0; i < limit(n, top); i++) {
        const gp_module_stats *ms = &p->modules[ix[i]];
        gp__jw_object(j, NULL, false);
        j_str(j, "module", ms->module);
        stats_fields(j, &ms->stats);
        gp__jw_object(j, "bytes_at_peak_by_category", true);
        for (int k = 0; k < LP_CAT_COUNT; k++)
            gp__jw_u64(j, lp_category_name((lp_category)k), ms->by_category[k].peak_bytes);
        gp__jw_end(j);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    free(ix);
}

static void regions(gp__jw *j, const gp_profile *p)
{
    size_t n = 0;
    size_t *ix = gp__sorted_regions(p, &n);
    if (p->n_regions && !ix)
        gp__jw_fail(j);
    gp__jw_array(j, "regions", false);
    for (size_t i = 0; i < n; i++) {
        const gp_region_stats *r = &p->regions[ix[i]];
        gp__jw_object(j, NULL, false);
        j_str(j, "name", r->name);
        gp__jw_u64(j, "entries", r->entries);
        gp__jw_u64(j, "allocated_bytes", r->allocated_bytes);
        gp__jw_u64(j, "max_live_bytes", r->max_live_bytes);
        gp__jw_u64(j, "retained_bytes", r->retained_bytes);
        gp__jw_u64(j, "graph_bytes", r->graph_bytes);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    free(ix);
}

static void iterations(gp__jw *j, const gp_profile *p)
{
    gp__jw_array(j, "iterations", false);
    for (size_t i = 0; i < p->n_iterations; i++) {
        const gp_iteration *it = &p->iterations[i];
        gp__jw_object(j, NULL, false);
        j_str(j, "mark", it->mark);
        gp__jw_u64(j, "time_ns", it->time_ns);
        gp__jw_u64(j, "live_bytes", it->live_bytes);
        gp__jw_i64(j, "growth_bytes",
                   i ? (int64_t)(it->live_bytes - p->iterations[i - 1].live_bytes) : 0);
        gp__jw_object(j, "live_by_category", true);
        for (int k = 0; k < LP_CAT_COUNT; k++)
            gp__jw_u64(j, lp_category_name((lp_category)k), it->live_by_category[k]);
        gp__jw_end(j);
        gp__jw_end(j);
    }
    gp__jw_end(j);
}

static void saved_tensors(gp__jw *j, const gp_profile *p, size_t top)
{
    size_t n = 0;
    size_t *ix = gp__sorted_saved(p, &n);
    if (p->n_saved && !ix)
        gp__jw_fail(j);
    gp__jw_array(j, "saved_tensors", false);
    for (size_t i = 0; i < limit(n, top); i++) {
        const gp_saved_tensor *s = &p->saved[ix[i]];
        gp__jw_object(j, NULL, false);
        j_str(j, "module", s->module);
        j_str(j, "op", s->op);
        j_str(j, "shape", s->shape);
        j_str(j, "where", s->where);
        j_device(j, "device", s->device);
        gp__jw_u64(j, "count", s->stats.count);
        gp__jw_u64(j, "bytes", s->stats.total_bytes);
        gp__jw_u64(j, "bytes_at_peak", s->stats.peak_bytes);
        gp__jw_u64(j, "max_live", s->stats.max_live_bytes);
        gp__jw_u64(j, "live_at_end", s->stats.live_bytes);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    free(ix);
}

static void findings(gp__jw *j, gp_profile *p)
{
    gp__jw_array(j, "findings", false);
    for (size_t i = 0; i < p->n_findings; i++) {
        const gp_finding *f = &p->findings[i];
        gp__jw_object(j, NULL, false);
        j_str(j, "kind", gp_finding_kind_name(f->kind));
        j_str(j, "region", f->region);
        gp__jw_u64(j, "bytes", f->bytes);
        if (gp__finding_has_peak(f->kind))
            gp__jw_u64(j, "peak_bytes", f->peak_bytes);
        gp__jw_u64(j, "count", f->count);
        gp__jw_u64(j, "first_time_ns", f->first_time_ns);
        j_str(j, "message", gp__finding_text(f));
        j_str(j, "error_kind", f->error_kind ? f->error_kind : "");
        j_str(j, "error", f->message ? f->message : "");
        j_str(j, "where", f->where ? f->where : "");
        if (f->grad_off_thread) {
            gp__jw_object(j, "per_thread_grad", true);
            gp__jw_u64(j, "grad_off_thread", f->grad_off_thread);
            gp__jw_u64(j, "grad_off_tid", gp_trace_thread_os_tid(p->trace, f->grad_off_thread));
            gp__jw_u64(j, "built_thread", f->built_thread);
            gp__jw_u64(j, "built_tid", gp_trace_thread_os_tid(p->trace, f->built_thread));
            gp__jw_end(j);
        }
        size_t *ix = gp__sorted_finding_items(f);
        if (f->n_items && !ix)
            gp__jw_fail(j);
        gp__jw_array(j, "items", false);
        for (size_t k = 0; ix && k < f->n_items; k++) {
            const gp_finding_item *it = &f->items[ix[k]];
            gp__jw_object(j, NULL, true);
            j_str(j, "category", lp_category_name(it->category));
            j_str(j, "op", it->op);
            j_str(j, "module", it->module);
            j_str(j, "site", it->stack ? gp_site_label(p, it->stack) : "");
            gp__jw_u64(j, "bytes", it->bytes);
            gp__jw_u64(j, "count", it->count);
            gp__jw_end(j);
        }
        gp__jw_end(j);
        free(ix);
        gp__jw_end(j);
    }
    gp__jw_end(j);
}

/* Who kept graphs alive, at the PyTorch helper's look whose first holder kept the most nodes. */
static void holders(gp__jw *j, const gp_profile *p)
{
    gp__jw_array(j, "holders", false);
    for (size_t i = 0; i < p->n_holders; i++) {
        const gp_holder *h = &p->holders[i];
        gp__jw_object(j, NULL, true);
        j_str(j, "name", h->name);
        j_str(j, "kind", h->kind);
        j_str(j, "where", h->where);
        j_str(j, "container", h->container);
        j_str(j, "grad_fn", h->grad_fn);
        gp__jw_u64(j, "tensors", h->tensors);
        gp__jw_u64(j, "nodes", h->nodes);
        gp__jw_u64(j, "time_ns", h->time_ns);
        gp__jw_end(j);
    }
    gp__jw_end(j);
}

/* The notes (lp_note) in time order, as many as the profile kept (counts.notes: all of them). */
static void notes(gp__jw *j, const gp_profile *p)
{
    gp__jw_array(j, "notes", false);
    for (size_t i = 0; i < p->n_notes; i++) {
        const gp_note *n = &p->notes[i];
        gp__jw_object(j, NULL, true);
        j_str(j, "key", n->key);
        j_str(j, "value", n->value);
        gp__jw_u64(j, "time_ns", n->time_ns);
        gp__jw_u64(j, "thread", n->thread);
        gp__jw_end(j);
    }
    gp__jw_end(j);
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
    gp__jw j;
    gp__jw_begin(&j, out);

    gp__jw_object(&j, NULL, false);
    j_str(&j, "schema", "gradprof-report/1");
    char verdict[512];
    j_str(&j, "summary", gp__verdict(p, verdict, sizeof verdict) ? verdict : "");
    trace_section(&j, p);
    j_device(&j, "primary_device", p->primary_device);
    gp__jw_u64(&j, "peak_bytes", p->peak_bytes);
    gp__jw_u64(&j, "peak_time_ns", p->peak_time_ns);
    gp__jw_u64(&j, "duration_ns", p->duration_ns);
    gp__jw_u64(&j, "alloc_count", p->alloc_count);
    gp__jw_u64(&j, "free_count", p->free_count);
    gp__jw_u64(&j, "retag_count", p->retag_count);
    gp__jw_u64(&j, "total_allocated_bytes", p->total_allocated_bytes);
    gp__jw_u64(&j, "leaked_bytes", p->leaked_bytes);
    gp__jw_u64(&j, "leaked_count", p->leaked_count);
    gp__jw_u64(&j, "temporary_count", p->temporary_count);
    gp__jw_u64(&j, "unknown_frees", p->unknown_frees);
    gp__jw_u64(&j, "failed_allocs", p->failed_allocs);
    const gp_failed_alloc none = {.region = ""};
    const gp_failed_alloc *f = p->failed_allocs ? &p->first_failed : &none;
    gp__jw_object(&j, "first_failed", true);
    gp__jw_u64(&j, "size", f->size);
    gp__jw_u64(&j, "time_ns", f->time_ns);
    gp__jw_u64(&j, "thread", f->thread);
    gp__jw_u64(&j, "live_bytes", f->live_bytes);
    gp__jw_u64(&j, "graph_bytes", f->graph_bytes);
    j_str(&j, "region", f->region);
    gp__jw_end(&j);
    gp__jw_u64(&j, "graphs_at_peak", p->graphs_at_peak);
    by_category(&j, "by_category", gp__primary_device(p));
    devices(&j, p);
    j_str(&j, "order", gp__measure_name(m));
    gp__jw_object(&j, "counts", false);
    gp__jw_u64(&j, "tag_keys", p->n_tag_keys);
    gp__jw_u64(&j, "sites", p->n_sites);
    gp__jw_u64(&j, "modules", p->n_modules);
    gp__jw_u64(&j, "saved_tensors", p->n_saved);
    gp__jw_u64(&j, "notes", p->n_notes + p->notes_dropped);
    gp__jw_end(&j);
    tag_keys(&j, p, m, o->top);
    sites(&j, p, m, o->top);
    modules(&j, p, m, o->top);
    regions(&j, p);
    iterations(&j, p);
    saved_tensors(&j, p, o->top);
    findings(&j, p);
    holders(&j, p);
    notes(&j, p);
    gp__jw_end(&j);
    return gp__jw_finish(&j);
}
