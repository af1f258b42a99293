/*
 * gradprof check: the CI gate. Loads a trace, evaluates rules, prints PASS or FAIL with one block
 * per violation (text or JSON), optionally writes a JUnit XML report, and exits 0 (passed),
 * 1 (violations) or 2 (bad usage, unreadable trace, unwritable report).
 *
 * Rules (each is one JUnit testcase; a rule has zero or more violations):
 *   forbid CAT        bytes of a forbidden category allocated (or retagged into it, as SAVED
 *                     always is) anywhere in the run: one per forbidden category;
 *   forbid ... in R   with --region R: graph memory (saved + gradient + autograd) allocated
 *                     inside R, which the analysis counts per region;
 *   max-peak          the peak live bytes (with --region: the most live while inside R) > SIZE;
 *   max-growth        live bytes at the last mark minus the first > SIZE;
 *   no-leaks          bytes still live at the end of the trace;
 *   detector KIND     each gradient-leak detector (analysis.h: gp_finding) that fired.
 * Every number comes from the gp_profile; this file only compares and prints.
 */
#include "array.h"
#include "cli.h"
#include "diff.h"
#include "commands.h"
#include "render.h"
#include "render_common.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define CMD "check"
#define MAX_REGIONS 64
#define MAX_ITEMS 10  /* rows per violation in text output */
#define MAX_KEEP 100  /* rows per violation kept (JSON); the rest are counted */
#define MAX_FRAMES 8  /* frames per stack */
#define FRAME_ITEMS 2 /* items whose stack is printed in text output */

static const char check_usage[] =
    "usage: gradprof check FILE [--forbid CAT,...] [--region NAME]... [--max-peak SIZE]\n"
    "                           [--max-growth SIZE] [--no-leaks] [--detectors LIST]\n"
    "                           [--junit OUT.xml] [--format text|json]\n"
    "\n"
    "The CI gate: fails (exit 1) when the trace breaks a rule, printing each violation with its\n"
    "category, bytes, op/module and the top frames of the call sites behind it.\n"
    "\n"
    "rules:\n"
    "  --forbid CAT,...   categories that must never be allocated (default saved,gradient,\n"
    "                     autograd: the memory of an autograd graph); 'none' forbids nothing.\n"
    "                     Categories: parameter, input, activation, saved, gradient,\n"
    "                     optimizer_state, autograd, temporary, other\n"
    "  --region NAME      check only inside region NAME (repeatable): forbid applies to graph\n"
    "                     memory allocated inside it, --max-peak to the most bytes live while\n"
    "                     inside it, and NAME is the region the detectors treat as inference\n"
    "                     (default 'inference'). The region must be in the trace\n"
    "  --max-peak SIZE    fail when the peak live bytes exceed SIZE\n"
    "  --max-growth SIZE  fail when live bytes grow by more than SIZE from the first marked\n"
    "                     iteration (lp_mark) to the last, naming the sites that grew\n"
    "  --no-leaks         fail when memory is still live at the end of the trace\n"
    "  --detectors LIST   gradient-leak detectors whose findings fail the check: all (default),\n"
    "                     none, or some of graph_without_grad, forgot_no_grad,\n"
    "                     growth_across_iterations, param_grad_in_inference,\n"
    "                     graph_escapes_inference\n"
    "  --rules FILE|none  frame rules for allocations nothing tagged (default: the built-in\n"
    "                     PyTorch rules, tools/rules/pytorch.rules)\n"
    "  --baseline B       also fail when this trace holds graph memory that trace B (the same\n"
    "                     program with grad off) does not: the aligned diff's saved-for-backward\n"
    "                     bytes (inferred, so it works on untagged runs) plus held graph nodes\n"
    "                     and gradients (see 'gradprof diff --help'), naming the ops\n"
    "  --baseline-slack SIZE  graph memory tolerated against the baseline (default 64k)\n"
    "\n"
    "output:\n"
    "  --format FMT       text (default) or json (schema gradprof-check/1) on standard output\n"
    "  --junit OUT.xml    also write a JUnit XML report: one testcase per rule\n"
    "  -h, --help         this help\n"
    "\n"
    "SIZE: bytes, or a number with a unit: 64k, 1.5MiB (K M G T = KiB MiB GiB TiB, powers of\n"
    "1024), 100MB (KB MB GB TB, powers of 1000).\n"
    "\n"
    "Exit status: 0 every rule passed, 1 at least one violation, 2 bad usage, a trace that\n"
    "cannot be read or a report that cannot be written. A damaged trace is checked up to the\n"
    "damage, with a warning.\n";

enum {
    OPT_FORBID = 256,
    OPT_REGION,
    OPT_MAX_PEAK,
    OPT_MAX_GROWTH,
    OPT_NO_LEAKS,
    OPT_JUNIT,
    OPT_FORMAT,
    OPT_DETECTORS,
    OPT_RULES,
    OPT_BASELINE,
    OPT_BASELINE_SLACK
};

static const struct option long_options[] = {
    {"forbid", required_argument, NULL, OPT_FORBID},
    {"region", required_argument, NULL, OPT_REGION},
    {"max-peak", required_argument, NULL, OPT_MAX_PEAK},
    {"max-growth", required_argument, NULL, OPT_MAX_GROWTH},
    {"no-leaks", no_argument, NULL, OPT_NO_LEAKS},
    {"detectors", required_argument, NULL, OPT_DETECTORS},
    {"junit", required_argument, NULL, OPT_JUNIT},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"rules", required_argument, NULL, OPT_RULES},
    {"baseline", required_argument, NULL, OPT_BASELINE},
    {"baseline-slack", required_argument, NULL, OPT_BASELINE_SLACK},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* ---- results --------------------------------------------------------------------------------- */

/* One violation. Items are the op/module/site rows behind it, largest first. */
typedef struct violation {
    const char *rule;   /* "forbid", "max-peak", "max-growth", "no-leaks" or a finding kind */
    const char *region; /* "" for the whole run */
    char category[64];  /* "" when none applies */
    uint64_t bytes;
    uint64_t limit; /* max-peak, max-growth */
    bool has_limit;
    char message[512];
    gp_finding_item *items; /* owned */
    size_t n_items, cap_items;
    size_t more_items; /* rows left out beyond MAX_KEEP */
} violation;

/* One rule evaluated: a JUnit testcase. Its violations are violations[first .. first+n). */
typedef struct rule {
    char name[128];
    char skipped[256]; /* non-empty: not evaluated, and why */
    size_t first, n;
} rule;

typedef struct results {
    rule *rules;
    size_t n_rules, cap_rules;
    violation *violations;
    size_t n_violations, cap_violations;
    bool oom;
} results;


static rule *rule_begin(results *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static rule *rule_begin(results *r, const char *fmt, ...)
{
    rule *ru = gp__push((void **)&r->rules, &r->n_rules, &r->cap_rules, sizeof *ru);
    if (!ru) {
        r->oom = true;
        return NULL;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ru->name, sizeof ru->name, fmt, ap);
    va_end(ap);
    ru->first = r->n_violations;
    return ru;
}

/* A new violation of the last rule begun. */
static violation *violation_add(results *r, const char *rule_id, const char *region)
{
    violation *v = gp__push((void **)&r->violations, &r->n_violations, &r->cap_violations, sizeof *v);
    if (!v) {
        r->oom = true;
        return NULL;
    }
    v->rule = rule_id;
    v->region = region ? region : "";
    r->rules[r->n_rules - 1].n++;
    return v;
}

static gp_finding_item *item_add(results *r, violation *v)
{
    gp_finding_item *it = gp__push((void **)&v->items, &v->n_items, &v->cap_items, sizeof *it);
    if (!it)
        r->oom = true;
    return it;
}

static void results_free(results *r)
{
    for (size_t i = 0; i < r->n_violations; i++)
        free(r->violations[i].items);
    free(r->violations);
    free(r->rules);
}

/* ---- evaluating ------------------------------------------------------------------------------ */

typedef struct check_rules {
    bool forbid[LP_CAT_COUNT];
    const char *regions[MAX_REGIONS];
    size_t n_regions;
    bool has_max_peak, has_max_growth, no_leaks;
    uint64_t max_peak, max_growth;
    bool detectors[GP_FIND_KIND_COUNT];
} check_rules;

static const char *bytes_text(uint64_t bytes, char *buf, size_t size)
{
    char h[32];
    if (bytes < 1024)
        snprintf(buf, size, "%s", gp_format_bytes(bytes, h, sizeof h));
    else
        snprintf(buf, size, "%s (%" PRIu64 " bytes)", gp_format_bytes(bytes, h, sizeof h), bytes);
    return buf;
}

static bool same(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

/* The call site of a tag key's buffers, for its frames (0 if none is known). Exact when a
 * detector itemised the key (its items carry a stack); otherwise the site that best matches:
 * same op and module, then same op (one function serves many modules, and a site keeps only the
 * last tag its buffers carried), then the most bytes of the category. */
static uint32_t site_of(const gp_profile *p, lp_category c, const char *op, const char *module)
{
    for (size_t i = 0; i < p->n_findings; i++)
        for (size_t j = 0; j < p->findings[i].n_items; j++) {
            const gp_finding_item *it = &p->findings[i].items[j];
            if (it->stack && it->category == c && same(it->op, op) && same(it->module, module))
                return it->stack;
        }
    const gp_site *best = NULL;
    int best_tier = -1;
    for (size_t i = 0; i < p->n_sites; i++) {
        const gp_site *s = &p->sites[i];
        bool op_match = *op && same(s->op, op);
        if (!s->stack || (!op_match && !s->by_category[c]))
            continue;
        int tier = op_match ? (same(s->module, module) ? 2 : 1) : 0;
        if (tier > best_tier || (tier == best_tier && s->by_category[c] > best->by_category[c]) ||
            (tier == best_tier && s->by_category[c] == best->by_category[c] &&
             s->stats.total_bytes > best->stats.total_bytes)) {
            best = s;
            best_tier = tier;
        }
    }
    return best ? best->stack : 0;
}

static int compare_items(const void *pa, const void *pb)
{
    const gp_finding_item *a = pa, *b = pb;
    int c = a->bytes != b->bytes ? (a->bytes > b->bytes ? -1 : 1) : 0;
    if (!c)
        c = strcmp(lp_category_name(a->category), lp_category_name(b->category));
    if (!c)
        c = strcmp(a->op ? a->op : "", b->op ? b->op : "");
    if (!c)
        c = strcmp(a->module ? a->module : "", b->module ? b->module : "");
    if (!c)
        c = a->stack != b->stack ? (a->stack < b->stack ? -1 : 1) : 0;
    return c;
}

/*
 * The rows behind a violation, by a measure (bytes allocated, live at the peak, live at the end),
 * largest first, at most MAX_KEEP (the rest counted in v->more_items): one per tag key (category
 * `cat`, or any when cat < 0; the primary device only for the peak) with the stack of its site,
 * except that untagged memory (op and module "") is shown by call site, since raw allocations
 * differ only by where they were made.
 */
static void key_items(gp_profile *p, results *r, violation *v, int cat, gp__measure m)
{
    bool primary_only = m == GP__MEASURE_PEAK, untagged = false;
    for (size_t i = 0; i < p->n_tag_keys; i++) {
        const gp_tag_key *k = &p->tag_keys[i];
        uint64_t bytes = gp__stats_measure(&k->stats, m);
        if (!bytes || (cat >= 0 && k->category != (lp_category)cat) ||
            (primary_only && k->device != p->primary_device))
            continue;
        if (!*k->op && !*k->module) {
            untagged = true;
            continue;
        }
        gp_finding_item *it = item_add(r, v);
        if (!it)
            return;
        *it = (gp_finding_item){
            .category = k->category,
            .op = k->op,
            .module = k->module,
            .stack = 0, /* found below, for the rows kept */
            .bytes = bytes,
            .count = m == GP__MEASURE_LEAKED ? k->stats.live_count : k->stats.count,
        };
    }
    for (size_t i = 0; untagged && i < p->n_sites; i++) {
        const gp_site *s = &p->sites[i];
        if (*s->op || *s->module || (primary_only && s->device != p->primary_device))
            continue;
        uint64_t bytes = m == GP__MEASURE_TOTAL ? (cat >= 0 ? s->by_category[cat] : 0)
                                                : gp__stats_measure(&s->stats, m);
        if (!bytes)
            continue;
        gp_finding_item *it = item_add(r, v);
        if (!it)
            return;
        *it = (gp_finding_item){
            .category = cat >= 0 ? (lp_category)cat : s->category,
            .op = "",
            .module = "",
            .stack = s->stack,
            .bytes = bytes,
            .count = m == GP__MEASURE_LEAKED ? s->stats.live_count : s->stats.count,
        };
    }
    qsort(v->items, v->n_items, sizeof *v->items, compare_items);
    if (v->n_items > MAX_KEEP) {
        v->more_items = v->n_items - MAX_KEEP;
        v->n_items = MAX_KEEP;
    }
    for (size_t i = 0; i < v->n_items; i++) {
        gp_finding_item *it = &v->items[i];
        if (*it->op || *it->module)
            it->stack = site_of(p, it->category, it->op, it->module);
    }
}

/* forbid CAT over the whole run: the tag keys of the category, by bytes allocated. */
static void check_forbid(gp_profile *p, const check_rules *o, results *r)
{
    for (int c = 0; c < LP_CAT_COUNT; c++) {
        if (!o->forbid[c])
            continue;
        const char *cat = lp_category_name((lp_category)c);
        if (!rule_begin(r, "forbid %s", cat))
            break;
        uint64_t bytes = 0, count = 0;
        for (size_t i = 0; i < p->n_tag_keys; i++) {
            const gp_tag_key *k = &p->tag_keys[i];
            if (k->category == (lp_category)c) {
                bytes += k->stats.total_bytes;
                count += k->stats.count;
            }
        }
        if (bytes == 0)
            continue;
        violation *v = violation_add(r, "forbid", "");
        if (!v)
            break;
        snprintf(v->category, sizeof v->category, "%s", cat);
        v->bytes = bytes;
        char b[64];
        snprintf(v->message, sizeof v->message,
                 "%s of %s memory allocated in %" PRIu64 " buffers; %s is forbidden",
                 bytes_text(bytes, b, sizeof b), cat, count, cat);
        key_items(p, r, v, c, GP__MEASURE_TOTAL);
    }
}

static const gp_region_stats *find_region(const gp_profile *p, const char *name)
{
    for (size_t i = 0; i < p->n_regions; i++)
        if (same(p->regions[i].name, name))
            return &p->regions[i];
    return NULL;
}

/* forbid inside a region: the analysis counts graph memory (saved + gradient + autograd) per
 * region; the items are those of the inference detectors that fired in the region. */
static void check_forbid_region(gp_profile *p, const gp_region_stats *reg, results *r)
{
    if (!rule_begin(r, "forbid saved,gradient,autograd in %s", reg->name) || !reg->graph_bytes)
        return;
    violation *v = violation_add(r, "forbid", reg->name);
    if (!v)
        return;
    snprintf(v->category, sizeof v->category, "saved,gradient,autograd");
    v->bytes = reg->graph_bytes;
    char b[64];
    snprintf(v->message, sizeof v->message,
             "%s of graph memory (saved, gradient, autograd) allocated inside region '%s'",
             bytes_text(reg->graph_bytes, b, sizeof b), reg->name);
    for (size_t i = 0; i < p->n_findings; i++) {
        const gp_finding *f = &p->findings[i];
        if (f->kind == GP_FIND_GROWTH || f->kind == GP_FIND_GRAPH_ESCAPES ||
            !same(f->region, reg->name))
            continue;
        for (size_t j = 0; j < f->n_items; j++) {
            gp_finding_item *it = item_add(r, v);
            if (!it)
                return;
            *it = f->items[j];
        }
    }
    qsort(v->items, v->n_items, sizeof *v->items, compare_items); /* across findings */
}

static void check_max_peak(gp_profile *p, const check_rules *o, results *r)
{
    char b[64], l[64], t[32];
    if (o->n_regions == 0) {
        if (!rule_begin(r, "max-peak") || p->peak_bytes <= o->max_peak)
            return;
        violation *v = violation_add(r, "max-peak", "");
        if (!v)
            return;
        v->bytes = p->peak_bytes;
        v->limit = o->max_peak;
        v->has_limit = true;
        snprintf(v->message, sizeof v->message, "peak %s at %s exceeds --max-peak %s",
                 bytes_text(p->peak_bytes, b, sizeof b),
                 gp__format_ns(p->peak_time_ns, t, sizeof t), bytes_text(o->max_peak, l, sizeof l));
        key_items(p, r, v, -1, GP__MEASURE_PEAK);
        return;
    }
    for (size_t i = 0; i < o->n_regions; i++) {
        const gp_region_stats *reg = find_region(p, o->regions[i]);
        if (!rule_begin(r, "max-peak in %s", reg->name) || reg->max_live_bytes <= o->max_peak)
            continue;
        violation *v = violation_add(r, "max-peak", reg->name);
        if (!v)
            return;
        v->bytes = reg->max_live_bytes;
        v->limit = o->max_peak;
        v->has_limit = true;
        snprintf(v->message, sizeof v->message,
                 "%s live while inside region '%s' exceeds --max-peak %s",
                 bytes_text(reg->max_live_bytes, b, sizeof b), reg->name,
                 bytes_text(o->max_peak, l, sizeof l));
    }
}

static const gp_finding *find_finding(const gp_profile *p, gp_finding_kind kind)
{
    for (size_t i = 0; i < p->n_findings; i++)
        if (p->findings[i].kind == kind)
            return &p->findings[i];
    return NULL;
}

static void check_max_growth(gp_profile *p, const check_rules *o, results *r)
{
    rule *ru = rule_begin(r, "max-growth");
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
    violation *v = violation_add(r, "max-growth", "");
    if (!v)
        return;
    v->bytes = last->live_bytes - first->live_bytes;
    v->limit = o->max_growth;
    v->has_limit = true;
    char b[64], l[64];
    snprintf(v->message, sizeof v->message,
             "live memory grew by %s from mark '%s' to mark '%s' (%zu marks), over --max-growth %s",
             bytes_text(v->bytes, b, sizeof b), first->mark, last->mark, p->n_iterations,
             bytes_text(o->max_growth, l, sizeof l));
    /* The growth detector ran with --max-growth as its threshold: its items are the sites whose
     * live bytes grew (absent when the growth was not steady). */
    const gp_finding *f = find_finding(p, GP_FIND_GROWTH);
    for (size_t i = 0; f && i < f->n_items; i++) {
        gp_finding_item *it = item_add(r, v);
        if (!it)
            return;
        *it = f->items[i];
    }
}

static void check_leaks(gp_profile *p, results *r)
{
    if (!rule_begin(r, "no-leaks") || p->leaked_bytes == 0)
        return;
    violation *v = violation_add(r, "no-leaks", "");
    if (!v)
        return;
    v->bytes = p->leaked_bytes;
    char b[64];
    snprintf(v->message, sizeof v->message,
             "%s in %" PRIu64 " buffers still live at the end of the trace",
             bytes_text(p->leaked_bytes, b, sizeof b), p->leaked_count);
    key_items(p, r, v, -1, GP__MEASURE_LEAKED);
}

/* A finding's message when the analysis gives none: what it means, with its bytes and region. */
static void finding_message(const gp_finding *f, char *buf, size_t size)
{
    char b[64];
    const char *bytes = bytes_text(f->bytes, b, sizeof b);
    const char *region = f->region && *f->region ? f->region : "?";
    switch (f->kind) {
    case GP_FIND_GRAPH_WITHOUT_GRAD:
        snprintf(buf, size,
                 "%s of graph memory in %" PRIu64 " buffers allocated where grad is off (%s)",
                 bytes, f->count, region);
        return;
    case GP_FIND_FORGOT_NO_GRAD:
        snprintf(buf, size,
                 "grad was on inside inference region '%s' (forgot no_grad?): these ops built a "
                 "graph of %s in %" PRIu64 " buffers",
                 region, bytes, f->count);
        return;
    case GP_FIND_GROWTH:
        snprintf(buf, size,
                 "live memory grew by %s across marked iterations (a graph kept alive, as by "
                 "total += loss?)",
                 bytes);
        return;
    case GP_FIND_PARAM_GRAD_IN_INFERENCE:
        snprintf(buf, size,
                 "%s of gradients in %" PRIu64 " buffers allocated inside inference "
                 "region '%s'",
                 bytes, f->count, region);
        return;
    case GP_FIND_GRAPH_ESCAPES:
    case GP_FIND_KIND_COUNT:
        break;
    }
    snprintf(buf, size,
             "outputs left inference region '%s' still attached to a graph of %s in %" PRIu64
             " buffers",
             region, bytes, f->count);
}

static void check_detectors(gp_profile *p, const check_rules *o, results *r)
{
    for (int k = 0; k < GP_FIND_KIND_COUNT; k++) {
        /* With --max-growth, the growth detector is that rule (it ran with its threshold). */
        if (!o->detectors[k] || (k == GP_FIND_GROWTH && o->has_max_growth))
            continue;
        const char *kind = gp_finding_kind_name((gp_finding_kind)k);
        if (!rule_begin(r, "detector %s", kind))
            return;
        for (size_t i = 0; i < p->n_findings; i++) {
            const gp_finding *f = &p->findings[i];
            if (f->kind != (gp_finding_kind)k)
                continue;
            violation *v = violation_add(r, kind, f->region);
            if (!v)
                return;
            v->bytes = f->bytes;
            finding_message(f, v->message, sizeof v->message);
            for (size_t j = 0; j < f->n_items; j++) {
                gp_finding_item *it = item_add(r, v);
                if (!it)
                    return;
                *it = f->items[j];
            }
        }
    }
}

/* The category of the largest item, for violations whose rule is not about one category. */
static void default_categories(results *r)
{
    for (size_t i = 0; i < r->n_violations; i++) {
        violation *v = &r->violations[i];
        if (!v->category[0] && v->n_items)
            snprintf(v->category, sizeof v->category, "%s", lp_category_name(v->items[0].category));
    }
}

/* --baseline: the graph memory A holds that B does not, by the aligned diff (diff.h). Items: the
 * ops with saved-for-backward (inferred) or held graph bytes, largest first. */
static uint64_t row_graph(const gp_diff_row *r)
{
    return r->saved_inferred_bytes > r->held_bytes ? r->saved_inferred_bytes : r->held_bytes;
}

static int cmp_row_graph(const void *x, const void *y)
{
    uint64_t a = row_graph(*(const gp_diff_row *const *)x);
    uint64_t b = row_graph(*(const gp_diff_row *const *)y);
    return a > b ? -1 : a < b;
}

static void check_baseline(const gp_diff *d, uint64_t slack, results *r)
{
    if (!rule_begin(r, "baseline %s", d->b.path))
        return;
    uint64_t nodes = d->by_category[LP_CAT_AUTOGRAD].held_bytes +
                     d->by_category[LP_CAT_GRADIENT].held_bytes;
    uint64_t graph = d->saved_inferred_bytes + nodes;
    if (graph <= slack)
        return;
    violation *v = violation_add(r, "baseline", "");
    if (!v)
        return;
    v->bytes = graph;
    v->limit = slack;
    v->has_limit = true;
    snprintf(v->category, sizeof v->category, "saved");
    const gp_diff_row **rows = malloc((d->n_ops ? d->n_ops : 1) * sizeof *rows);
    if (!rows) {
        r->oom = true;
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < d->n_ops; i++)
        if (d->ops[i].saved_inferred_bytes || d->ops[i].held_bytes)
            rows[n++] = &d->ops[i];
    qsort(rows, n, sizeof *rows, cmp_row_graph);
    char b[64], s[64], g[64], l[64];
    snprintf(v->message, sizeof v->message,
             "holds %s of graph memory that the grad-off baseline '%s' does not: %s saved for "
             "backward (inferred) in %zu ops, %s of graph nodes and gradients (slack %s)",
             bytes_text(graph, b, sizeof b), d->b.path,
             bytes_text(d->saved_inferred_bytes, s, sizeof s), n, bytes_text(nodes, g, sizeof g),
             bytes_text(slack, l, sizeof l));
    for (size_t i = 0; i < n && i < MAX_KEEP; i++) {
        gp_finding_item *it = item_add(r, v);
        if (!it)
            break;
        *it = (gp_finding_item){LP_CAT_SAVED, rows[i]->op, rows[i]->module, 0,
                                row_graph(rows[i]), 1};
    }
    if (n > MAX_KEEP)
        v->more_items = n - MAX_KEEP;
    free(rows);
}

static void evaluate(gp_profile *p, const check_rules *o, results *r)
{
    if (o->n_regions == 0)
        check_forbid(p, o, r);
    else
        for (size_t i = 0; i < o->n_regions; i++)
            if (o->forbid[LP_CAT_SAVED]) /* the forbid set is checked in main() */
                check_forbid_region(p, find_region(p, o->regions[i]), r);
    if (o->has_max_peak)
        check_max_peak(p, o, r);
    if (o->has_max_growth)
        check_max_growth(p, o, r);
    if (o->no_leaks)
        check_leaks(p, r);
    check_detectors(p, o, r);
    default_categories(r);
}

/* ---- output ---------------------------------------------------------------------------------- */

static size_t rules_failed(const results *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_rules; i++)
        n += r->rules[i].n > 0;
    return n;
}

static size_t rules_skipped(const results *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_rules; i++)
        n += r->rules[i].skipped[0] != '\0';
    return n;
}

static void print_frames(FILE *out, gp_profile *p, uint32_t stack, const char *indent)
{
    const char *frames[MAX_FRAMES];
    size_t n = stack ? gp_site_frames(p, stack, frames, MAX_FRAMES) : 0;
    if (n == 0)
        fprintf(out, "%s[no stack]\n", indent);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s%s\n", indent, frames[i]);
}

static const char *or_dash(const char *s)
{
    return s && *s ? s : "-";
}

static int print_text(FILE *out, gp_profile *p, const results *r)
{
    size_t failed = rules_failed(r), skipped = rules_skipped(r);
    if (r->n_violations == 0)
        fprintf(out, "PASS %s: %zu rules passed", p->path, r->n_rules - skipped);
    else
        fprintf(out, "FAIL %s: %zu violation%s; %zu of %zu rules failed", p->path, r->n_violations,
                r->n_violations == 1 ? "" : "s", failed, r->n_rules);
    if (skipped)
        fprintf(out, ", %zu skipped", skipped);
    fputc('\n', out);
    fprintf(out, "rules:");
    for (size_t i = 0; i < r->n_rules; i++)
        fprintf(out, "%s %s%s", i ? "," : "", r->rules[i].name,
                r->rules[i].skipped[0] ? " (skipped)"
                : r->rules[i].n        ? " (FAILED)"
                                       : "");
    fprintf(out, "%s\n", r->n_rules ? "" : " none");
    for (size_t i = 0; i < r->n_rules; i++)
        if (r->rules[i].skipped[0])
            fprintf(out, "skipped %s: %s\n", r->rules[i].name, r->rules[i].skipped);

    static const char *const headers[] = {"bytes", "", "count", "category", "op", "module"};
    uint32_t printed[64]; /* stacks already printed in full */
    size_t n_printed = 0;
    for (size_t i = 0; i < r->n_violations; i++) {
        const violation *v = &r->violations[i];
        fprintf(out, "\n[%s] %s\n", v->rule, v->message);
        if (!v->n_items)
            continue;
        gp__table *t = gp__table_new(6, headers, "rrrlll");
        if (!t)
            return -1;
        char h[32], cnt[32];
        for (size_t j = 0; j < v->n_items && j < MAX_ITEMS; j++) {
            const gp_finding_item *it = &v->items[j];
            gp__table_cell(t, "%s", gp_format_bytes(it->bytes, h, sizeof h));
            gp__table_cell(t, "(%" PRIu64 ")", it->bytes);
            gp__table_cell(t, "%s", gp__format_count(it->count, cnt, sizeof cnt));
            gp__table_cell(t, "%s", lp_category_name(it->category));
            gp__table_cell(t, "%s", or_dash(it->op));
            gp__table_cell(t, "%s", or_dash(it->module));
        }
        if (v->n_items + v->more_items > MAX_ITEMS)
            gp__table_note(t, "(%zu more)", v->n_items + v->more_items - MAX_ITEMS);
        int rc = gp__table_print(out, t, "    ");
        gp__table_free(t);
        if (rc)
            return -1;
        for (size_t j = 0, shown = 0; j < v->n_items && shown < FRAME_ITEMS; j++) {
            const gp_finding_item *it = &v->items[j];
            if (!it->stack)
                continue;
            shown++;
            if (*it->op || *it->module)
                fprintf(out, "  %s %s in %s, allocated at", lp_category_name(it->category),
                        or_dash(it->op), or_dash(it->module));
            else
                fprintf(out, "  %s (untagged), allocated at", lp_category_name(it->category));
            size_t k = 0;
            while (k < n_printed && printed[k] != it->stack)
                k++;
            if (k < n_printed) { /* shown in full once per output */
                fprintf(out, " %s (stack above)\n", gp_site_label(p, it->stack));
                continue;
            }
            if (n_printed < sizeof printed / sizeof printed[0])
                printed[n_printed++] = it->stack;
            fputs(":\n", out);
            print_frames(out, p, it->stack, "      ");
        }
    }
    return ferror(out) ? -1 : 0;
}

static void json_frames(FILE *out, gp_profile *p, uint32_t stack)
{
    const char *frames[MAX_FRAMES];
    size_t n = stack ? gp_site_frames(p, stack, frames, MAX_FRAMES) : 0;
    fputc('[', out);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ", " : "", out);
        gp__json_string(out, frames[i]);
    }
    fputc(']', out);
}

static int print_json(FILE *out, gp_profile *p, const results *r)
{
    fprintf(out, "{\n  \"schema\": \"gradprof-check/1\",\n  \"trace\": ");
    gp__json_string(out, p->path);
    fprintf(out, ",\n  \"passed\": %s,\n  \"rules\": [", r->n_violations ? "false" : "true");
    for (size_t i = 0; i < r->n_rules; i++) {
        const rule *ru = &r->rules[i];
        fprintf(out, "%s\n    {\"name\": ", i ? "," : "");
        gp__json_string(out, ru->name);
        fprintf(out, ", \"passed\": %s, \"skipped\": ", ru->n ? "false" : "true");
        if (ru->skipped[0])
            gp__json_string(out, ru->skipped);
        else
            fputs("null", out);
        fprintf(out, ", \"violations\": %zu}", ru->n);
    }
    fprintf(out, "%s],\n  \"violations\": [", r->n_rules ? "\n  " : "");
    for (size_t i = 0; i < r->n_violations; i++) {
        const violation *v = &r->violations[i];
        const gp_finding_item *top = v->n_items ? &v->items[0] : NULL;
        fprintf(out, "%s\n    {\"rule\": ", i ? "," : "");
        gp__json_string(out, v->rule);
        fputs(", \"region\": ", out);
        gp__json_string(out, v->region);
        fputs(", \"category\": ", out);
        if (v->category[0])
            gp__json_string(out, v->category);
        else
            fputs("null", out);
        fprintf(out, ", \"bytes\": %" PRIu64 ", \"limit\": ", v->bytes);
        if (v->has_limit)
            fprintf(out, "%" PRIu64, v->limit);
        else
            fputs("null", out);
        fputs(",\n     \"op\": ", out);
        gp__json_string(out, top ? top->op : "");
        fputs(", \"module\": ", out);
        gp__json_string(out, top ? top->module : "");
        fputs(", \"message\": ", out);
        gp__json_string(out, v->message);
        fputs(",\n     \"frames\": ", out);
        json_frames(out, p, top ? top->stack : 0);
        fputs(",\n     \"items\": [", out);
        for (size_t j = 0; j < v->n_items; j++) {
            const gp_finding_item *it = &v->items[j];
            fprintf(out, "%s\n       {\"category\": \"%s\", \"op\": ", j ? "," : "",
                    lp_category_name(it->category));
            gp__json_string(out, it->op);
            fputs(", \"module\": ", out);
            gp__json_string(out, it->module);
            fprintf(out,
                    ", \"bytes\": %" PRIu64 ", \"count\": %" PRIu64 ", \"frames\": ", it->bytes,
                    it->count);
            json_frames(out, p, it->stack);
            fputc('}', out);
        }
        fprintf(out, "%s], \"more_items\": %zu}", v->n_items ? "\n     " : "", v->more_items);
    }
    fprintf(out, "%s]\n}\n", r->n_violations ? "\n  " : "");
    return ferror(out) ? -1 : 0;
}

/* ---- JUnit XML ------------------------------------------------------------------------------- */

/* Writes s escaped for XML: the five entities; tab, newline and CR as character references in an
 * attribute (where a parser would turn them into spaces) and as they are in text; U+FFFD for what
 * XML 1.0 cannot hold (other control characters, bytes that are not UTF-8). NULL writes nothing. */
static void xml_write(FILE *out, const char *s, bool attr)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        unsigned cp;
        size_t n = gp__utf8_decode(p, &cp);
        if (n == 0 || cp == 0xfffe || cp == 0xffff || /* not XML characters */
            (n == 1 && *p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r')) {
            fputs("\xef\xbf\xbd", out);
            p++;
            continue;
        }
        if (n > 1) {
            fwrite(p, 1, n, out);
            p += n;
            continue;
        }
        switch (*p) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        case '\'':
            fputs("&apos;", out);
            break;
        case '\t':
        case '\n':
        case '\r':
            if (attr)
                fprintf(out, "&#%u;", *p);
            else
                fputc(*p, out);
            break;
        default:
            fputc(*p, out);
        }
        p++;
    }
}

static void xml_attr(FILE *out, const char *s)
{
    xml_write(out, s, true);
}
static void xml_text(FILE *out, const char *s)
{
    xml_write(out, s, false);
}

/* The failure text of a violation: its message, its items and the top frames, as in text. */
static void junit_details(FILE *out, gp_profile *p, const violation *v)
{
    char line[1024], h[32];
    xml_text(out, v->message);
    fputs("\n", out);
    for (size_t j = 0; j < v->n_items && j < MAX_ITEMS; j++) {
        const gp_finding_item *it = &v->items[j];
        snprintf(line, sizeof line, "  %s (%" PRIu64 " bytes) x%" PRIu64 "  %s  op %s  module %s\n",
                 gp_format_bytes(it->bytes, h, sizeof h), it->bytes, it->count,
                 lp_category_name(it->category), or_dash(it->op), or_dash(it->module));
        xml_text(out, line);
        if (j < FRAME_ITEMS && it->stack) {
            const char *frames[MAX_FRAMES];
            size_t n = gp_site_frames(p, it->stack, frames, MAX_FRAMES);
            for (size_t k = 0; k < n; k++) {
                fputs("      ", out);
                xml_text(out, frames[k]);
                fputs("\n", out);
            }
        }
    }
}

static int write_junit(const char *path, gp_profile *p, const results *r)
{
    FILE *out = fopen(path, "w");
    if (!out)
        return gp_cli_error(CMD, "--junit: cannot write '%s': %s", path, strerror(errno));
    size_t failed = rules_failed(r), skipped = rules_skipped(r);
    fprintf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(out,
            "<testsuites name=\"gradprof\" tests=\"%zu\" failures=\"%zu\" errors=\"0\" "
            "skipped=\"%zu\">\n",
            r->n_rules, failed, skipped);
    fprintf(out,
            "  <testsuite name=\"gradprof-check\" tests=\"%zu\" failures=\"%zu\" "
            "errors=\"0\" skipped=\"%zu\">\n",
            r->n_rules, failed, skipped);
    fputs("    <properties>\n      <property name=\"trace\" value=\"", out);
    xml_attr(out, p->path);
    fputs("\"/>\n    </properties>\n", out);
    for (size_t i = 0; i < r->n_rules; i++) {
        const rule *ru = &r->rules[i];
        fputs("    <testcase classname=\"gradprof-check\" name=\"", out);
        xml_attr(out, ru->name);
        fputs("\"", out);
        if (ru->skipped[0]) {
            fputs(">\n      <skipped message=\"", out);
            xml_attr(out, ru->skipped);
            fputs("\"/>\n    </testcase>\n", out);
            continue;
        }
        if (!ru->n) {
            fputs("/>\n", out);
            continue;
        }
        fputs(">\n", out);
        for (size_t j = ru->first; j < ru->first + ru->n; j++) {
            const violation *v = &r->violations[j];
            fputs("      <failure type=\"", out);
            xml_attr(out, v->rule);
            fputs("\" message=\"", out);
            xml_attr(out, v->message);
            fputs("\">", out);
            junit_details(out, p, v);
            fputs("</failure>\n", out);
        }
        fputs("    </testcase>\n", out);
    }
    fputs("  </testsuite>\n</testsuites>\n", out);
    bool bad = ferror(out) != 0;
    if (fclose(out) != 0 || bad)
        return gp_cli_error(CMD, "--junit: error writing '%s': %s", path, strerror(errno));
    return 0;
}

/* ---- the command ----------------------------------------------------------------------------- */

static int parse_detectors(const char *text, bool set[GP_FIND_KIND_COUNT])
{
    bool all = strcmp(text, "all") == 0, none = strcmp(text, "none") == 0 || !*text;
    for (int k = 0; k < GP_FIND_KIND_COUNT; k++)
        set[k] = all;
    if (all || none)
        return 0;
    for (const char *s = text;;) {
        size_t n = strcspn(s, ",");
        int k = 0;
        while (k < GP_FIND_KIND_COUNT &&
               (strlen(gp_finding_kind_name((gp_finding_kind)k)) != n ||
                strncmp(gp_finding_kind_name((gp_finding_kind)k), s, n) != 0))
            k++;
        if (k == GP_FIND_KIND_COUNT) {
            char known[256];
            size_t used = 0;
            for (int j = 0; j < GP_FIND_KIND_COUNT && used < sizeof known; j++)
                used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", j ? ", " : "",
                                         gp_finding_kind_name((gp_finding_kind)j));
            return gp_cli_error(CMD,
                                "--detectors: unknown detector '%.*s' in '%s' (all, none, "
                                "or: %s)",
                                (int)n, s, text, known);
        }
        set[k] = true;
        if (!s[n])
            return 0;
        s += n + 1;
    }
}

int gp_cmd_check(int argc, char **argv)
{
    check_rules o = {
        .forbid = {[LP_CAT_SAVED] = true, [LP_CAT_GRADIENT] = true, [LP_CAT_AUTOGRAD] = true}};
    for (int k = 0; k < GP_FIND_KIND_COUNT; k++)
        o.detectors[k] = true;
    const char *junit = NULL, *file = NULL;
    bool json = false;
    const char *rules = NULL, *baseline = NULL;
    uint64_t baseline_slack = 64 * 1024;
    char err[512];
    int c, rc;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", long_options, NULL)) != -1) {
        switch (c) {
        case OPT_FORBID:
            if (gp_parse_categories(optarg, o.forbid, err, sizeof err) != 0)
                return gp_cli_error(CMD, "--forbid: %s", err);
            break;
        case OPT_REGION:
            if (!*optarg)
                return gp_cli_error(CMD, "--region: empty region name");
            if (o.n_regions == MAX_REGIONS)
                return gp_cli_error(CMD, "--region: at most %d regions", MAX_REGIONS);
            o.regions[o.n_regions++] = optarg;
            break;
        case OPT_MAX_PEAK:
            if (gp_parse_size(optarg, &o.max_peak, err, sizeof err) != 0)
                return gp_cli_error(CMD, "--max-peak: %s", err);
            o.has_max_peak = true;
            break;
        case OPT_MAX_GROWTH:
            if (gp_parse_size(optarg, &o.max_growth, err, sizeof err) != 0)
                return gp_cli_error(CMD, "--max-growth: %s", err);
            o.has_max_growth = true;
            break;
        case OPT_NO_LEAKS:
            o.no_leaks = true;
            break;
        case OPT_DETECTORS:
            if ((rc = parse_detectors(optarg, o.detectors)))
                return rc;
            break;
        case OPT_JUNIT:
            if (!*optarg)
                return gp_cli_error(CMD, "--junit: empty file name");
            junit = optarg;
            break;
        case OPT_FORMAT:
            if (strcmp(optarg, "text") != 0 && strcmp(optarg, "json") != 0)
                return gp_cli_error(CMD, "--format: unknown format '%s' (text or json)", optarg);
            json = strcmp(optarg, "json") == 0;
            break;
        case OPT_RULES:
            rules = optarg;
            break;
        case OPT_BASELINE:
            if (!*optarg)
                return gp_cli_error(CMD, "--baseline: empty file name");
            baseline = optarg;
            break;
        case OPT_BASELINE_SLACK:
            if (gp_parse_size(optarg, &baseline_slack, err, sizeof err) != 0)
                return gp_cli_error(CMD, "--baseline-slack: %s", err);
            break;
        case 'h':
            fputs(check_usage, stdout);
            return GP_EXIT_OK;
        default:
            return gp_cli_bad_option(CMD, c, argv);
        }
    }
    if (optind >= argc)
        return gp_cli_error(CMD, "no trace file (usage: gradprof check FILE [options]; see "
                                 "'gradprof check --help')");
    if (argc - optind > 1)
        return gp_cli_error(CMD, "one trace file expected, got '%s' and '%s'", argv[optind],
                            argv[optind + 1]);
    file = argv[optind];
    /* Per region the analysis counts graph memory as a whole, so inside a region only the graph
     * categories, all three, can be forbidden. */
    bool any_forbidden = false, graph_set = o.forbid[LP_CAT_SAVED] && o.forbid[LP_CAT_GRADIENT] &&
                                            o.forbid[LP_CAT_AUTOGRAD];
    for (int k = 0; k < LP_CAT_COUNT; k++)
        any_forbidden = any_forbidden || o.forbid[k];
    if (o.n_regions && any_forbidden &&
        (!graph_set || o.forbid[LP_CAT_PARAMETER] || o.forbid[LP_CAT_INPUT] ||
         o.forbid[LP_CAT_ACTIVATION] || o.forbid[LP_CAT_OPTIMIZER_STATE] ||
         o.forbid[LP_CAT_TEMPORARY] || o.forbid[LP_CAT_OTHER]))
        return gp_cli_error(CMD, "--region: inside a region only graph memory can be forbidden, "
                                 "as a whole: use --forbid saved,gradient,autograd (the default) "
                                 "or --forbid none");

    gp_analysis_options ao;
    gp_analysis_options_default(&ao);
    int rules_rc = gp_cli_rules(CMD, rules, &ao.rules);
    if (rules_rc)
        return rules_rc;
    if (o.n_regions) {
        ao.inference_regions = o.regions;
        ao.n_inference_regions = o.n_regions;
    }
    if (o.has_max_growth)
        ao.growth_threshold = o.max_growth;
    gp_profile *p = NULL, *pb = NULL;
    gp_diff *d = NULL;
    if (baseline) {
        if (gp_diff_load(file, baseline, &ao, &p, &pb, &d, err, sizeof err) != 0)
            return gp_cli_error(CMD, "%s", err);
        gp_cli_warn_trace(CMD, file, p->info);
        gp_cli_warn_trace(CMD, baseline, pb->info);
        if (d->diverged) {
            fprintf(stderr, "gradprof %s: '%s' is no baseline for '%s': %s\n", CMD, baseline,
                    file, d->diverged_why);
            gp_diff_free(d);
            gp_profile_free(pb);
            gp_profile_free(p);
            return GP_EXIT_USAGE;
        }
    } else if ((rc = gp_cli_load_profile(CMD, file, &ao, &p))) {
        return rc;
    }
    for (size_t i = 0; i < o.n_regions; i++) {
        if (find_region(p, o.regions[i]))
            continue;
        char known[512] = "none";
        size_t used = 0;
        for (size_t j = 0; j < p->n_regions && used < sizeof known; j++)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", j ? ", " : "",
                                     p->regions[j].name);
        gp_diff_free(d);
        gp_profile_free(pb);
        gp_profile_free(p);
        return gp_cli_error(CMD, "--region: no region '%s' in '%s' (regions: %s)", o.regions[i],
                            file, known);
    }

    results r = {0};
    evaluate(p, &o, &r);
    if (d)
        check_baseline(d, baseline_slack, &r);
    if (r.oom) {
        results_free(&r);
        gp_diff_free(d);
        gp_profile_free(pb);
        gp_profile_free(p);
        return gp_cli_error(CMD, "out of memory while checking '%s'", file);
    }
    rc = json ? print_json(stdout, p, &r) : print_text(stdout, p, &r);
    if (rc == 0 && fflush(stdout) != 0)
        rc = -1;
    if (rc != 0)
        rc = gp_cli_error(CMD, "error writing to standard output: %s", strerror(errno));
    else if (junit)
        rc = write_junit(junit, p, &r);
    if (rc == 0)
        rc = r.n_violations ? GP_EXIT_FAIL : GP_EXIT_OK;
    results_free(&r);
    gp_diff_free(d);
    gp_profile_free(pb);
    gp_profile_free(p);
    return rc;
}
