/*
 * gp_diff_compute: matches two profiles' live-at-peak tables by symbolic keys and builds the diff
 * tables of diff.h. Every table is built from its own source in the profiles (categories from the
 * primary device's by_category_at_peak, tag keys from tag_keys[], call sites from sites[], layers
 * from modules[]) and summed on its own, so a disagreement between the engine's tables shows up as
 * a remainder instead of being absorbed.
 *
 * Matching is by sorting: every (side, key, bytes) entry of both runs goes into one array, sorted
 * by key; runs of equal keys become one row. No addresses or stack ids take part in a key.
 */
#include "diff.h"

#include <stdlib.h>
#include <string.h>

/* One run's contribution to a row before matching. Strings are borrowed from the profiles. */
typedef struct entry {
    int category;        /* LP_CAT_COUNT when the table is not by category */
    const char *s1, *s2; /* the key: (op, module), (site key, ""), (module, "") */
    const char *label;   /* call sites: the label in this run */
    int side;            /* 0 = A, 1 = B */
    uint64_t bytes;
    uint64_t graph_bytes;
    /* Op and module entries are made from key rows: bytes = the row's a_bytes, and these: */
    uint64_t b_bytes;
    uint64_t held_bytes;
} entry;

typedef struct entries {
    entry *v;
    size_t n, cap;
} entries;

static int entries_push(entries *e, const entry *x)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        entry *v = realloc(e->v, cap * sizeof *v);
        if (!v)
            return -1;
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = *x;
    return 0;
}

static int entry_key_cmp(const void *pa, const void *pb)
{
    const entry *a = pa, *b = pb;
    if (a->category != b->category)
        return a->category < b->category ? -1 : 1;
    int c = strcmp(a->s1, b->s1);
    if (c)
        return c;
    c = strcmp(a->s2, b->s2);
    if (c)
        return c;
    return a->side - b->side; /* A's entries first, so a row's label prefers A's */
}

static bool same_key(const entry *a, const entry *b)
{
    return a->category == b->category && strcmp(a->s1, b->s1) == 0 && strcmp(a->s2, b->s2) == 0;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s ? s : "") + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s ? s : "", n);
    return d;
}

/* "op @ module" or "op @ module (category)"; "(no op)" / "(no module)" for empty names. */
static char *dup_label(const char *op, const char *module, const char *category)
{
    op = *op ? op : "(no op)";
    module = *module ? module : "(no module)";
    size_t n = strlen(op) + strlen(module) + (category ? strlen(category) + 3 : 0) + 4;
    char *d = malloc(n);
    if (d) {
        if (category)
            snprintf(d, n, "%s @ %s (%s)", op, module, category);
        else
            snprintf(d, n, "%s @ %s", op, module);
    }
    return d;
}

static void row_free_strings(gp_diff_row *r)
{
    free((char *)r->label);
    free((char *)r->key);
    free((char *)r->op);
    free((char *)r->module);
}

static void rows_free(gp_diff_row *rows, size_t n)
{
    for (size_t i = 0; rows && i < n; i++)
        row_free_strings(&rows[i]);
    free(rows);
}

void gp_diff_free(gp_diff *d)
{
    if (!d)
        return;
    for (int c = 0; c < LP_CAT_COUNT; c++)
        row_free_strings(&d->by_category[c]);
    rows_free(d->keys, d->n_keys);
    rows_free(d->ops, d->n_ops);
    rows_free(d->modules, d->n_modules);
    rows_free(d->call_sites, d->n_call_sites);
    rows_free(d->layers, d->n_layers);
    free((char *)d->a.path);
    free((char *)d->b.path);
    free((char *)d->a.command);
    free((char *)d->b.command);
    free(d);
}

static uint64_t held_of(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

static int64_t delta_of(uint64_t a, uint64_t b)
{
    return (int64_t)(a - b); /* two's complement: exact for |a - b| < 2^63 */
}

/* Depth of a module path: the number of '.' separators ("" and "mlp" are 0, "mlp.0" is 1). */
static int path_depth(const char *m)
{
    int d = 0;
    for (; *m; m++)
        d += *m == '.';
    return d;
}

/* Tree order of module paths: segment by segment, numeric segments as numbers, a parent before
 * its children; "" (no module) last. */
static int path_cmp(const char *a, const char *b)
{
    if (!*a || !*b)
        return (!*a) - (!*b);
    while (*a && *b) {
        size_t la = strcspn(a, "."), lb = strcspn(b, ".");
        bool na = la > 0 && strspn(a, "0123456789") == la;
        bool nb = lb > 0 && strspn(b, "0123456789") == lb;
        int c = 0;
        if (na && nb) {
            unsigned long long xa = strtoull(a, NULL, 10), xb = strtoull(b, NULL, 10);
            c = xa < xb ? -1 : xa > xb;
        } else if (na != nb) {
            c = na ? -1 : 1; /* numbered children before named ones */
        } else {
            size_t l = la < lb ? la : lb;
            c = memcmp(a, b, l);
            if (!c)
                c = la < lb ? -1 : la > lb;
        }
        if (c)
            return c;
        a += la;
        b += lb;
        if (*a == '.' && *b == '.') {
            a++;
            b++;
        } else {
            break;
        }
    }
    return (*a != 0) - (*b != 0); /* the shorter (the parent) first */
}

static int row_by_delta(const void *pa, const void *pb)
{
    const gp_diff_row *a = pa, *b = pb;
    if (a->delta != b->delta)
        return a->delta > b->delta ? -1 : 1;
    if (a->a_bytes != b->a_bytes)
        return a->a_bytes > b->a_bytes ? -1 : 1;
    if (a->category != b->category)
        return a->category < b->category ? -1 : 1;
    int c = strcmp(a->module, b->module);
    if (c)
        return c;
    c = strcmp(a->op, b->op);
    return c ? c : strcmp(a->key, b->key);
}

static int row_by_held(const void *pa, const void *pb)
{
    const gp_diff_row *a = pa, *b = pb;
    if (a->held_bytes != b->held_bytes)
        return a->held_bytes > b->held_bytes ? -1 : 1;
    return row_by_delta(pa, pb);
}

static int row_by_path(const void *pa, const void *pb)
{
    const gp_diff_row *a = pa, *b = pb;
    return path_cmp(a->module, b->module);
}

/* The table kinds build_rows knows how to label. */
typedef enum table_kind { T_KEYS, T_OPS, T_MODULES, T_SITES, T_LAYERS } table_kind;

/* Sorts `e` by key and merges each run of equal keys into one row of *out. Rows with nothing live
 * at either peak are dropped (they add nothing to any sum). Entries made from key rows (T_OPS,
 * T_MODULES) carry a_bytes in `bytes` and b in `b_bytes`, and their held is summed; otherwise
 * held is max(0, a - b) of the merged row. Returns 0 or -1 (out of memory). */
static int build_rows(entries *e, table_kind kind, gp_diff_row **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (e->n == 0)
        return 0;
    qsort(e->v, e->n, sizeof *e->v, entry_key_cmp);
    gp_diff_row *rows = calloc(e->n, sizeof *rows);
    if (!rows)
        return -1;
    size_t n = 0;
    for (size_t i = 0; i < e->n;) {
        size_t j = i;
        uint64_t a = 0, b = 0, held = 0, ga = 0, gb = 0;
        const char *label = NULL;
        for (; j < e->n && same_key(&e->v[i], &e->v[j]); j++) {
            const entry *x = &e->v[j];
            if (kind == T_OPS || kind == T_MODULES) {
                a += x->bytes;
                b += x->b_bytes;
                held += x->held_bytes;
            } else if (x->side == 0) {
                a += x->bytes;
                ga += x->graph_bytes;
            } else {
                b += x->bytes;
                gb += x->graph_bytes;
            }
            if (!label && x->label)
                label = x->label;
        }
        const entry *k = &e->v[i];
        i = j;
        if (a == 0 && b == 0 && ga == 0 && gb == 0)
            continue;
        gp_diff_row *r = &rows[n++];
        r->category = kind == T_KEYS ? (lp_category)k->category : LP_CAT_COUNT;
        r->a_bytes = a;
        r->b_bytes = b;
        r->delta = delta_of(a, b);
        r->held_bytes = (kind == T_OPS || kind == T_MODULES) ? held : held_of(a, b);
        r->a_graph_bytes = ga;
        r->b_graph_bytes = gb;
        const char *none = "(no module)";
        switch (kind) {
        case T_KEYS:
            r->op = dup_str(k->s1);
            r->module = dup_str(k->s2);
            r->key = dup_str("");
            r->label = dup_label(k->s1, k->s2, lp_category_name(r->category));
            break;
        case T_OPS:
            r->op = dup_str(k->s1);
            r->module = dup_str(k->s2);
            r->key = dup_str("");
            r->label = dup_label(k->s1, k->s2, NULL);
            break;
        case T_MODULES:
        case T_LAYERS:
            r->op = dup_str("");
            r->module = dup_str(k->s1);
            r->key = dup_str("");
            r->label = dup_str(*k->s1 ? k->s1 : none);
            r->depth = path_depth(k->s1);
            break;
        case T_SITES:
            r->op = dup_str("");
            r->module = dup_str("");
            r->key = dup_str(k->s1);
            r->label = dup_str(label ? label : k->s1);
            break;
        }
        if (!r->op || !r->module || !r->key || !r->label) {
            rows_free(rows, n);
            return -1;
        }
    }
    *out = rows;
    *n_out = n;
    return 0;
}

/* Number of leading ';'-separated frames two site keys share. */
static size_t common_frames(const char *a, const char *b)
{
    size_t n = 0;
    for (;;) {
        size_t la = strcspn(a, ";"), lb = strcspn(b, ";");
        if (la != lb || memcmp(a, b, la) != 0)
            return n;
        n++;
        if (!a[la] || !b[lb])
            return n;
        a += la + 1;
        b += lb + 1;
    }
}

static int by_label_then_key(const void *pa, const void *pb)
{
    const gp_diff_row *a = *(const gp_diff_row *const *)pa, *b = *(const gp_diff_row *const *)pb;
    int c = strcmp(a->label, b->label);
    return c ? c : strcmp(a->key, b->key);
}

/*
 * Call sites whose labels collide (the same function reached from different callers, or frames
 * that could not be symbolized) get the first frame where their keys part appended: "label via
 * frame". Keys sorted within a group: the longest prefix a key shares with any other is the one
 * it shares with a neighbour. Returns 0 or -1 (out of memory).
 */
static int disambiguate_sites(gp_diff_row *rows, size_t n)
{
    if (n < 2)
        return 0;
    const gp_diff_row **by = malloc(n * sizeof *by);
    size_t *ix = malloc(n * sizeof *ix);
    char **labels = calloc(n, sizeof *labels);
    if (!by || !ix || !labels) {
        free(by);
        free(ix);
        free(labels);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        by[i] = &rows[i];
    qsort(by, n, sizeof *by, by_label_then_key);
    for (size_t i = 0; i < n; i++)
        ix[i] = (size_t)(by[i] - rows);
    free(by);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const gp_diff_row *r = &rows[ix[i]];
        bool prev = i > 0 && strcmp(rows[ix[i - 1]].label, r->label) == 0;
        bool next = i + 1 < n && strcmp(rows[ix[i + 1]].label, r->label) == 0;
        if (!prev && !next)
            continue;
        size_t lcp = 0, c;
        if (prev && (c = common_frames(rows[ix[i - 1]].key, r->key)) > lcp)
            lcp = c;
        if (next && (c = common_frames(rows[ix[i + 1]].key, r->key)) > lcp)
            lcp = c;
        const char *f = r->key;
        for (size_t k = 0; k < lcp && f; k++) {
            f = strchr(f, ';');
            f = f ? f + 1 : NULL;
        }
        size_t flen = f ? strcspn(f, ";") : 0;
        size_t len = strlen(r->label) + flen + 16;
        if (!(labels[ix[i]] = malloc(len))) {
            rc = -1;
            break;
        }
        if (flen)
            snprintf(labels[ix[i]], len, "%s via %.*s", r->label, (int)flen, f);
        else
            snprintf(labels[ix[i]], len, "%s (outermost)", r->label);
    }
    for (size_t i = 0; i < n; i++) {
        if (labels[i] && rc == 0) {
            free((char *)rows[i].label);
            rows[i].label = labels[i];
        } else {
            free(labels[i]);
        }
    }
    free(ix);
    free(labels);
    return rc;
}

/* Adds a profile's tag keys on its primary device to `e` (the others peak at other instants). */
static int add_tag_keys(entries *e, const gp_profile *p, int side)
{
    for (size_t i = 0; i < p->n_tag_keys; i++) {
        const gp_tag_key *k = &p->tag_keys[i];
        if (k->device != p->primary_device || k->stats.peak_bytes == 0)
            continue;
        entry x = {.category = (int)k->category,
                   .s1 = k->op ? k->op : "",
                   .s2 = k->module ? k->module : "",
                   .side = side,
                   .bytes = k->stats.peak_bytes};
        if (entries_push(e, &x))
            return -1;
    }
    return 0;
}

static int add_sites(entries *e, gp_profile *p, int side)
{
    for (size_t i = 0; i < p->n_sites; i++) {
        const gp_site *s = &p->sites[i];
        if (s->device != p->primary_device || s->stats.peak_bytes == 0)
            continue;
        const char *key = gp_site_key(p, s->stack);
        const char *label = gp_site_label(p, s->stack);
        entry x = {.category = LP_CAT_COUNT,
                   .s1 = key ? key : "",
                   .s2 = "",
                   .label = label,
                   .side = side,
                   .bytes = s->stats.peak_bytes};
        if (entries_push(e, &x))
            return -1;
    }
    return 0;
}

static int add_modules(entries *e, const gp_profile *p, int side)
{
    for (size_t i = 0; i < p->n_modules; i++) {
        const gp_module_stats *m = &p->modules[i];
        if (m->device != p->primary_device)
            continue;
        uint64_t graph = m->by_category[LP_CAT_SAVED].peak_bytes +
                         m->by_category[LP_CAT_AUTOGRAD].peak_bytes +
                         m->by_category[LP_CAT_GRADIENT].peak_bytes;
        entry x = {.category = LP_CAT_COUNT,
                   .s1 = m->module ? m->module : "",
                   .s2 = "",
                   .side = side,
                   .bytes = m->stats.peak_bytes,
                   .graph_bytes = graph};
        if (entries_push(e, &x))
            return -1;
    }
    return 0;
}

/* Entries of the op (or module) table from the key rows: each carries its key row's numbers. */
static int add_from_keys(entries *e, const gp_diff *d, bool by_op)
{
    for (size_t i = 0; i < d->n_keys; i++) {
        const gp_diff_row *r = &d->keys[i];
        entry x = {.category = LP_CAT_COUNT,
                   .s1 = by_op ? r->op : r->module,
                   .s2 = by_op ? r->module : "",
                   .side = 0,
                   .bytes = r->a_bytes,
                   .b_bytes = r->b_bytes,
                   .held_bytes = r->held_bytes};
        if (entries_push(e, &x))
            return -1;
    }
    return 0;
}

static const gp_device_stats *primary(const gp_profile *p)
{
    for (size_t i = 0; i < p->n_devices; i++)
        if (p->devices[i].device == p->primary_device)
            return &p->devices[i];
    return NULL;
}

static int fill_run(gp_diff_run *r, gp_profile *p, const char *path)
{
    const char *cmd = p->trace ? gp_trace_meta(p->trace, "command") : NULL;
    r->profile = p;
    r->path = dup_str(path ? path : (p->path ? p->path : ""));
    r->command = dup_str(cmd ? cmd : "");
    r->device = p->primary_device;
    r->peak_bytes = p->peak_bytes;
    r->peak_time_ns = p->peak_time_ns;
    r->damaged = p->info && p->info->damaged;
    return r->path && r->command ? 0 : -1;
}

static int64_t sum_delta(const gp_diff_row *rows, size_t n)
{
    int64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += rows[i].delta;
    return s;
}

int gp_diff_compute(gp_profile *a, gp_profile *b, const char *a_path, const char *b_path,
                    gp_diff **out, char *err, size_t err_size)
{
    *out = NULL;
    gp_diff *d = calloc(1, sizeof *d);
    entries e = {0};
    if (!d)
        goto oom;
    if (fill_run(&d->a, a, a_path) || fill_run(&d->b, b, b_path))
        goto oom;
    d->peak_delta = delta_of(a->peak_bytes, b->peak_bytes);

    /* Categories: from each run's primary device. */
    const gp_device_stats *da = primary(a), *db = primary(b);
    int64_t cat_sum = 0;
    for (int c = 0; c < LP_CAT_COUNT; c++) {
        gp_diff_row *r = &d->by_category[c];
        r->category = (lp_category)c;
        r->a_bytes = da ? da->by_category_at_peak[c] : 0;
        r->b_bytes = db ? db->by_category_at_peak[c] : 0;
        r->delta = delta_of(r->a_bytes, r->b_bytes);
        cat_sum += r->delta;
        r->label = dup_str(lp_category_name((lp_category)c));
        r->key = dup_str("");
        r->op = dup_str("");
        r->module = dup_str("");
        if (!r->label || !r->key || !r->op || !r->module)
            goto oom;
    }
    d->remainder.categories = d->peak_delta - cat_sum;

    /* Tag keys: held by graph construction is defined on them. */
    if (add_tag_keys(&e, a, 0) || add_tag_keys(&e, b, 1) ||
        build_rows(&e, T_KEYS, &d->keys, &d->n_keys))
        goto oom;
    qsort(d->keys, d->n_keys, sizeof *d->keys, row_by_delta);
    int64_t key_sum_by_cat[LP_CAT_COUNT] = {0};
    for (size_t i = 0; i < d->n_keys; i++) {
        const gp_diff_row *r = &d->keys[i];
        d->held_bytes += r->held_bytes;
        d->b_more_bytes += held_of(r->b_bytes, r->a_bytes);
        d->by_category[r->category].held_bytes += r->held_bytes;
        key_sum_by_cat[r->category] += r->delta;
    }
    d->remainder.keys = d->peak_delta - sum_delta(d->keys, d->n_keys);
    for (int c = 0; c < LP_CAT_COUNT; c++)
        d->remainder.keys_by_category[c] = d->by_category[c].delta - key_sum_by_cat[c];

    e.n = 0;
    if (add_from_keys(&e, d, true) || build_rows(&e, T_OPS, &d->ops, &d->n_ops))
        goto oom;
    qsort(d->ops, d->n_ops, sizeof *d->ops, row_by_held);
    e.n = 0;
    if (add_from_keys(&e, d, false) || build_rows(&e, T_MODULES, &d->modules, &d->n_modules))
        goto oom;
    qsort(d->modules, d->n_modules, sizeof *d->modules, row_by_held);

    e.n = 0;
    if (add_sites(&e, a, 0) || add_sites(&e, b, 1) ||
        build_rows(&e, T_SITES, &d->call_sites, &d->n_call_sites) ||
        disambiguate_sites(d->call_sites, d->n_call_sites))
        goto oom;
    qsort(d->call_sites, d->n_call_sites, sizeof *d->call_sites, row_by_delta);
    d->remainder.call_sites = d->peak_delta - sum_delta(d->call_sites, d->n_call_sites);

    e.n = 0;
    if (add_modules(&e, a, 0) || add_modules(&e, b, 1) ||
        build_rows(&e, T_LAYERS, &d->layers, &d->n_layers))
        goto oom;
    qsort(d->layers, d->n_layers, sizeof *d->layers, row_by_path);
    d->remainder.layers = d->peak_delta - sum_delta(d->layers, d->n_layers);
    /* A layer's held: from the module rows (built from tag keys), matched by path. */
    for (size_t i = 0; i < d->n_layers; i++)
        for (size_t j = 0; j < d->n_modules; j++)
            if (strcmp(d->layers[i].module, d->modules[j].module) == 0)
                d->layers[i].held_bytes = d->modules[j].held_bytes;

    free(e.v);
    *out = d;
    return 0;
oom:
    free(e.v);
    gp_diff_free(d);
    snprintf(err, err_size, "out of memory computing the diff");
    return -1;
}
