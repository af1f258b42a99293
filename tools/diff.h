/*
 * Diff of two runs (A usually grad on, B grad off): what A holds at its peak that B does not.
 *
 * Each run is measured at its own primary-device peak (gp_profile.peak_bytes and the live-at-peak
 * tables of analysis.h). Rows are matched across runs by symbolic keys, never by address or stack
 * id: tag keys by (category, op, module), call sites by gp_site_key() (symbolized frames), layers
 * by module path. For every row: a_bytes (live at A's peak), b_bytes (at B's peak),
 * delta = a - b, and held_bytes = the memory "held by graph construction" in it: the sum, over
 * the tag keys the row covers, of max(0, a - b), i.e. memory live at A's peak that B had already
 * freed or never allocated.
 *
 * The numbers add up: peak_delta = sum of category deltas = sum of tag-key deltas = sum of
 * call-site deltas = sum of layer deltas. Each sum is computed independently from its own table
 * and whatever does not add up is kept in the `remainder` fields, which the renderers print as a
 * row of its own; nothing is hidden.
 *
 * Ownership: a gp_diff owns its rows and every string in them; it borrows the two profiles
 * (`a`, `b`), which must outlive it. gp_diff_free(NULL) is a no-op.
 */
#ifndef GRADPROF_TOOLS_DIFF_H
#define GRADPROF_TOOLS_DIFF_H

#include <stdint.h>
#include <stdio.h>

#include "analysis.h"
#include "render.h"

/* One run of the diff. */
typedef struct gp_diff_run {
    gp_profile *profile;   /* borrowed */
    const char *path;      /* the trace file as given on the command line */
    const char *command;   /* the trace's "command" metadata, "" if absent */
    int32_t device;        /* the primary device the peak is measured on (-1 = host) */
    uint64_t peak_bytes;   /* live on that device at its peak */
    uint64_t peak_time_ns; /* when, since the trace's start */
    bool damaged;          /* the trace was cut short: the diff covers what was recovered */
} gp_diff_run;

/*
 * A row of any diff table. Which fields mean something depends on the table:
 *   by_category : category;                           label = category name
 *   keys        : category, op, module;               label = "op @ module (category)"
 *   ops         : op, module (all categories);        label = "op @ module"
 *   modules     : module (all categories);            label = module, "(no module)" for ""
 *   call_sites  : key (gp_site_key), label (gp_site_label of A, else of B)
 *   layers      : module, depth, a/b_graph_bytes;     label = module, "(no module)" for ""
 * Unused strings are "", an unused category is LP_CAT_COUNT. All strings are owned by the diff.
 */
typedef struct gp_diff_row {
    const char *label;
    const char *key;
    lp_category category;
    const char *op;
    const char *module;
    int depth;              /* layers: number of '.' in the module path (0 for "" and "mlp") */
    uint64_t a_bytes;       /* live at A's peak */
    uint64_t b_bytes;       /* live at B's peak */
    int64_t delta;          /* a_bytes - b_bytes */
    uint64_t held_bytes;    /* sum of max(0, a - b) over the tag keys the row covers; for
                               call sites (not made of tag keys) max(0, delta) */
    uint64_t a_graph_bytes; /* layers: SAVED + AUTOGRAD + GRADIENT bytes of the row at A's peak */
    uint64_t b_graph_bytes; /* layers: the same at B's peak */
} gp_diff_row;

/* What does not add up, each computed from its own table (all 0 for consistent profiles). */
typedef struct gp_diff_remainder {
    int64_t categories;                     /* peak_delta - sum of by_category deltas */
    int64_t keys;                           /* peak_delta - sum of tag-key deltas */
    int64_t keys_by_category[LP_CAT_COUNT]; /* category delta - sum of its tag-key deltas */
    int64_t call_sites;                     /* peak_delta - sum of call-site deltas */
    int64_t layers;                         /* peak_delta - sum of layer deltas */
} gp_diff_remainder;

typedef struct gp_diff {
    gp_diff_run a, b;
    int64_t peak_delta;                    /* a.peak_bytes - b.peak_bytes */
    uint64_t held_bytes;                   /* held by graph construction: sum over tag keys of
                                              max(0, a - b) */
    uint64_t b_more_bytes;                 /* the other way: sum over tag keys of max(0, b - a); so
                                              peak_delta = held_bytes - b_more_bytes + remainder.keys */
    gp_diff_row by_category[LP_CAT_COUNT]; /* indexed by lp_category; held_bytes = per category */
    gp_diff_row *keys;
    size_t n_keys; /* every tag key, delta desc */
    gp_diff_row *ops;
    size_t n_ops; /* (op, module), held desc then delta desc */
    gp_diff_row *modules;
    size_t n_modules; /* module, held desc then delta desc */
    gp_diff_row *call_sites;
    size_t n_call_sites; /* gp_site_key, delta desc */
    gp_diff_row *layers;
    size_t n_layers; /* module paths in tree order (parents first,
                        numeric path segments compared as numbers) */
    gp_diff_remainder remainder;
} gp_diff;

/* Computes the diff of A and B; `a_path`/`b_path` are the names to print (NULL = the profiles'
 * paths). Returns 0, or -1 with a message in err (out of memory). The profiles are borrowed and
 * must outlive *out. */
int gp_diff_compute(gp_profile *a, gp_profile *b, const char *a_path, const char *b_path,
                    gp_diff **out, char *err, size_t err_size);
void gp_diff_free(gp_diff *d);

/* Renderers: return 0, or -1 if writing failed. o->top limits the module, op and call-site tables
 * of the text output (0 = all); the JSON output always has every row. */
int gp_render_diff_text(FILE *out, const gp_diff *d, const gp_render_options *o);
/* JSON schema "gradprof-diff/1" (documented in the README). */
int gp_render_diff_json(FILE *out, const gp_diff *d, const gp_render_options *o);

#endif /* GRADPROF_TOOLS_DIFF_H */
