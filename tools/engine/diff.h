/*
 * Diff of two runs of one program (A usually grad on, B grad off): what graph construction holds.
 *
 * The runs are aligned buffer by buffer (align.h: twins by thread, size, birth role, innermost
 * frames and occurrence index; never by address). A is measured at its host peak and B at the
 * corresponding instant, where B made the twins of A's allocations just before A's peak. Then
 *   held_bytes      = bytes live at A's peak whose twin B had already freed at that instant, or
 *                     that have no twin in B: held by graph construction;
 *   b_more_bytes    = bytes live in B at that instant whose twin is not live at A's peak;
 *   unaligned_bytes = bytes live at A's peak whose twin B had not made yet at that instant;
 *   aligned_delta   = A's peak - B's live bytes at the instant = held - b_more + unaligned.
 *   saved_inferred_bytes = bytes live at A's peak that autograd kept for backward, found without
 *                     tags (align.h): tagged SAVED, no twin, or a twin B frees sooner.
 * Each run's own peak and peak_delta (how much higher grad pushes the peak) are kept as well.
 *
 * Rows. Every buffer counts in exactly one row of each table, under A's labels at its peak (a B
 * buffer whose twin is live at A's peak counts under its twin's row), or under B's labels at the
 * instant for b_more buffers. So each row's delta = held - b_more + unaligned, and every table
 * sums to aligned_delta; each sum is still checked on its own and any difference kept in
 * `remainder` (printed as a row, never hidden).
 *
 * Ownership: a gp_diff owns its rows; their strings are the two profiles' (interned names, site
 * keys and labels) or composed and kept by the diff (owned_strings). It borrows the profiles
 * (`a`, `b`), which must outlive it. gp_diff_free(NULL) is a no-op.
 */
#ifndef GRADPROF_TOOLS_DIFF_H
#define GRADPROF_TOOLS_DIFF_H

#include <stdint.h>
#include <stdio.h>

#include "align.h"
#include "analysis.h"

/* One run of the diff. */
typedef struct gp_diff_run {
    gp_profile *profile;   /* borrowed */
    const char *path;      /* the trace file as given on the command line */
    const char *command;   /* the trace's "command" metadata, "" if absent */
    int32_t device;        /* the primary device its own peak is measured on (-1 = host) */
    uint64_t peak_bytes;   /* its own peak on that device */
    uint64_t peak_time_ns; /* when, since the trace's start */
    uint64_t instant_bytes;   /* host bytes live at the aligned instant (A: its peak) */
    uint64_t instant_time_ns; /* when */
    uint64_t allocations;  /* allocations the run made */
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
    uint64_t b_bytes;       /* live in B at the corresponding instant */
    int64_t delta;          /* a_bytes - b_bytes = held - b_more + unaligned */
    uint64_t held_bytes;    /* held by graph construction */
    uint64_t b_more_bytes;
    uint64_t unaligned_bytes;
    uint64_t saved_inferred_bytes;
    uint64_t a_graph_bytes; /* SAVED + AUTOGRAD + GRADIENT bytes of the row at A's peak */
    uint64_t b_graph_bytes; /* the same among its b_more buffers */
    /* Lifetimes of the row's held buffers that have a twin (freed_bytes of them), byte-weighted
     * means: in A (to the end of the trace when never freed) and in B, in ns and allocations. */
    uint64_t freed_bytes;
    double a_life_ns, b_life_ns, a_life_allocs, b_life_allocs;
} gp_diff_row;

/* What does not add up, each computed from its own table (all 0 when consistent). */
typedef struct gp_diff_remainder {
    int64_t categories;                     /* aligned_delta - sum of by_category deltas */
    int64_t keys;                           /* aligned_delta - sum of tag-key deltas */
    int64_t keys_by_category[LP_CAT_COUNT]; /* category delta - sum of its tag-key deltas */
    int64_t call_sites;                     /* aligned_delta - sum of call-site deltas */
    int64_t layers;                         /* aligned_delta - sum of layer deltas */
} gp_diff_remainder;

typedef struct gp_diff {
    gp_diff_run a, b;
    int64_t peak_delta;    /* a.peak_bytes - b.peak_bytes: the runs' own peaks */
    uint64_t own_by_category[LP_CAT_COUNT][2]; /* each run's categories at its own peak */
    int64_t aligned_delta; /* a.instant_bytes - b.instant_bytes */
    uint64_t held_bytes, b_more_bytes, unaligned_bytes, saved_inferred_bytes;
    /* Alignment quality: bytes live at A's peak with a twin in B, of those that should have
     * one (graph memory and rerouted modules left out). */
    uint64_t twinned_bytes, twinnable_bytes;
    bool diverged; /* less than half of them have a twin: the runs do not look like one program */
    char diverged_why[320];
    /* Rerouted modules: B ran an op in them that A never ran there (PyTorch's fused kernels,
     * taken only without grad, as for a Transformer layer in eval). A's buffers made in them
     * have no twin and count as held; rerouted_bytes of them were live at A's peak. rerouted
     * says which modules and ops, "" when none. */
    uint64_t rerouted_bytes;
    char rerouted[512];
    /* a warning when the traces' commands name two programs (the executable's file name, and
     * for Python the script or module); "" when they name one, or a command is not recorded.
     * Unlike diverged it judges nothing: a fixed copy of a script may still align. */
    char other_program[512];
    /* a warning when B's own peak holds graph memory by its tags (saved for backward, graph
     * nodes), at least 1 MiB and a tenth of A's: grad was on in B too, so what both runs' graphs
     * hold cancels instead of showing as held; "" otherwise (also when nothing is tagged) */
    char b_graph[512];
    gp_diff_row by_category[LP_CAT_COUNT]; /* indexed by lp_category */
    gp_diff_row *keys;
    size_t n_keys; /* (category, op, module), delta desc */
    gp_diff_row *ops;
    size_t n_ops; /* (op, module), held desc then delta desc */
    gp_diff_row *modules;
    size_t n_modules; /* module, held desc then delta desc */
    /* call sites (gp_site_key): first the n_call_sites_changed rows that changed or hold
     * something (delta, held or saved bytes), held desc then delta desc, their labels distinct;
     * then the rest, rows that both runs hold alike (most of a PyTorch program's 10^5), in no
     * order and with labels that may repeat: no table shows them one by one */
    gp_diff_row *call_sites;
    size_t n_call_sites, n_call_sites_changed;
    gp_diff_row *layers;
    size_t n_layers; /* module paths in model order: by when A first entered their regions (a
                        parent before its children), then B-only ones, then those without a
                        region in tree order (numeric path segments as numbers), "" last */
    gp_diff_remainder remainder;
    char **owned_strings; /* the strings composed for the rows and runs, freed with the diff */
    size_t n_owned_strings, cap_owned_strings;
} gp_diff;

/* Computes the diff of A and B from their alignment `al` (gp_align_finish done: A loaded with
 * gp_align_observer(al, 0), B with (al, 1)); `a_path`/`b_path` are the names to print (NULL = the
 * profiles' paths). Returns 0, or -1 with a message in err (out of memory). The profiles are
 * borrowed and must outlive *out; al is only read. */
int gp_diff_compute(gp_profile *a, gp_profile *b, const gp_align *al, const char *a_path,
                    const char *b_path, gp_diff **out, char *err, size_t err_size);

/* Loads A and B with `opts` (its observer is replaced; B is loaded without_sites), aligns and
 * diffs them; B's file is read and checked (gp_trace_scan) on a thread of its own while A loads.
 * Returns 0, or -1 with a message naming the file in err (A's first when both fail); on success
 * the caller owns *a, *b and *out. */
int gp_diff_load(const char *a_path, const char *b_path, const gp_analysis_options *opts,
                 gp_profile **a, gp_profile **b, gp_diff **out, char *err, size_t err_size);
void gp_diff_free(gp_diff *d);

/* False when no call site of either run has a stack (traces recorded without stacks, as Python
 * is by default): the call-site table is then one GP_NO_STACK row, which the reports replace by
 * a line that says so. */
bool gp_diff_has_stacks(const gp_diff *d);

#endif /* GRADPROF_TOOLS_DIFF_H */
