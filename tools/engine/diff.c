/*
 * gp_diff_compute: the tables of diff.h from the aligned buffers of align.h. Every buffer of the
 * union (live at A's peak, or live in B at the corresponding instant without a twin live at A's
 * peak) goes into one row per table, the row of its key (its labels; strings of both runs
 * compared by text), found by hashing. Each table is summed on its own against the aligned delta,
 * so a disagreement shows up as a remainder instead of being absorbed. No address or stack id
 * takes part in a key.
 */
#include "diff.h"

#include <pthread.h>
#include <stdbool.h>

#include "array.h"
#include "hashmap.h"

#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s)
{
    size_t n = strlen(s ? s : "") + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s ? s : "", n);
    return d;
}

/* "op @ module", "op @ module (category)", or for a saved tensor, whose op made it and whose
 * module saves it, "op, saved by module"; "(no op)" / "(no module)" for empty names. */
static char *dup_label(const char *op, const char *module, const char *category)
{
    op = *op ? op : "(no op)";
    module = *module ? module : "(no module)";
    size_t n = strlen(op) + strlen(module) + (category ? strlen(category) + 12 : 0) + 4;
    char *d = malloc(n);
    if (d) {
        if (category && !strcmp(category, lp_category_name(LP_CAT_SAVED)))
            snprintf(d, n, "%s, saved by %s", op, module);
        else if (category)
            snprintf(d, n, "%s @ %s (%s)", op, module, category);
        else
            snprintf(d, n, "%s @ %s", op, module);
    }
    return d;
}

/* Keeps a string composed for d (NULL: out of memory); returns it, or NULL (then freed). */
static const char *keep(gp_diff *d, char *str)
{
    char **slot = str ? gp__push((void **)&d->owned_strings, &d->n_owned_strings,
                                 &d->cap_owned_strings, sizeof *slot)
                      : NULL;
    if (!slot) {
        free(str);
        return NULL;
    }
    return *slot = str;
}

bool gp_diff_has_stacks(const gp_diff *d)
{
    for (size_t i = 0; i < d->n_call_sites; i++)
        if (strcmp(d->call_sites[i].key, GP_NO_STACK) != 0)
            return true;
    return false;
}

void gp_diff_free(gp_diff *d)
{
    if (!d)
        return;
    free(d->keys);
    free(d->ops);
    free(d->modules);
    free(d->call_sites);
    free(d->layers);
    for (size_t i = 0; i < d->n_owned_strings; i++)
        free(d->owned_strings[i]);
    free(d->owned_strings);
    free(d);
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
    int c = gp_natural_cmp(a->module, b->module);
    if (c)
        return c;
    c = gp_natural_cmp(a->op, b->op);
    return c ? c : strcmp(a->key, b->key); /* keys are not shown: the faster order */
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

/* A layer row and where it comes in model order: the run that entered its module's region
 * first (0 = A, 1 = B only, 2 = neither: no region of that name) and when. */
typedef struct layer_place {
    int run;
    uint64_t first_ns;
    gp_diff_row row;
} layer_place;

static int layer_place_cmp(const void *pa, const void *pb)
{
    const layer_place *a = pa, *b = pb;
    if (a->run != b->run)
        return a->run < b->run ? -1 : 1;
    if (a->first_ns != b->first_ns)
        return a->first_ns < b->first_ns ? -1 : 1;
    return path_cmp(a->row.module, b->row.module);
}

static bool region_first_entry(const gp_profile *p, const char *name, uint64_t *ns)
{
    for (size_t i = 0; i < p->n_regions; i++)
        if (p->regions[i].entries && strcmp(p->regions[i].name, name) == 0) {
            *ns = p->regions[i].first_entry_ns;
            return true;
        }
    return false;
}

/* Sorts layer rows in model order: modules by when A first called them (their regions' first
 * entries: a parent before its children, layers in the order the forward runs them), then those
 * only B called, then modules without a region of their name (tree order, "" last). Returns -1
 * when out of memory (the rows are left in tree order). */
static int order_layers(gp_diff_row *rows, size_t n, const gp_profile *a, const gp_profile *b)
{
    qsort(rows, n, sizeof *rows, row_by_path);
    layer_place *v = malloc((n ? n : 1) * sizeof *v);
    if (v == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        v[i] = (layer_place){.run = 2, .row = rows[i]};
        if (!*rows[i].module)
            continue;
        if (region_first_entry(a, rows[i].module, &v[i].first_ns))
            v[i].run = 0;
        else if (region_first_entry(b, rows[i].module, &v[i].first_ns))
            v[i].run = 1;
    }
    qsort(v, n, sizeof *v, layer_place_cmp);
    for (size_t i = 0; i < n; i++)
        rows[i] = v[i].row;
    free(v);
    return 0;
}

/* Moves the rows that changed or hold something (delta, held or saved bytes) before the rows
 * that both runs hold alike, keeping no order; returns how many changed. */
static size_t changed_first(gp_diff_row *rows, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (rows[i].delta != 0 || rows[i].held_bytes != 0 || rows[i].saved_inferred_bytes != 0) {
            gp_diff_row r = rows[k];
            rows[k++] = rows[i];
            rows[i] = r;
        }
    return k;
}

/* Call sites whose labels collide get the first frame where their keys part appended
 * (gp_labels_distinct). Returns 0 or -1 (out of memory). */
static int disambiguate_sites(gp_diff *d, gp_diff_row *rows, size_t n)
{
    const char **labels = malloc((n ? n : 1) * sizeof *labels);
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    char **distinct = calloc(n ? n : 1, sizeof *distinct);
    int rc = labels && keys && distinct ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        labels[i] = rows[i].label;
        keys[i] = rows[i].key;
    }
    if (rc == 0)
        rc = gp_labels_distinct(labels, keys, n, distinct);
    for (size_t i = 0; i < n; i++)
        if (distinct[i] && (rows[i].label = keep(d, distinct[i])) == NULL)
            rc = -1; /* keep freed it; the rest are still kept or freed below */
    free(labels);
    free(keys);
    free(distinct);
    return rc;
}


/* ---- rows: the aligned buffers grouped by each table's key ---------------------------------- */

typedef enum table_kind { T_KEYS, T_OPS, T_MODULES, T_SITES, T_LAYERS } table_kind;

/* Adds buffer x's numbers to row r. */
static void row_add(gp_diff_row *r, const gp_aligned *x)
{
    uint64_t s = x->size;
    switch (x->state) {
    case GP_TWIN_PAIRED:
        r->a_bytes += s;
        r->b_bytes += s;
        break;
    case GP_TWIN_FREED:
    case GP_TWIN_NONE:
        r->a_bytes += s;
        r->held_bytes += s;
        break;
    case GP_TWIN_LATER:
        r->a_bytes += s;
        r->unaligned_bytes += s;
        break;
    case GP_TWIN_B_MORE:
        r->b_bytes += s;
        r->b_more_bytes += s;
        if (lp_category_is_graph(x->category))
            r->b_graph_bytes += s;
        break;
    }
    if (x->side == 0 && lp_category_is_graph(x->category))
        r->a_graph_bytes += s;
    if (x->saved_inferred)
        r->saved_inferred_bytes += s;
    if (x->state == GP_TWIN_FREED) { /* running byte-weighted means */
        double w = (double)s / (double)(r->freed_bytes + s);
        r->a_life_ns += ((double)x->a_life_ns - r->a_life_ns) * w;
        r->b_life_ns += ((double)x->b_life_ns - r->b_life_ns) * w;
        r->a_life_allocs += ((double)x->a_life_allocs - r->a_life_allocs) * w;
        r->b_life_allocs += ((double)x->b_life_allocs - r->b_life_allocs) * w;
        r->freed_bytes += s;
    }
    r->delta = delta_of(r->a_bytes, r->b_bytes);
}

/* One pointer per distinct text among the strings of both runs, which each intern their own: a
 * key made of canonical pointers compares by address. */
typedef struct canon {
    gp_map by_ptr;  /* string address -> index into v */
    gp_map by_text; /* (two hashes, length) -> index into v */
    const char **v;
    size_t n, cap;
    /* The last few answers, by address: a table asks for the same few labels (ops, modules)
     * once per buffer, hundreds of thousands of times. */
    struct {
        const char *s, *canonical;
    } recent[GP_RECENT];
} canon;

/* The canonical pointer of s's text (the first address seen with it); NULL when out of memory. */
static const char *canon_of(canon *c, const char *s)
{
    size_t r = gp__recent_slot(s);
    if (c->recent[r].s == s)
        return c->recent[r].canonical;
    struct gp_map_slot *m = gp__map_find(&c->by_ptr, (uintptr_t)s, 0, 0);
    if (m) {
        c->recent[r].s = s;
        return c->recent[r].canonical = c->v[m->v];
    }
    size_t len = strlen(s);
    uint64_t h1, h2;
    gp__hash_text(s, len, &h1, &h2);
    struct gp_map_slot *t = gp__map_find(&c->by_text, h1, h2, len);
    uint32_t i;
    if (t && strcmp(c->v[t->v], s) == 0) {
        i = t->v;
    } else { /* new text (or a hash collision: then its own entry, found by address only) */
        const char **slot = gp__push((void **)&c->v, &c->n, &c->cap, sizeof *slot);
        if (!slot)
            return NULL;
        *slot = s;
        i = (uint32_t)(c->n - 1);
        if (!t && !gp__map_put(&c->by_text, h1, h2, len, i))
            return NULL;
    }
    return gp__map_put(&c->by_ptr, (uintptr_t)s, 0, 0, i) ? c->v[i] : NULL;
}

static void canon_free(canon *c)
{
    gp__map_free(&c->by_ptr);
    gp__map_free(&c->by_text);
    free(c->v);
}

/* The call-site key of each (side, stack), canonical, looked up once: many aligned buffers share
 * a stack. */
typedef struct site_keys {
    gp_map map; /* (side, stack) -> index into keys */
    const char **keys;
    size_t n, cap;
} site_keys;

static const char *site_key_of(site_keys *sk, canon *cn, gp_profile *p, int side, uint32_t stack)
{
    struct gp_map_slot *s = gp__map_find(&sk->map, (uint64_t)side, stack, 0);
    if (s)
        return sk->keys[s->v];
    const char *key = gp_site_key(p, stack);
    key = canon_of(cn, key ? key : "");
    const char **k = key ? gp__push((void **)&sk->keys, &sk->n, &sk->cap, sizeof *k) : NULL;
    if (!k || !gp__map_put(&sk->map, (uint64_t)side, stack, 0, (uint32_t)(sk->n - 1)))
        return NULL;
    return *k = key;
}

/* What the tables share while they are built: canonical strings and call-site keys. */
typedef struct tables {
    gp_diff *d;
    const gp_align *al;
    gp_profile *run[2]; /* A, B */
    canon cn;
    site_keys sk;
} tables;

static void tables_free(tables *tb)
{
    canon_free(&tb->cn);
    gp__map_free(&tb->sk.map);
    free(tb->sk.keys);
}

/* Table `kind`: the aligned buffers grouped by its key, each row made at its key's first buffer
 * (al->buffers lists A's before B's, so a call site is labelled by A's stack when A has one).
 * Row strings are the profiles' (canonical) or composed and kept by d. Returns 0 or -1 (out of
 * memory). */
static int build_rows(tables *tb, table_kind kind, gp_diff_row **out, size_t *n_out)
{
    gp_map row_of = {0}; /* (category, s1, s2) -> row index */
    gp_diff_row *rows = NULL;
    size_t n = 0, cap = 0;
    int rc = -1;
    for (size_t i = 0; i < tb->al->n_buffers; i++) {
        const gp_aligned *x = &tb->al->buffers[i];
        gp_profile *p = tb->run[x->side ? 1 : 0];
        int category = kind == T_KEYS ? (int)x->category : LP_CAT_COUNT;
        const char *s1 = "", *s2 = "";
        switch (kind) {
        case T_KEYS:
        case T_OPS:
            s1 = canon_of(&tb->cn, x->op);
            s2 = canon_of(&tb->cn, x->module);
            break;
        case T_MODULES:
        case T_LAYERS:
            s1 = canon_of(&tb->cn, x->module);
            break;
        case T_SITES:
            s1 = site_key_of(&tb->sk, &tb->cn, p, x->side, x->stack);
            break;
        }
        if (!s1 || !s2)
            goto done;
        struct gp_map_slot *m =
            gp__map_find(&row_of, (uint64_t)category, (uintptr_t)s1, (uintptr_t)s2);
        if (m) {
            row_add(&rows[m->v], x);
            continue;
        }
        gp_diff_row *r = gp__push((void **)&rows, &n, &cap, sizeof *r);
        if (!r || !gp__map_put(&row_of, (uint64_t)category, (uintptr_t)s1, (uintptr_t)s2,
                               (uint32_t)(n - 1)))
            goto done;
        *r = (gp_diff_row){.category = (lp_category)category, .op = "", .module = "", .key = ""};
        switch (kind) {
        case T_KEYS:
        case T_OPS:
            r->op = s1;
            r->module = s2;
            r->label = keep(
                tb->d, dup_label(s1, s2, kind == T_KEYS ? lp_category_name(x->category) : NULL));
            break;
        case T_MODULES:
        case T_LAYERS:
            r->module = s1;
            r->label = *s1 ? s1 : "(no module)";
            r->depth = path_depth(s1);
            break;
        case T_SITES:
            r->key = s1;
            r->label = gp_site_label(p, x->stack);
            break;
        }
        if (!r->label)
            goto done;
        row_add(r, x);
    }
    rc = 0;
done:
    gp__map_free(&row_of);
    if (rc != 0) {
        free(rows);
        rows = NULL;
        n = 0;
    }
    *out = rows;
    *n_out = n;
    return rc;
}

/* The next space-separated word of *s (recorded commands join their arguments with spaces), or
 * NULL at the end; *len is its length. */
static const char *next_word(const char **s, size_t *len)
{
    const char *w = *s + strspn(*s, " ");
    if (!*w)
        return NULL;
    *len = strcspn(w, " ");
    *s = w + *len;
    return w;
}

static const char *base_name(const char *w, size_t *len)
{
    for (size_t i = *len; i-- > 0;)
        if (w[i] == '/') {
            *len -= i + 1;
            return w + i + 1;
        }
    return w;
}

/* The program a recorded command runs, as "NAME" (the executable's file name) or, for a Python
 * interpreter, "python SCRIPT" (the script's file name), "python -m MODULE" or "python -c": what two
 * runs of one program share whatever their paths and options. "" for an empty command. */
static void program_of(const char *cmd, char *out, size_t size)
{
    size_t len;
    const char *w = next_word(&cmd, &len);
    out[0] = '\0';
    if (w == NULL)
        return;
    w = base_name(w, &len);
    if (len >= 6 && strncmp(w, "python", 6) == 0)
        len = 6; /* python3 and python3.11 run one program */
    int n = snprintf(out, size, "%.*s", (int)len, w);
    if (len != 6 || strncmp(w, "python", 6) != 0 || n < 0 || (size_t)n >= size)
        return;
    while ((w = next_word(&cmd, &len)) != NULL) {
        if (len == 2 && (w[1] == 'm' || w[1] == 'c') && w[0] == '-') {
            size_t mlen = 0;
            const char *mod = w[1] == 'm' ? next_word(&cmd, &mlen) : NULL;
            snprintf(out + n, size - (size_t)n, " %.*s%s%.*s", (int)len, w, mod ? " " : "",
                     (int)mlen, mod ? mod : "");
            return;
        }
        if (w[0] != '-') {
            w = base_name(w, &len);
            snprintf(out + n, size - (size_t)n, " %.*s", (int)len, w);
            return;
        }
        if (len == 2 && (w[1] == 'W' || w[1] == 'X')) /* options with a separate value */
            next_word(&cmd, &len);
    }
}

/* d->other_program: a warning when A's and B's recorded commands run two different programs. */
static void compare_programs(gp_diff *d)
{
    char a[200], b[200];
    program_of(d->a.command, a, sizeof a);
    program_of(d->b.command, b, sizeof b);
    d->other_program[0] = '\0';
    if (a[0] && b[0] && strcmp(a, b) != 0)
        snprintf(d->other_program, sizeof d->other_program,
                 "A runs '%s' and B '%s': two different programs, whose allocations have "
                 "nothing to pair with",
                 a, b);
}

/* d->b_graph (gp_diff.b_graph), from the runs' own peaks (own_by_category). */
static void check_b_graph(gp_diff *d)
{
    uint64_t a = d->own_by_category[LP_CAT_SAVED][0] + d->own_by_category[LP_CAT_AUTOGRAD][0];
    uint64_t saved = d->own_by_category[LP_CAT_SAVED][1];
    uint64_t nodes = d->own_by_category[LP_CAT_AUTOGRAD][1];
    d->b_graph[0] = '\0';
    if (saved + nodes < (1u << 20) || (saved + nodes) * 10 < a)
        return;
    snprintf(d->b_graph, sizeof d->b_graph,
             "B's own peak holds graph memory too (%.2f MiB saved for backward, %.2f MiB in "
             "graph nodes): grad was on in B as well (an enable_grad or set_grad_enabled(True) "
             "of the program's own, or a backward pass), so what both runs' graphs hold is not "
             "counted as held",
             (double)saved / 1048576.0, (double)nodes / 1048576.0);
}

/* ---- rerouted modules, and whether the runs align ---------------------------------------------
 *
 * With grad off PyTorch may compute a module another way: a Transformer layer in eval runs one
 * fused op (aten::_transformer_encoder_layer_fwd) where grad on runs a dozen. Such a module is
 * rerouted: B ran an op in it that A never ran there, while A ran something there too. A's
 * buffers made in it (or in a module inside it) have no twin by nature and count as held, which
 * is what grad costs there; the alignment is judged on A's other buffers. A model's own module
 * (a path without a parent) is never rerouted: that would leave nothing of the model to judge. */

typedef struct op_at {
    const char *op, *module;
} op_at;

static int op_at_cmp(const void *x, const void *y)
{
    const op_at *a = x, *b = y;
    int c = strcmp(a->module, b->module);
    return c ? c : strcmp(a->op, b->op);
}

static int module_cmp(const void *x, const void *y)
{
    return strcmp(((const op_at *)x)->module, ((const op_at *)y)->module);
}

static int module_tree_cmp(const void *x, const void *y)
{
    return path_cmp(((const op_at *)x)->module, ((const op_at *)y)->module);
}

/* Whether module m is `outer` or lies inside it. */
static bool module_within(const char *m, const char *outer)
{
    size_t n = strlen(outer);
    return strncmp(m, outer, n) == 0 && (m[n] == '\0' || m[n] == '.');
}

/* The rerouted modules, outermost only, in tree order (*out, *n; the caller frees *out): from
 * the runs' tag keys. Returns -1 when out of memory. */
static int find_rerouted(const gp_profile *a, const gp_profile *b, op_at **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    op_at *in_a = malloc((a->n_tag_keys + 1) * sizeof *in_a), *found = NULL;
    size_t n_a = 0, cap = 0;
    if (!in_a)
        return -1;
    for (size_t i = 0; i < a->n_tag_keys; i++)
        if (a->tag_keys[i].op[0] && a->tag_keys[i].module[0])
            in_a[n_a++] = (op_at){a->tag_keys[i].op, a->tag_keys[i].module};
    qsort(in_a, n_a, sizeof *in_a, op_at_cmp);
    for (size_t i = 0; i < b->n_tag_keys; i++) {
        op_at k = {b->tag_keys[i].op, b->tag_keys[i].module};
        if (!k.op[0] || !strchr(k.module, '.') || bsearch(&k, in_a, n_a, sizeof *in_a, op_at_cmp) ||
            !bsearch(&k, in_a, n_a, sizeof *in_a, module_cmp))
            continue;
        op_at *slot = gp__push((void **)&found, n, &cap, sizeof *found);
        if (!slot) {
            free(in_a);
            free(found);
            *n = 0;
            return -1;
        }
        *slot = k;
    }
    free(in_a);
    if (*n == 0)
        return 0; /* found is NULL: not an array qsort may be given */
    /* by module, then op: a module comes before those inside it (its path is their prefix), so
     * the ones kept are the outermost, each named with its first op by name */
    qsort(found, *n, sizeof *found, op_at_cmp);
    size_t kept = 0;
    for (size_t i = 0; i < *n; i++) {
        bool inside = false;
        for (size_t j = 0; j < kept && !inside; j++)
            inside = module_within(found[i].module, found[j].module);
        if (!inside)
            found[kept++] = found[i];
    }
    *n = kept;
    qsort(found, kept, sizeof *found, module_tree_cmp);
    *out = found;
    return 0;
}

static bool in_rerouted(const char *module, const op_at *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (module_within(module, r[i].module))
            return true;
    return false;
}

/* d->rerouted, d->rerouted_bytes, the alignment's quality and d->diverged: at least half of the
 * bytes live at A's peak, graph memory (autograd, gradient) and rerouted modules aside, must have
 * a twin in B. Returns -1 when out of memory. */
static int judge_alignment(gp_diff *d, const gp_align *al, const gp_profile *a, const gp_profile *b)
{
    op_at *rr;
    size_t n_rr;
    if (find_rerouted(a, b, &rr, &n_rr) != 0)
        return -1;
    for (size_t i = 0; i < al->n_buffers; i++) {
        const gp_aligned *x = &al->buffers[i];
        if (x->side != 0 || x->category == LP_CAT_AUTOGRAD || x->category == LP_CAT_GRADIENT)
            continue;
        if (n_rr && in_rerouted(x->module, rr, n_rr)) {
            d->rerouted_bytes += x->size;
            continue;
        }
        d->twinnable_bytes += x->size;
        if (x->state != GP_TWIN_NONE)
            d->twinned_bytes += x->size;
    }
    d->rerouted[0] = '\0';
    if (n_rr) {
        size_t len = (size_t)snprintf(d->rerouted, sizeof d->rerouted,
                                      "B ran %zu module%s another way, with an op A never ran "
                                      "there (",
                                      n_rr, n_rr == 1 ? "" : "s");
        for (size_t i = 0; i < n_rr && i < 3 && len < sizeof d->rerouted; i++)
            len += (size_t)snprintf(d->rerouted + len, sizeof d->rerouted - len, "%s%s: %s",
                                    i ? "; " : "", rr[i].module, rr[i].op);
        if (n_rr > 3 && len < sizeof d->rerouted)
            len += (size_t)snprintf(d->rerouted + len, sizeof d->rerouted - len, "; %zu more",
                                    n_rr - 3);
        if (len < sizeof d->rerouted)
            snprintf(d->rerouted + len, sizeof d->rerouted - len,
                     "), as PyTorch does where it has a fused kernel for use without grad: A's "
                     "buffers made in %s (%.2f MiB at A's peak) have no twin and count as "
                     "held; the alignment is judged on the rest",
                     n_rr == 1 ? "it" : "them", (double)d->rerouted_bytes / 1048576.0);
    }
    free(rr);
    d->diverged = d->twinnable_bytes && d->twinned_bytes * 2 < d->twinnable_bytes;
    if (d->diverged)
        snprintf(d->diverged_why, sizeof d->diverged_why,
                 "only %.1f%% of the bytes live at A's peak (%llu of %llu, graph memory%s left "
                 "out) have a twin in B (A made %llu allocations, B %llu): the runs do not look "
                 "like the same program on the same input",
                 100.0 * (double)d->twinned_bytes / (double)d->twinnable_bytes,
                 (unsigned long long)d->twinned_bytes, (unsigned long long)d->twinnable_bytes,
                 n_rr ? " and rerouted modules" : "", (unsigned long long)al->a_allocs,
                 (unsigned long long)al->b_allocs);
    return 0;
}

static int fill_run(gp_diff *d, gp_diff_run *r, gp_profile *p, const char *path)
{
    const char *cmd = p->trace ? gp_trace_meta(p->trace, "command") : NULL;
    r->profile = p;
    r->path = keep(d, dup_str(path ? path : (p->path ? p->path : "")));
    r->command = cmd ? cmd : "";
    r->device = p->primary_device;
    r->peak_bytes = p->peak_bytes;
    r->peak_time_ns = p->peak_time_ns;
    r->allocations = p->alloc_count;
    r->damaged = p->info && p->info->damaged;
    return r->path ? 0 : -1;
}

static int64_t sum_delta(const gp_diff_row *rows, size_t n)
{
    int64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += rows[i].delta;
    return s;
}

static const gp_device_stats *primary(const gp_profile *p)
{
    for (size_t i = 0; i < p->n_devices; i++)
        if (p->devices[i].device == p->primary_device)
            return &p->devices[i];
    return NULL;
}

int gp_diff_compute(gp_profile *a, gp_profile *b, const gp_align *al, const char *a_path,
                    const char *b_path, gp_diff **out, char *err, size_t err_size)
{
    *out = NULL;
    gp_diff *d = calloc(1, sizeof *d);
    tables tb = {.d = d, .al = al, .run = {a, b}};
    if (!d)
        goto oom;
    if (fill_run(d, &d->a, a, a_path) || fill_run(d, &d->b, b, b_path))
        goto oom;
    d->peak_delta = delta_of(a->peak_bytes, b->peak_bytes);
    const gp_device_stats *da = primary(a), *db = primary(b);
    for (int c = 0; c < LP_CAT_COUNT; c++) {
        d->own_by_category[c][0] = da ? da->by_category_at_peak[c] : 0;
        d->own_by_category[c][1] = db ? db->by_category_at_peak[c] : 0;
    }
    d->a.instant_bytes = al->a_bytes;
    d->a.instant_time_ns = al->a_peak_time_ns;
    d->b.instant_bytes = al->b_bytes;
    d->b.instant_time_ns = al->b_time_ns;
    d->aligned_delta = delta_of(al->a_bytes, al->b_bytes);
    d->held_bytes = al->held_bytes;
    d->b_more_bytes = al->b_more_bytes;
    d->unaligned_bytes = al->unaligned_bytes;
    d->saved_inferred_bytes = al->saved_inferred_bytes;
    if (judge_alignment(d, al, a, b) != 0)
        goto oom;
    compare_programs(d);
    check_b_graph(d);

    /* Categories: every category gets a row, in enum order. */
    for (size_t i = 0; i < al->n_buffers; i++)
        row_add(&d->by_category[al->buffers[i].category], &al->buffers[i]);
    for (int c = 0; c < LP_CAT_COUNT; c++) {
        gp_diff_row *r = &d->by_category[c];
        r->category = (lp_category)c;
        r->label = lp_category_name((lp_category)c);
        r->key = r->op = r->module = "";
    }
    d->remainder.categories = d->aligned_delta;
    for (int c = 0; c < LP_CAT_COUNT; c++)
        d->remainder.categories -= d->by_category[c].delta;

    if (build_rows(&tb, T_KEYS, &d->keys, &d->n_keys))
        goto oom;
    qsort(d->keys, d->n_keys, sizeof *d->keys, row_by_delta);
    int64_t key_sum_by_cat[LP_CAT_COUNT] = {0};
    for (size_t i = 0; i < d->n_keys; i++)
        key_sum_by_cat[d->keys[i].category] += d->keys[i].delta;
    d->remainder.keys = d->aligned_delta - sum_delta(d->keys, d->n_keys);
    for (int c = 0; c < LP_CAT_COUNT; c++)
        d->remainder.keys_by_category[c] = d->by_category[c].delta - key_sum_by_cat[c];

    if (build_rows(&tb, T_OPS, &d->ops, &d->n_ops))
        goto oom;
    qsort(d->ops, d->n_ops, sizeof *d->ops, row_by_held);
    if (build_rows(&tb, T_MODULES, &d->modules, &d->n_modules))
        goto oom;
    qsort(d->modules, d->n_modules, sizeof *d->modules, row_by_held);
    if (build_rows(&tb, T_SITES, &d->call_sites, &d->n_call_sites))
        goto oom;
    d->n_call_sites_changed = changed_first(d->call_sites, d->n_call_sites);
    if (disambiguate_sites(d, d->call_sites, d->n_call_sites_changed))
        goto oom;
    qsort(d->call_sites, d->n_call_sites_changed, sizeof *d->call_sites, row_by_held);
    d->remainder.call_sites = d->aligned_delta - sum_delta(d->call_sites, d->n_call_sites);
    if (build_rows(&tb, T_LAYERS, &d->layers, &d->n_layers))
        goto oom;
    if (order_layers(d->layers, d->n_layers, a, b) != 0)
        goto oom;
    d->remainder.layers = d->aligned_delta - sum_delta(d->layers, d->n_layers);

    tables_free(&tb);
    *out = d;
    return 0;
oom:
    tables_free(&tb);
    gp_diff_free(d);
    snprintf(err, err_size, "out of memory computing the diff");
    return -1;
}

/* B's trace, opened and scanned (gp_trace_scan) on a thread of its own while A loads: the scan
 * reads and checks the whole file before its first event, a fifth of a load. */
typedef struct early_scan {
    gp_trace *trace; /* NULL when it could not be opened: B's load then opens it and says why */
    pthread_t thread;
    bool started;
} early_scan;

/* A failed scan is kept by the trace: B's load reads the same message from it. */
static void *early_scan_main(void *arg)
{
    char err[512];
    gp_trace_scan(((early_scan *)arg)->trace, err, sizeof err);
    return NULL;
}

static void early_scan_start(early_scan *es, const char *path)
{
    char err[512];
    *es = (early_scan){0};
    if (gp_trace_open(path, &es->trace, err, sizeof err) != 0)
        return;
    gp_trace_readahead(es->trace);
    es->started = gp__start_quiet_thread(&es->thread, early_scan_main, es) == 0;
}

/* Waits for the scan; the trace is the caller's from here on. */
static gp_trace *early_scan_done(early_scan *es)
{
    if (es->started)
        pthread_join(es->thread, NULL);
    es->started = false;
    gp_trace *t = es->trace;
    es->trace = NULL;
    return t;
}

int gp_diff_load(const char *a_path, const char *b_path, const gp_analysis_options *opts,
                 gp_profile **a, gp_profile **b, gp_diff **out, char *err, size_t err_size)
{
    *a = *b = NULL;
    *out = NULL;
    gp_analysis_options o;
    if (opts)
        o = *opts;
    else
        gp_analysis_options_default(&o);
    gp_align *al = gp_align_new();
    if (!al) {
        snprintf(err, err_size, "out of memory aligning the runs");
        return -1;
    }
    int rc = -1;
    early_scan b_scan;
    early_scan_start(&b_scan, b_path);
    o.observer = gp_align_observer(al, 0);
    if (gp_profile_load(a_path, &o, a, err, err_size) != 0)
        goto done;
    o.observer = gp_align_observer(al, 1);
    o.without_sites = true; /* B's sites: only A's are ever read after the diff */
    /* B shares A's symbolizer: the same program's modules are opened and resolved once */
    if (gp__profile_load_with(b_path, &o, gp_symbolizer_share((*a)->symbolizer),
                              early_scan_done(&b_scan), b, err, err_size) != 0)
        goto done;
    if (gp_align_finish(al) != 0) {
        snprintf(err, err_size, "out of memory aligning '%s' with '%s'", a_path, b_path);
        goto done;
    }
    rc = gp_diff_compute(*a, *b, al, a_path, b_path, out, err, err_size);
done:
    gp_trace_close(early_scan_done(&b_scan)); /* A failed: B's trace was not handed on */
    gp_align_free(al);
    if (rc != 0) {
        gp_profile_free(*b);
        gp_profile_free(*a);
        *a = *b = NULL;
    }
    return rc;
}
