/*
 * The CI gate's engine (API and definitions: check.h). Every number comes from the gp_profile or
 * the gp_diff; this file selects, compares and lists.
 */
#define _GNU_SOURCE /* sigabbrev_np */
#include "check.h"
#include "array.h"
#include "error.h"

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gp_check_rules_default(gp_check_rules *r)
{
    memset(r, 0, sizeof *r);
    r->forbid[LP_CAT_SAVED] = r->forbid[LP_CAT_GRADIENT] = r->forbid[LP_CAT_AUTOGRAD] = true;
    for (int k = 0; k < GP_FIND_KIND_COUNT; k++)
        r->detectors[k] = true;
    r->baseline_slack = GP_CHECK_DEFAULT_BASELINE_SLACK;
}

void gp_check_analysis_options(const gp_check_rules *r, gp_analysis_options *o)
{
    if (r->n_regions) {
        o->inference_regions = r->regions;
        o->n_inference_regions = r->n_regions;
    }
    if (r->has_max_growth)
        o->growth_threshold = r->max_growth;
}

gp_check_verdict gp_check_job_verdict(gp_check_result *const *results, size_t n)
{
    gp_check_verdict v = GP_CHECK_PASSED;
    for (size_t i = 0; i < n; i++)
        if (results[i]->verdict == GP_CHECK_UNJUDGED)
            return GP_CHECK_UNJUDGED;
        else if (results[i]->verdict == GP_CHECK_FAILED)
            v = GP_CHECK_FAILED;
    return v;
}

const char *gp_check_kind_name(gp_check_kind k)
{
    static const char *const names[] = {"forbid",   "max-peak", "max-growth",
                                        "no-leaks", "detector", "baseline"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "unknown";
}

/* ---- judging --------------------------------------------------------------------------------- */

const char *gp_check_end_reason(const char *end_reason, char *buf, size_t size)
{
    if (!end_reason || !strcmp(end_reason, "exit"))
        return NULL;
    int sig = 0;
    char tail;
    unsigned long long limit;
    if (!strcmp(end_reason, "exec")) {
        snprintf(buf, size, "exec'd another program (its new image records a trace of its own)");
    } else if (sscanf(end_reason, "signal %d%c", &sig, &tail) == 1 && sig > 0 && sig < 128) {
        const char *abbrev = sigabbrev_np(sig);
        if (abbrev)
            snprintf(buf, size, "was killed by signal %d (SIG%s)", sig, abbrev);
        else
            snprintf(buf, size, "was killed by signal %d", sig);
    } else if (sscanf(end_reason, "file size limit %llu%c", &limit, &tail) == 1) {
        snprintf(buf, size,
                 "reached its file size limit (RLIMIT_FSIZE, %llu bytes): the recorder stopped "
                 "there, the program went on",
                 limit);
    } else {
        snprintf(buf, size, "ended by '%.64s'", end_reason);
    }
    return buf;
}

/* Appends "; " (after the first) and a formatted part to buf at *used. */
static void part_add(char *buf, size_t size, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void part_add(char *buf, size_t size, size_t *used, const char *fmt, ...)
{
    if (*used >= size)
        return;
    if (buf[0] && *used + 2 < size) {
        memcpy(buf + *used, "; ", 3);
        *used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *used, size - *used, fmt, ap);
    va_end(ap);
    *used = n < 0 ? size : *used + (size_t)n;
}

int gp_check_complete(const gp_profile *p, char *why, size_t why_size)
{
    const gp_trace_info *info = p->info;
    bool meta = gp_trace_meta(p->trace, "command") || gp_trace_meta(p->trace, "pid") ||
                gp_trace_meta(p->trace, "gradprof_version");
    char parts[640] = "", how[160];
    size_t used = 0;
    /* An exec ends the image as an exit does (its memory is gone, the new program records a
     * trace of its own), without an END record: the exec could have failed and the program gone
     * on writing (its end replaces the exec's end_reason then). */
    const char *end_reason = gp_trace_meta(p->trace, "end_reason");
    bool exec_end = end_reason && strcmp(end_reason, "exec") == 0;
    const char *ended = exec_end ? NULL : gp_check_end_reason(end_reason, how, sizeof how);
    if (!meta && info->events == 0)
        part_add(parts, sizeof parts, &used,
                 "it holds no metadata and no events (only the file header: the recorder wrote "
                 "nothing after it)");
    else if (!meta)
        part_add(parts, sizeof parts, &used, "it has no metadata (no command or pid)");
    else if (info->events == 0)
        part_add(parts, sizeof parts, &used, "it holds no events");
    if (info->damaged)
        part_add(parts, sizeof parts, &used,
                 "it is damaged at byte %" PRIu64 " (%s): %" PRIu64 " bytes lost",
                 info->damage_offset, info->damage_reason, info->bytes_lost);
    if (ended)
        part_add(parts, sizeof parts, &used, "the program %s", how);
    else if (!info->clean_end && !exec_end && !info->damaged && info->events > 0)
        part_add(parts, sizeof parts, &used,
                 "it has no end record (the program was killed, or is still running)");
    if (info->lost_events)
        part_add(parts, sizeof parts, &used, "the recorder dropped %" PRIu64 " events",
                 info->lost_events);
    if (!parts[0])
        return 0;
    snprintf(why, why_size, "'%s' is incomplete: %s", p->path, parts);
    return GP_EINCOMPLETE;
}

/* What the "saves_seen" notes of a tagging source say: the first that is not "all" (it missed
 * some saves: "some (functorch transforms)"), else "all" when there is one, else NULL. */
static const char *saves_seen(const gp_profile *p)
{
    const char *seen = NULL;
    for (size_t i = 0; i < p->n_notes; i++) {
        if (strcmp(p->notes[i].key, "saves_seen") != 0)
            continue;
        if (strcmp(p->notes[i].value, "all") != 0)
            return p->notes[i].value;
        seen = "all";
    }
    return seen;
}

/* Whether a tagging source said it saw every tensor saved for backward in the process: notes
 * "saves_seen", all of them "all", and none past the notes' cap (one there could say otherwise). */
static bool every_save_seen(const gp_profile *p)
{
    const char *seen = saves_seen(p);
    return seen && !strcmp(seen, "all") && p->notes_dropped == 0;
}

int gp_check_classified(const gp_profile *p, uint64_t *unclassified, char *why, size_t why_size)
{
    uint64_t bytes = 0, total = 0, tagged = 0;
    for (size_t i = 0; i < p->n_sites; i++) {
        const gp_site *s = &p->sites[i];
        if (s->stack == 0)
            bytes += gp_site_allocated(p, i, LP_CAT_OTHER);
        for (int c = 0; c < LP_CAT_COUNT; c++)
            total += gp_site_allocated(p, i, (lp_category)c);
        tagged += gp_site_allocated(p, i, LP_CAT_PARAMETER) + gp_site_allocated(p, i, LP_CAT_SAVED);
    }
    if (unclassified)
        *unclassified = bytes;
    /* Parameters and saved tensors come only from a tagging source (the tensor library, the
     * PyTorch helper), never from a frame rule: with one attached, what it did not tag is not
     * the graph memory it tags; one that saw every save says so even when it tagged nothing. */
    if (total == 0 || tagged > 0 || every_save_seen(p) ||
        (unsigned __int128)bytes * 100 <=
            (unsigned __int128)total * GP_CHECK_UNCLASSIFIED_MAX_PERCENT)
        return 0;
    snprintf(why, why_size,
             "'%s': %" PRIu64 "%% of the bytes allocated (%" PRIu64 " of %" PRIu64
             ") are untagged and have no call stack, so neither a tag nor a frame rule says what "
             "they are: graph memory cannot be told from other memory (recorded with --no-stacks "
             "or --stack-sample, and nothing tagged it)",
             p->path, (uint64_t)((unsigned __int128)bytes * 100 / total), bytes, total);
    return GP_EUNCLASSIFIED;
}

/* ---- building the result --------------------------------------------------------------------- */

typedef struct builder {
    gp_check_result *r;
    size_t cap_rules, cap_violations;
    bool oom;
} builder;

static gp_check_rule *rule_begin(builder *b, gp_check_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static gp_check_rule *rule_begin(builder *b, gp_check_kind kind, const char *fmt, ...)
{
    gp_check_result *r = b->r;
    gp_check_rule *ru = gp__push((void **)&r->rules, &r->n_rules, &b->cap_rules, sizeof *ru);
    if (!ru) {
        b->oom = true;
        return NULL;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ru->name, sizeof ru->name, fmt, ap);
    va_end(ap);
    ru->kind = kind;
    ru->first = r->n_violations;
    return ru;
}

/* A new violation of the last rule begun. */
static gp_check_violation *violation_add(builder *b, const char *rule, const char *region)
{
    gp_check_result *r = b->r;
    gp_check_violation *v =
        gp__push((void **)&r->violations, &r->n_violations, &b->cap_violations, sizeof *v);
    if (!v) {
        b->oom = true;
        return NULL;
    }
    v->kind = r->rules[r->n_rules - 1].kind;
    v->rule = rule;
    v->region = region ? region : "";
    v->category = LP_CAT_COUNT;
    r->rules[r->n_rules - 1].n++;
    return v;
}

/* Rows being gathered for a violation, with the order they were met in (to break ties). */
typedef struct item_list {
    struct ranked_item {
        gp_finding_item it;
        size_t seq;
    } * rows;
    size_t n, cap;
} item_list;

static void list_add(builder *b, item_list *l, gp_finding_item it)
{
    struct ranked_item *row = gp__push((void **)&l->rows, &l->n, &l->cap, sizeof *row);
    if (!row) {
        b->oom = true;
        return;
    }
    row->it = it;
    row->seq = l->n - 1;
}

static int by_bytes(const void *pa, const void *pb)
{
    const struct ranked_item *a = pa, *b = pb;
    if (a->it.bytes != b->it.bytes)
        return a->it.bytes > b->it.bytes ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

/* Moves the rows, largest first (ties in the order met), onto v's items until it holds `limit`
 * (at most GP_CHECK_MAX_ITEMS), counting the rest in more_items; frees the list. */
static void list_take(builder *b, item_list *l, gp_check_violation *v, size_t limit)
{
    if (l->n)
        qsort(l->rows, l->n, sizeof *l->rows, by_bytes);
    size_t room = limit > v->n_items ? limit - v->n_items : 0, keep = l->n < room ? l->n : room;
    if (keep) {
        gp_finding_item *items = realloc(v->items, (v->n_items + keep) * sizeof *items);
        if (!items) {
            b->oom = true;
            keep = 0;
        } else {
            v->items = items;
        }
    }
    for (size_t i = 0; i < keep; i++)
        v->items[v->n_items++] = l->rows[i].it;
    v->more_items += l->n - keep;
    free(l->rows);
    *l = (item_list){0};
}

/* The measures items are ranked by, as gp_tag_keys_by names them. */
typedef enum measure { M_TOTAL, M_PEAK, M_LEAKED } measure;
static const char *const measure_names[] = {"total", "peak", "leaked"};

static uint64_t stats_value(const gp_stats *s, measure m)
{
    return m == M_TOTAL ? s->total_bytes : m == M_PEAK ? s->peak_bytes : s->live_bytes;
}

/*
 * The rows behind a violation by a measure, over tag keys of category `cat` (any when cat < 0;
 * the primary device only for the peak): one per tag key, with the stack of its top site, except
 * that untagged memory (op and module "") is shown by call site, since raw allocations differ
 * only by where they were made.
 */
static void key_items(builder *b, const gp_profile *p, gp_check_violation *v, int cat, measure m)
{
    bool primary_only = m == M_PEAK, untagged = false;
    item_list l = {0};
    size_t *order = gp_tag_keys_by(p, measure_names[m]);
    if (!order) {
        b->oom = true;
        return;
    }
    for (size_t i = 0; i < p->n_tag_keys; i++) {
        const gp_tag_key *k = &p->tag_keys[order[i]];
        uint64_t bytes = stats_value(&k->stats, m);
        if (!bytes || (cat >= 0 && k->category != (lp_category)cat) ||
            (primary_only && k->device != p->primary_device))
            continue;
        if (!*k->op && !*k->module) {
            untagged = true;
            continue;
        }
        uint32_t stack = k->top_site < p->n_sites ? p->sites[k->top_site].stack : 0;
        list_add(b, &l,
                 (gp_finding_item){k->category, k->op, k->module, stack, bytes,
                                   m == M_LEAKED ? k->stats.live_count : k->stats.count});
    }
    free(order);
    order = untagged ? gp_sites_by(p, measure_names[m]) : NULL;
    if (untagged && !order)
        b->oom = true;
    for (size_t i = 0; order && i < p->n_sites; i++) {
        const gp_site *s = &p->sites[order[i]];
        if (*gp_site_op(p, s) || *gp_site_module(p, s) ||
            (primary_only && gp_site_device(p, s) != p->primary_device))
            continue;
        uint64_t bytes =
            m == M_TOTAL ? (cat >= 0 ? gp_site_allocated(p, order[i], (lp_category)cat) : 0)
                         : stats_value(&s->stats, m);
        if (bytes)
            list_add(b, &l,
                     (gp_finding_item){cat >= 0 ? (lp_category)cat : gp_site_category(p, s), "", "",
                                       s->stack, bytes,
                                       m == M_LEAKED ? s->stats.live_count : s->stats.count});
    }
    free(order);
    list_take(b, &l, v, GP_CHECK_MAX_ITEMS);
}

/* ---- the rules ------------------------------------------------------------------------------- */

static const gp_region_stats *find_region(const gp_profile *p, const char *name)
{
    for (size_t i = 0; i < p->n_regions; i++)
        if (!strcmp(p->regions[i].name, name))
            return &p->regions[i];
    return NULL;
}

/* forbid CAT over the whole run: the tag keys of the category, by bytes that entered them. */
static void check_forbid(builder *b, const gp_profile *p, lp_category c)
{
    if (!rule_begin(b, GP_CHECK_FORBID, "forbid %s", lp_category_name(c)))
        return;
    uint64_t bytes = 0, count = 0;
    for (size_t i = 0; i < p->n_tag_keys; i++)
        if (p->tag_keys[i].category == c) {
            bytes += p->tag_keys[i].stats.total_bytes;
            count += p->tag_keys[i].stats.count;
        }
    gp_check_violation *v = bytes ? violation_add(b, "forbid", "") : NULL;
    if (!v)
        return;
    v->category = c;
    v->bytes = bytes;
    v->count = count;
    key_items(b, p, v, (int)c, M_TOTAL);
}

/* forbid CAT in region R: the bytes that entered CAT while R was open. Items: the rows of the
 * detectors that fired in R (they itemise graph memory), of category CAT, each (op, module)
 * once. */
static void check_forbid_region(builder *b, const gp_profile *p, const gp_region_stats *reg,
                                lp_category c)
{
    uint64_t bytes = reg->allocated_by_category[c];
    if (!rule_begin(b, GP_CHECK_FORBID, "forbid %s in %s", lp_category_name(c), reg->name) ||
        !bytes)
        return;
    gp_check_violation *v = violation_add(b, "forbid", reg->name);
    if (!v)
        return;
    v->category = c;
    v->bytes = bytes;
    item_list l = {0};
    for (size_t i = 0; i < p->n_findings; i++) {
        const gp_finding *f = &p->findings[i];
        if (f->kind == GP_FIND_GROWTH || f->kind == GP_FIND_GRAPH_ESCAPES ||
            strcmp(f->region, reg->name) != 0)
            continue;
        for (size_t j = 0; j < f->n_items; j++) {
            const gp_finding_item *it = &f->items[j];
            bool seen = it->category != c;
            for (size_t k = 0; k < l.n && !seen; k++)
                seen = !strcmp(l.rows[k].it.op, it->op) && !strcmp(l.rows[k].it.module, it->module);
            if (!seen)
                list_add(b, &l, *it);
        }
    }
    list_take(b, &l, v, GP_CHECK_MAX_ITEMS);
}

static void check_max_peak(builder *b, const gp_profile *p, const gp_check_rules *o)
{
    if (o->n_regions == 0) {
        if (!rule_begin(b, GP_CHECK_MAX_PEAK, "max-peak") || p->peak_bytes <= o->max_peak)
            return;
        gp_check_violation *v = violation_add(b, "max-peak", "");
        if (!v)
            return;
        v->bytes = p->peak_bytes;
        v->limit = o->max_peak;
        v->has_limit = true;
        v->time_ns = p->peak_time_ns;
        key_items(b, p, v, -1, M_PEAK);
        return;
    }
    for (size_t i = 0; i < o->n_regions; i++) {
        const gp_region_stats *reg = find_region(p, o->regions[i]);
        if (!rule_begin(b, GP_CHECK_MAX_PEAK, "max-peak in %s", reg->name) ||
            reg->max_live_bytes <= o->max_peak)
            continue;
        gp_check_violation *v = violation_add(b, "max-peak", reg->name);
        if (!v)
            return;
        v->bytes = reg->max_live_bytes;
        v->limit = o->max_peak;
        v->has_limit = true;
    }
}

/* Copies a finding's items (the engine's order) onto v. */
static void finding_items(builder *b, const gp_finding *f, gp_check_violation *v)
{
    item_list l = {0};
    for (size_t i = 0; i < f->n_items; i++)
        list_add(b, &l, f->items[i]);
    list_take(b, &l, v, GP_CHECK_MAX_ITEMS);
}

static void check_max_growth(builder *b, const gp_profile *p, const gp_check_rules *o)
{
    gp_check_rule *ru = rule_begin(b, GP_CHECK_MAX_GROWTH, "max-growth");
    if (!ru)
        return;
    if (p->n_iterations < 2) {
        snprintf(ru->skipped, sizeof ru->skipped,
                 "the trace has %zu marks; growth across iterations needs at least 2 (lp_mark)",
                 p->n_iterations);
        return;
    }
    const gp_iteration *first = &p->iterations[0], *last = &p->iterations[p->n_iterations - 1];
    if (last->live_bytes <= first->live_bytes ||
        last->live_bytes - first->live_bytes <= o->max_growth)
        return;
    gp_check_violation *v = violation_add(b, "max-growth", "");
    if (!v)
        return;
    v->bytes = last->live_bytes - first->live_bytes;
    v->limit = o->max_growth;
    v->has_limit = true;
    v->first_mark = first;
    v->last_mark = last;
    v->n_marks = p->n_iterations;
    /* The growth detector ran with max_growth as its threshold: its items are the sites whose
     * live bytes grew (none when the growth was not steady). */
    for (size_t i = 0; i < p->n_findings; i++)
        if (p->findings[i].kind == GP_FIND_GROWTH) {
            finding_items(b, &p->findings[i], v);
            break;
        }
}

static void check_leaks(builder *b, const gp_profile *p)
{
    if (!rule_begin(b, GP_CHECK_NO_LEAKS, "no-leaks") || p->leaked_bytes == 0)
        return;
    gp_check_violation *v = violation_add(b, "no-leaks", "");
    if (!v)
        return;
    v->bytes = p->leaked_bytes;
    v->count = p->leaked_count;
    key_items(b, p, v, -1, M_LEAKED);
}

static void check_detectors(builder *b, const gp_profile *p, const gp_check_rules *o)
{
    for (int k = 0; k < GP_FIND_KIND_COUNT; k++) {
        /* With max_growth, the growth detector is that rule (it ran with its threshold). */
        if (!o->detectors[k] || (k == GP_FIND_GROWTH && o->has_max_growth))
            continue;
        const char *kind = gp_finding_kind_name((gp_finding_kind)k);
        if (!rule_begin(b, GP_CHECK_DETECTOR, "detector %s", kind))
            return;
        for (size_t i = 0; i < p->n_findings; i++) {
            const gp_finding *f = &p->findings[i];
            if (f->kind != (gp_finding_kind)k)
                continue;
            gp_check_violation *v = violation_add(b, kind, f->region);
            if (!v)
                return;
            v->bytes = f->bytes;
            v->count = f->count;
            v->finding = f;
            finding_items(b, f, v);
        }
    }
}

/* baseline: the graph memory A holds that the grad-off run B does not (diff.h). Items: the
 * saved-for-backward bytes (inferred) of each op, then the held graph nodes and gradients of
 * each tag key. */
static void check_baseline(builder *b, const gp_diff *d, uint64_t slack)
{
    if (!rule_begin(b, GP_CHECK_BASELINE, "baseline %s", d->b.path))
        return;
    uint64_t autograd = d->by_category[LP_CAT_AUTOGRAD].held_bytes,
             gradient = d->by_category[LP_CAT_GRADIENT].held_bytes;
    uint64_t graph = d->saved_inferred_bytes + autograd + gradient;
    if (graph <= slack)
        return;
    gp_check_violation *v = violation_add(b, "baseline", "");
    if (!v)
        return;
    v->bytes = graph;
    v->limit = slack;
    v->has_limit = true;
    v->baseline_path = d->b.path;
    v->saved_bytes = d->saved_inferred_bytes;
    v->held_graph_bytes = autograd + gradient;
    v->category = d->saved_inferred_bytes ? LP_CAT_SAVED
                  : autograd >= gradient  ? LP_CAT_AUTOGRAD
                                          : LP_CAT_GRADIENT;
    item_list l = {0};
    for (size_t i = 0; i < d->n_ops; i++) {
        const gp_diff_row *r = &d->ops[i];
        if (r->saved_inferred_bytes)
            list_add(
                b, &l,
                (gp_finding_item){LP_CAT_SAVED, r->op, r->module, 0, r->saved_inferred_bytes, 0});
    }
    v->n_saved_ops = l.n;
    list_take(b, &l, v, GP_CHECK_MAX_ITEMS / 2); /* room for the graph nodes after them */
    v->n_saved_items = v->n_items;
    for (size_t i = 0; i < d->n_keys; i++) {
        const gp_diff_row *r = &d->keys[i];
        if ((r->category == LP_CAT_AUTOGRAD || r->category == LP_CAT_GRADIENT) && r->held_bytes)
            list_add(b, &l, (gp_finding_item){r->category, r->op, r->module, 0, r->held_bytes, 0});
    }
    list_take(b, &l, v, GP_CHECK_MAX_ITEMS);
}

/* ---- the run --------------------------------------------------------------------------------- */

static void doubt_add(gp_check_result *r, int code, const char *option, bool accepted,
                      const char *message)
{
    if (r->n_doubts == sizeof r->doubts / sizeof r->doubts[0])
        return;
    gp_check_doubt *d = &r->doubts[r->n_doubts++];
    d->code = code;
    d->option = option;
    d->accepted = accepted;
    snprintf(d->message, sizeof d->message, "%s", message);
}

/* Whether any gradient-leak detector is on. */
static bool any_detector(const gp_check_rules *o)
{
    for (int k = 0; k < GP_FIND_KIND_COUNT; k++)
        if (o->detectors[k])
            return true;
    return false;
}

static void judge(gp_check_result *r, const gp_profile *p, const gp_check_rules *o)
{
    char why[768];
    if (gp_check_complete(p, why, sizeof why))
        doubt_add(r, GP_EINCOMPLETE, "--allow-incomplete", o->allow_incomplete, why);
    if (o->baseline && gp_check_complete(o->baseline->b.profile, why, sizeof why))
        doubt_add(r, GP_EINCOMPLETE, "--allow-incomplete", o->allow_incomplete, why);
    bool by_category = o->baseline != NULL || any_detector(o);
    for (int k = 0; k < LP_CAT_COUNT; k++)
        by_category = by_category || o->forbid[k];
    if (by_category && gp_check_classified(p, NULL, why, sizeof why))
        doubt_add(r, GP_EUNCLASSIFIED, "--allow-unclassified", o->allow_unclassified, why);
}

/* After the rules: a trace that passed them although its tagging source missed some tensors
 * saved for backward is not judged (what it missed could fail them); one that failed them has
 * failed whatever it missed. */
static void judge_unseen_saves(gp_check_result *r, const gp_profile *p, const gp_check_rules *o)
{
    bool by_saved = o->baseline != NULL || o->forbid[LP_CAT_SAVED] || any_detector(o);
    const char *seen = saves_seen(p);
    if (r->n_violations || !by_saved || !seen || !strcmp(seen, "all"))
        return;
    char why[768];
    snprintf(why, sizeof why,
             "'%s' does not show every tensor saved for backward (saves_seen: %.200s): graph "
             "memory made there could fail the rules",
             p->path, seen);
    doubt_add(r, GP_EINCOMPLETE, "--allow-incomplete", o->allow_incomplete, why);
}

/* The hint of a program that ran backward (it trains, or asks for gradients of its inputs) and
 * failed `forbid` over the whole run: the graphs backward needed count too, where the user likely
 * meant its evaluation. */
static void hint_backward(gp_check_result *r, const gp_profile *p, const gp_check_rules *o)
{
    const gp_region_stats *backward = find_region(p, LP_REGION_BACKWARD);
    bool forbid_failed = false;
    for (size_t i = 0; i < r->n_violations; i++)
        forbid_failed = forbid_failed || r->violations[i].kind == GP_CHECK_FORBID;
    if (o->n_regions || !forbid_failed || !backward || !backward->entries)
        return;
    const gp_region_stats *inference = find_region(p, LP_REGION_INFERENCE);
    int n = snprintf(r->hint, sizeof r->hint,
                     "the program ran backward %llu time%s: forbid counts the graphs backward "
                     "needed too; ",
                     (unsigned long long)backward->entries, backward->entries == 1 ? "" : "s");
    if (n <= 0 || (size_t)n >= sizeof r->hint)
        return;
    if (!inference || !inference->entries)
        snprintf(r->hint + n, sizeof r->hint - (size_t)n, "%s",
                 "'--region NAME' scopes it to a region of the trace, '--forbid none' keeps the "
                 "other rules");
    else
        snprintf(r->hint + n, sizeof r->hint - (size_t)n,
                 "'--region inference' judges its evaluation alone (the calls of a model in eval "
                 "mode), which built %s",
                 inference->graph_bytes ? "graphs too" : "none");
}

static void evaluate(builder *b, const gp_profile *p, const gp_check_rules *o)
{
    for (int c = 0; c < LP_CAT_COUNT; c++) {
        if (!o->forbid[c])
            continue;
        if (o->n_regions == 0)
            check_forbid(b, p, (lp_category)c);
        for (size_t i = 0; i < o->n_regions; i++)
            check_forbid_region(b, p, find_region(p, o->regions[i]), (lp_category)c);
    }
    if (o->has_max_peak)
        check_max_peak(b, p, o);
    if (o->has_max_growth)
        check_max_growth(b, p, o);
    if (o->no_leaks)
        check_leaks(b, p);
    check_detectors(b, p, o);
    if (o->baseline)
        check_baseline(b, o->baseline, o->baseline_slack);
}

int gp_check_run(const gp_profile *p, const gp_check_rules *rules, gp_check_result **out, char *err,
                 size_t err_size)
{
    *out = NULL;
    for (size_t i = 0; i < rules->n_regions; i++) {
        if (find_region(p, rules->regions[i]))
            continue;
        char known[512] = "none";
        size_t used = 0;
        for (size_t j = 0; j < p->n_regions && used < sizeof known; j++)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", j ? ", " : "",
                                     p->regions[j].name);
        snprintf(err, err_size, "no region '%s' in '%s' (regions: %s)", rules->regions[i], p->path,
                 known);
        return GP_EINVAL;
    }
    gp_check_result *r = calloc(1, sizeof *r);
    if (!r)
        return GP_ENOMEM;
    r->path = p->path;
    builder b = {.r = r};
    judge(r, p, rules);
    evaluate(&b, p, rules);
    if (b.oom) {
        gp_check_result_free(r);
        snprintf(err, err_size, "out of memory while checking '%s'", p->path);
        return GP_ENOMEM;
    }
    for (size_t i = 0; i < r->n_violations; i++) {
        gp_check_violation *v = &r->violations[i];
        if (v->category == LP_CAT_COUNT && v->n_items)
            v->category = v->items[0].category;
    }
    for (size_t i = 0; i < r->n_rules; i++) {
        r->rules_failed += r->rules[i].n > 0;
        r->rules_skipped += r->rules[i].skipped[0] != '\0';
    }
    hint_backward(r, p, rules);
    judge_unseen_saves(r, p, rules);
    r->verdict = r->n_violations ? GP_CHECK_FAILED : GP_CHECK_PASSED;
    for (size_t i = 0; i < r->n_doubts; i++)
        if (!r->doubts[i].accepted)
            r->verdict = GP_CHECK_UNJUDGED;
    *out = r;
    return 0;
}

void gp_check_result_free(gp_check_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_violations; i++)
        free(r->violations[i].items);
    free(r->violations);
    free(r->rules);
    free(r);
}
