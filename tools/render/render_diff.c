/*
 * Text and JSON renderings of a gp_diff (diff.h). Nothing is recomputed here except the column
 * totals of the tables, which are summed from the rows printed (and the rows folded into the
 * "(N more)" line), so a reader can check that each table adds up to the peak delta; whatever does
 * not is printed as an "(unexplained remainder)" row, from the diff's own remainder fields.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "diff.h"
#include "json.h"
#include "render_common.h"

/* ---- text ------------------------------------------------------------------------------- */

/* Prints a table like gp__table_print, without the trailing blanks that empty right-aligned cells
 * leave at the end of a line. Returns 0 or -1. */
static int table_print(FILE *out, const gp__table *t)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        return -1;
    int rc = gp__table_print(m, t, "  ");
    if (fclose(m) != 0 || !buf) {
        free(buf);
        return -1;
    }
    for (char *line = buf; rc == 0 && *line;) {
        char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        size_t end = n;
        while (end > 0 && line[end - 1] == ' ')
            end--;
        if (fwrite(line, 1, end, out) != end || fputc('\n', out) == EOF)
            rc = -1;
        line += n + (nl != NULL);
    }
    free(buf);
    return rc;
}

/* A table's running totals, summed from its rows. */
typedef struct totals {
    uint64_t a, b, held, saved;
    int64_t delta;
} totals;

static void totals_add(totals *t, const gp_diff_row *r)
{
    t->a += r->a_bytes;
    t->b += r->b_bytes;
    t->delta += r->delta;
    t->held += r->held_bytes;
    t->saved += r->saved_inferred_bytes;
}

/* Cells "A", "B", "delta", "held", "saved" of a row (or of totals). */
static void cells_abdh(gp__table *t, uint64_t a, uint64_t b, int64_t delta, uint64_t held,
                       uint64_t saved)
{
    char x[32];
    gp__table_cell(t, "%s", gp_format_bytes(a, x, sizeof x));
    gp__table_cell(t, "%s", gp_format_bytes(b, x, sizeof x));
    gp__table_cell(t, "%s", gp__format_delta(delta, x, sizeof x));
    gp__table_cell(t, "%s", gp_format_bytes(held, x, sizeof x));
    gp__table_cell(t, "%s", gp_format_bytes(saved, x, sizeof x));
}

/* "kept": how long the row's held buffers lived in A against their twins in B. */
static void cell_lifetime(gp__table *t, const gp_diff_row *r)
{
    char x[32], y[32];
    if (!r->freed_bytes) {
        gp__table_cell(t, "%s", r->held_bytes ? "no twin" : "");
        return;
    }
    gp__table_cell(t, "%s vs %s", gp__format_ns((uint64_t)r->a_life_ns, x, sizeof x),
                   gp__format_ns((uint64_t)r->b_life_ns, y, sizeof y));
}

/* The remainder row (label, A, B, delta, held), printed whenever a table's deltas do not sum to
 * the peak delta. */
static void remainder_row(gp__table *t, int64_t remainder, int extra_cells)
{
    char x[32];
    if (remainder == 0)
        return;
    gp__table_cell(t, "(unexplained remainder)");
    gp__table_cell(t, "%s", "");
    gp__table_cell(t, "%s", "");
    gp__table_cell(t, "%s", gp__format_delta(remainder, x, sizeof x));
    for (int i = 0; i < 1 + extra_cells; i++)
        gp__table_cell(t, "%s", "");
}

/*
 * A "held by graph construction" table: the rows with held bytes, largest first, at most `top`
 * (0 = all); the other rows folded into one "(N more)" row; a total over every row; the remainder
 * against the peak delta. Columns: label, A, B, delta, held.
 */
static int held_table(FILE *out, const char *title, const char *what, const gp_diff_row *rows,
                      size_t n, size_t top, int64_t remainder)
{
    size_t shown = 0, with_held = 0;
    for (size_t i = 0; i < n; i++)
        with_held += rows[i].held_bytes > 0;
    if (with_held == 0) {
        char x[32];
        fprintf(out, "\n%s: none\n", title);
        if (remainder != 0)
            fprintf(out, "  (unexplained remainder: %s)\n",
                    gp__format_delta(remainder, x, sizeof x));
        return ferror(out) ? -1 : 0;
    }
    size_t limit = top && top < with_held ? top : with_held;
    if (limit < with_held)
        fprintf(out, "\n%s (top %zu of %zu)\n", title, limit, with_held);
    else
        fprintf(out, "\n%s\n", title);
    const char *headers[] = {what, "A", "B", "delta", "held", "saved", "lifetime A vs B"};
    gp__table *t = gp__table_new(7, headers, "lrrrrrr");
    totals all = {0}, rest = {0};
    size_t n_rest = 0;
    /* The rows come sorted by held, largest first. */
    for (size_t k = 0; k < n; k++) {
        const gp_diff_row *r = &rows[k];
        totals_add(&all, r);
        if (r->held_bytes > 0 && shown < limit) {
            gp__table_cell(t, "%s", r->label); /* whole: a cut label names nothing */
            cells_abdh(t, r->a_bytes, r->b_bytes, r->delta, r->held_bytes, r->saved_inferred_bytes);
            cell_lifetime(t, r);
            shown++;
        } else {
            totals_add(&rest, r);
            n_rest++;
        }
    }
    if (n_rest) { /* where the top cut rows with held bytes, say how many of the rest hold */
        char k[32], h[32];
        gp__format_count(n_rest, k, sizeof k);
        if (with_held > shown)
            gp__table_cell(t, "(%s more: %s with held bytes)", k,
                           gp__format_count(with_held - shown, h, sizeof h));
        else
            gp__table_cell(t, "(%s more)", k);
        cells_abdh(t, rest.a, rest.b, rest.delta, rest.held, rest.saved);
        gp__table_cell(t, "%s", "");
    }
    gp__table_cell(t, "total");
    cells_abdh(t, all.a, all.b, all.delta, all.held, all.saved);
    gp__table_cell(t, "%s", "");
    remainder_row(t, remainder, 2);
    int rc = table_print(out, t);
    gp__table_free(t);
    return rc;
}

static void run_line(gp__table *t, const char *name, const gp_diff_run *r)
{
    char x[32], y[32], z[32], dev[32];
    gp__table_cell(t, "%s", name);
    gp__table_cell(t, "%s", r->path);
    gp__table_cell(t, "%s", gp__device_name(r->device, dev, sizeof dev));
    gp__table_cell(t, "%s", gp_format_bytes(r->peak_bytes, x, sizeof x));
    gp__table_cell(t, "%s B", gp__format_count(r->peak_bytes, y, sizeof y));
    gp__table_cell(t, "%s", gp__format_ns(r->peak_time_ns, z, sizeof z));
    gp__table_cell(t, "%s", *r->command ? r->command : "-");
}

static const char *magnitude(int64_t v, char *buf, size_t size)
{
    return gp_format_bytes(v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v, buf, size);
}

static void headline(FILE *out, const gp_diff *d)
{
    char x[32], y[32], z[32], s[32], pct[32], own[32];
    gp_format_bytes(d->a.instant_bytes, x, sizeof x);
    gp_format_bytes(d->b.instant_bytes, y, sizeof y);
    gp_format_bytes(d->held_bytes, z, sizeof z);
    gp_format_bytes(d->saved_inferred_bytes, s, sizeof s);
    gp__format_percent(d->held_bytes, d->a.instant_bytes, pct, sizeof pct);
    fprintf(out,
            "At A's peak (%s) B holds %s: %s held by graph construction (%s of A's peak), %s "
            "saved for backward (inferred)\n",
            x, y, z, pct, s);
    fprintf(out, "Own peaks: A %s, B %s: A peaks %s %s\n",
            gp_format_bytes(d->a.peak_bytes, x, sizeof x),
            gp_format_bytes(d->b.peak_bytes, y, sizeof y),
            magnitude(d->peak_delta, own, sizeof own), d->peak_delta >= 0 ? "higher" : "lower");
}

/* The runs (path, device, own peak, command) and their difference. */
static int runs_table(FILE *out, const gp_diff *d)
{
    char x[32], y[32];
    const char *h[] = {"", "trace", "device", "peak", "bytes", "peak at", "command"};
    gp__table *t = gp__table_new(7, h, "lllrrrl");
    run_line(t, "A", &d->a);
    run_line(t, "B", &d->b);
    uint64_t mag =
        d->peak_delta < 0 ? (uint64_t)0 - (uint64_t)d->peak_delta : (uint64_t)d->peak_delta;
    gp__table_cell(t, "A-B");
    gp__table_cell(t, "%s", "");
    gp__table_cell(t, "%s", "");
    gp__table_cell(t, "%s", gp__format_delta(d->peak_delta, x, sizeof x));
    gp__table_cell(t, "%s%s B",
                   d->peak_delta > 0   ? "+"
                   : d->peak_delta < 0 ? "-"
                                       : "",
                   gp__format_count(mag, y, sizeof y));
    gp__table_cell(t, "%s", "");
    gp__table_cell(t, "%s", "");
    int rc = table_print(out, t);
    gp__table_free(t);
    for (int s = 0; s < 2; s++) {
        const gp_diff_run *r = s ? &d->b : &d->a;
        if (r->damaged) {
            const gp_trace_info *info = r->profile ? r->profile->info : NULL;
            fprintf(
                out,
                "  note: %s is damaged (%s); the diff covers the part before byte %" PRIu64 "\n",
                s ? "B" : "A", info ? info->damage_reason : "?", info ? info->damage_offset : 0);
        }
    }
    if (d->other_program[0])
        fprintf(out, "  warning: %s\n", d->other_program);
    if (d->b_graph[0])
        fprintf(out, "  warning: %s\n", d->b_graph);
    if (d->rerouted[0])
        fprintf(out, "  note: %s\n", d->rerouted);
    if (d->diverged)
        fprintf(out, "  warning: the runs do not align: %s\n", d->diverged_why);
    return rc;
}

/* By category, at A's peak and B's corresponding instant, with each category's delta that is in
 * no tag key. */
static int category_table(FILE *out, const gp_diff *d)
{
    char x[32];
    fprintf(out, "\nBy category, at A's peak and B's corresponding instant\n");
    const char *h[] = {"category", "A", "B", "delta", "held", "saved"};
    gp__table *t = gp__table_new(6, h, "lrrrrr");
    totals all = {0};
    for (int c = 0; c < LP_CAT_COUNT; c++) {
        const gp_diff_row *r = &d->by_category[c];
        totals_add(&all, r);
        if (r->a_bytes == 0 && r->b_bytes == 0 && r->held_bytes == 0 &&
            d->remainder.keys_by_category[c] == 0)
            continue;
        gp__table_cell(t, "%s", r->label);
        cells_abdh(t, r->a_bytes, r->b_bytes, r->delta, r->held_bytes, r->saved_inferred_bytes);
        if (d->remainder.keys_by_category[c] != 0)
            gp__table_note(t,
                           "    (unexplained remainder: %s of %s's delta is in no tag "
                           "key)",
                           gp__format_delta(d->remainder.keys_by_category[c], x, sizeof x),
                           r->label);
    }
    gp__table_cell(t, "total");
    cells_abdh(t, all.a, all.b, all.delta, all.held, all.saved);
    remainder_row(t, d->remainder.categories, 0);
    int rc = table_print(out, t);
    gp__table_free(t);
    return rc;
}

/* Per layer, in model order, indented by depth below the shallowest module path. */
static int layer_table(FILE *out, const gp_diff *d)
{
    char x[32];
    if (!d->n_layers)
        return 0;
    fprintf(out, "\nPer layer (graph = saved + autograd + gradient)\n");
    const char *h[] = {"layer", "A", "B", "delta", "held", "saved", "graph A", "graph B"};
    gp__table *t = gp__table_new(8, h, "lrrrrrrr");
    totals all = {0};
    uint64_t ga = 0, gb = 0;
    int min_depth = -1;
    for (size_t i = 0; i < d->n_layers; i++)
        if (*d->layers[i].module && (min_depth < 0 || d->layers[i].depth < min_depth))
            min_depth = d->layers[i].depth;
    for (size_t i = 0; i < d->n_layers; i++) {
        const gp_diff_row *r = &d->layers[i];
        totals_add(&all, r);
        ga += r->a_graph_bytes;
        gb += r->b_graph_bytes;
        gp__table_cell(t, "%*s%s", 2 * (*r->module ? r->depth - min_depth : 0), "", r->label);
        cells_abdh(t, r->a_bytes, r->b_bytes, r->delta, r->held_bytes, r->saved_inferred_bytes);
        gp__table_cell(t, "%s", gp_format_bytes(r->a_graph_bytes, x, sizeof x));
        gp__table_cell(t, "%s", gp_format_bytes(r->b_graph_bytes, x, sizeof x));
    }
    gp__table_cell(t, "total");
    cells_abdh(t, all.a, all.b, all.delta, all.held, all.saved);
    gp__table_cell(t, "%s", gp_format_bytes(ga, x, sizeof x));
    gp__table_cell(t, "%s", gp_format_bytes(gb, x, sizeof x));
    remainder_row(t, d->remainder.layers, 3);
    int rc = table_print(out, t);
    gp__table_free(t);
    return rc;
}

/* The arithmetic, in one line. */
static void sums_line(FILE *out, const gp_diff *d)
{
    const gp_diff_remainder *rm = &d->remainder;
    bool clean = rm->categories == 0 && rm->keys == 0 && rm->call_sites == 0 && rm->layers == 0;
    for (int c = 0; c < LP_CAT_COUNT; c++)
        clean = clean && rm->keys_by_category[c] == 0;
    char x[32], h[32], bm[32], un[32];
    fprintf(out,
            "\nSums: A's peak - B at that instant = %s = held %s - b_more %s + unaligned %s "
            "(twin not made by B yet)",
            gp__format_delta(d->aligned_delta, x, sizeof x),
            gp_format_bytes(d->held_bytes, h, sizeof h),
            gp_format_bytes(d->b_more_bytes, bm, sizeof bm),
            gp_format_bytes(d->unaligned_bytes, un, sizeof un));
    if (clean)
        fprintf(out, "; categories, tag keys, call sites and layers each add up to it.\n");
    else
        fprintf(out,
                "; the tables do not all add up to it: remainders categories %" PRId64
                " B, tag keys %" PRId64 " B, call sites %" PRId64 " B, layers %" PRId64 " B.\n",
                rm->categories, rm->keys, rm->call_sites, rm->layers);
}

int gp_render_diff_text(FILE *out, const gp_diff *d, const gp_render_options *o)
{
    size_t top = o ? o->top : 10;
    headline(out, d);
    fputc('\n', out);
    int rc = runs_table(out, d);
    rc |= category_table(out, d);
    rc |= held_table(out, "Held by graph construction, by module", "module", d->modules,
                     d->n_modules, top, d->remainder.keys);
    rc |= held_table(out, "Held by graph construction, by op", "op @ module", d->ops, d->n_ops, top,
                     d->remainder.keys);
    if (gp_diff_has_stacks(d))
        rc |= held_table(out, "Held by graph construction, by call site", "call site",
                         d->call_sites, d->n_call_sites, top, d->remainder.call_sites);
    else
        fprintf(out, "\nHeld by graph construction, by call site: none: " GP__NO_STACKS_NOTE "\n");
    rc |= layer_table(out, d);
    sums_line(out, d);
    return rc || ferror(out) ? -1 : 0;
}

/* ---- JSON ------------------------------------------------------------------------------- */

/* A string member; NULL is written "" (every key is always present). */
static void json_str(gp__jw *j, const char *key, const char *v)
{
    gp__jw_str(j, key, v ? v : "");
}

static void json_run(gp__jw *j, const char *key, const gp_diff_run *r)
{
    char dev[32];
    gp__jw_object(j, key, true);
    json_str(j, "path", r->path);
    json_str(j, "command", r->command);
    gp__jw_str(j, "device", gp__device_name(r->device, dev, sizeof dev));
    gp__jw_u64(j, "peak_bytes", r->peak_bytes);
    gp__jw_u64(j, "peak_time_ns", r->peak_time_ns);
    gp__jw_u64(j, "instant_bytes", r->instant_bytes);
    gp__jw_u64(j, "instant_time_ns", r->instant_time_ns);
    gp__jw_u64(j, "allocations", r->allocations);
    gp__jw_bool(j, "damaged", r->damaged);
    gp__jw_end(j);
}

/* The numbers every row carries, and its lifetime when some held buffers have twins. */
static void json_numbers(gp__jw *j, const gp_diff_row *r)
{
    gp__jw_u64(j, "a_bytes", r->a_bytes);
    gp__jw_u64(j, "b_bytes", r->b_bytes);
    gp__jw_i64(j, "delta", r->delta);
    gp__jw_u64(j, "held_bytes", r->held_bytes);
    gp__jw_u64(j, "b_more_bytes", r->b_more_bytes);
    gp__jw_u64(j, "unaligned_bytes", r->unaligned_bytes);
    gp__jw_u64(j, "saved_inferred_bytes", r->saved_inferred_bytes);
    if (!r->freed_bytes)
        return;
    gp__jw_object(j, "lifetime", true);
    gp__jw_u64(j, "freed_bytes", r->freed_bytes);
    gp__jw_f64(j, "a_ns", r->a_life_ns, 0);
    gp__jw_f64(j, "b_ns", r->b_life_ns, 0);
    gp__jw_f64(j, "a_allocations", r->a_life_allocs, 0);
    gp__jw_f64(j, "b_allocations", r->b_life_allocs, 0);
    gp__jw_end(j);
}

/* The totals, the alignment and the per-category rows. */
static void json_summary(gp__jw *j, const gp_diff *d)
{
    gp__jw_object(j, "peak_bytes", true);
    gp__jw_u64(j, "a", d->a.peak_bytes);
    gp__jw_u64(j, "b", d->b.peak_bytes);
    gp__jw_i64(j, "delta", d->peak_delta);
    gp__jw_end(j);
    gp__jw_object(j, "own_peak_by_category", true);
    for (int c = 0; c < LP_CAT_COUNT; c++) {
        gp__jw_object(j, lp_category_name((lp_category)c), true);
        gp__jw_u64(j, "a", d->own_by_category[c][0]);
        gp__jw_u64(j, "b", d->own_by_category[c][1]);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    gp__jw_i64(j, "aligned_delta_bytes", d->aligned_delta);
    gp__jw_u64(j, "held_by_graph_bytes", d->held_bytes);
    gp__jw_u64(j, "b_more_bytes", d->b_more_bytes);
    gp__jw_u64(j, "unaligned_bytes", d->unaligned_bytes);
    gp__jw_u64(j, "saved_inferred_bytes", d->saved_inferred_bytes);
    gp__jw_object(j, "alignment", true);
    gp__jw_u64(j, "twinned_bytes", d->twinned_bytes);
    gp__jw_u64(j, "twinnable_bytes", d->twinnable_bytes);
    gp__jw_bool(j, "diverged", d->diverged);
    json_str(j, "why", d->diverged ? d->diverged_why : "");
    json_str(j, "rerouted", d->rerouted);
    gp__jw_u64(j, "rerouted_bytes", d->rerouted_bytes);
    json_str(j, "other_program", d->other_program);
    json_str(j, "b_graph", d->b_graph);
    gp__jw_end(j);
    gp__jw_object(j, "by_category", false);
    for (int c = 0; c < LP_CAT_COUNT; c++) {
        gp__jw_object(j, lp_category_name((lp_category)c), true);
        json_numbers(j, &d->by_category[c]);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    gp__jw_object(j, "held_by_category", true);
    for (int c = 0; c < LP_CAT_COUNT; c++)
        gp__jw_u64(j, lp_category_name((lp_category)c), d->by_category[c].held_bytes);
    gp__jw_end(j);
}

/* The row tables: tag keys ("sites"), ops, modules, call sites, layers; one row per line. */
static void json_rows(gp__jw *j, const gp_diff *d)
{
    gp__jw_array(j, "sites", false);
    for (size_t i = 0; i < d->n_keys; i++) {
        const gp_diff_row *r = &d->keys[i];
        gp__jw_object(j, NULL, true);
        json_str(j, "op", r->op);
        json_str(j, "module", r->module);
        gp__jw_str(j, "category", lp_category_name(r->category));
        json_str(j, "label", r->label);
        json_numbers(j, r);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    gp__jw_array(j, "ops", false);
    for (size_t i = 0; i < d->n_ops; i++) {
        gp__jw_object(j, NULL, true);
        json_str(j, "op", d->ops[i].op);
        json_str(j, "module", d->ops[i].module);
        json_numbers(j, &d->ops[i]);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    gp__jw_array(j, "modules", false);
    for (size_t i = 0; i < d->n_modules; i++) {
        gp__jw_object(j, NULL, true);
        json_str(j, "module", d->modules[i].module);
        json_numbers(j, &d->modules[i]);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    /* Call sites that neither changed nor hold anything for the graph are left out (a PyTorch
     * program has 10^5 of them); the deltas of the rows written still add up. */
    gp__jw_array(j, "call_sites", false);
    for (size_t i = 0; i < d->n_call_sites_changed; i++) {
        const gp_diff_row *r = &d->call_sites[i];
        gp__jw_object(j, NULL, true);
        json_str(j, "label", r->label);
        json_str(j, "key", r->key);
        json_numbers(j, r);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    gp__jw_array(j, "layers", false);
    for (size_t i = 0; i < d->n_layers; i++) {
        const gp_diff_row *r = &d->layers[i];
        gp__jw_object(j, NULL, true);
        json_str(j, "module", r->module);
        gp__jw_i64(j, "depth", r->depth);
        json_numbers(j, r);
        gp__jw_u64(j, "a_graph_bytes", r->a_graph_bytes);
        gp__jw_u64(j, "b_graph_bytes", r->b_graph_bytes);
        gp__jw_end(j);
    }
    gp__jw_end(j);
}

int gp_render_diff_json(FILE *out, const gp_diff *d, const gp_render_options *o)
{
    (void)o;
    const gp_diff_remainder *rm = &d->remainder;
    gp__jw j;
    gp__jw_begin(&j, out);
    gp__jw_object(&j, NULL, false);
    gp__jw_str(&j, "schema", "gradprof-diff/2");
    json_run(&j, "a", &d->a);
    json_run(&j, "b", &d->b);
    json_summary(&j, d);
    json_rows(&j, d);
    gp__jw_i64(&j, "remainder_bytes", rm->keys);
    gp__jw_object(&j, "remainders", true);
    gp__jw_i64(&j, "categories", rm->categories);
    gp__jw_i64(&j, "sites", rm->keys);
    gp__jw_i64(&j, "call_sites", rm->call_sites);
    gp__jw_i64(&j, "layers", rm->layers);
    gp__jw_object(&j, "sites_by_category", true);
    for (int c = 0; c < LP_CAT_COUNT; c++)
        gp__jw_i64(&j, lp_category_name((lp_category)c), rm->keys_by_category[c]);
    gp__jw_end(&j);
    gp__jw_end(&j);
    gp__jw_end(&j);
    return gp__jw_finish(&j);
}
