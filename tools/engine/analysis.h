/*
 * The replay engine: reads a trace once, in event order, and builds a gp_profile — peak and when,
 * live-at-peak by category / device / tag key / call site / module, totals, leaks, temporaries,
 * regions, iterations (marks), the tensors saved for backward, a memory timeline, and the
 * gradient-leak findings. Memory is bounded by live allocations, distinct keys and sites, and the
 * timeline's fixed number of buckets, never by the event count. The findings are made by the
 * detectors (detectors.c), which the replay feeds through internal hooks (detectors.h).
 *
 * Definitions (the README's "Reading a report" says the same for users):
 * - live bytes: allocated and not yet freed, per device. The peak is the host's (device -1) unless
 *   the trace holds only device memory; every device has its own peak in `devices`.
 * - live at peak: what was live at the instant of the device's peak. Every allocation belongs to
 *   exactly one category, one tag key and one site, so each table sums to the peak.
 * - tag key: (category, op, module) of a tagged buffer; untagged raw allocations have category
 *   OTHER (or the one a frame rule gives) and op/module "".
 * - site: the allocation's call stack (global stack id; 0 = no stack). Symbolic site labels for
 *   diffing across runs come from gp_site_label().
 * - temporary: an allocation freed before its thread made any other allocation (heaptrack's
 *   definition).
 * - leak: live when the trace ends.
 * - iteration: the span between two marks; live bytes are sampled at each mark.
 */
#ifndef GRADPROF_TOOLS_ANALYSIS_H
#define GRADPROF_TOOLS_ANALYSIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gradprof/trace.h"
#include "symbolize.h"

/* Counters of one key (a category, a tag key, a site, a module path). */
typedef struct gp_stats {
    uint64_t count;          /* allocations made (or retagged into this key) */
    uint64_t total_bytes;    /* bytes of those */
    uint64_t frees;          /* frees (or retags out of this key) */
    uint64_t live_bytes;     /* live now (after replay: at the end of the trace) */
    uint64_t live_count;
    uint64_t peak_bytes;     /* live at the device's peak instant */
    uint64_t max_live_bytes; /* the largest this key's own live bytes ever were */
    uint64_t temporaries;    /* allocations freed before the thread's next allocation */
    uint64_t snap_epoch;     /* engine-internal (lazy live-at-peak snapshots) */
} gp_stats;

typedef struct gp_tag_key {
    lp_category category;
    const char *op;     /* interned, "" if none */
    const char *module; /* interned, "" if none */
    int32_t device;
    gp_stats stats;
    /* The site (index in p->sites) where most of the key's bytes entered it, allocated there or
     * retagged into the key (stats.total_bytes, by site; ties to the lower index): the call
     * stack to show for the key. UINT32_MAX when the key has no bytes. */
    uint32_t top_site;
} gp_tag_key;

/* A call site: one per (stack, device). 80 bytes: there is one per distinct stack, hundreds of
 * thousands in a PyTorch program, so what is not a counter is asked of the profile
 * (gp_site_category, gp_site_device, gp_site_op, gp_site_module). */
typedef struct gp_site {
    uint32_t stack;   /* global stack id from the trace; 0 = no stack */
    uint32_t tag_key; /* index in p->tag_keys: the last tag with an op or a module its buffers
                       * carried, else its first buffer's (for a site of an untagged buffer: op
                       * and module ""); any of them has the site's device */
    gp_stats stats;
} gp_site;

typedef struct gp_module_stats {
    const char *module; /* module path ("encoder.0.fc1"), "" = outside any module */
    int32_t device;
    gp_stats stats;
    gp_stats by_category[LP_CAT_COUNT];
} gp_module_stats;

/* A tensor saved for backward: SAVED retags aggregated by (module, op, detail). A tag's detail is
 * the shape, then optionally " at " and where the program was when it was saved (the PyTorch
 * helper: "model.py:88 (forward) < eval.py:36 (main)"): `shape` and `where` ("" if none). */
typedef struct gp_saved_tensor {
    const char *module, *op, *shape, *where;
    int32_t device;
    /* stats.count: times saved; total_bytes: bytes saved over the run; peak_bytes: of these live
     * at the device's peak; live_bytes: still saved at the end */
    gp_stats stats;
} gp_saved_tensor;

typedef struct gp_region_stats {
    const char *name;
    uint64_t entries;          /* times entered (all threads) */
    uint64_t first_entry_ns;   /* when it was first entered: a model's modules in call order */
    uint64_t allocated_bytes;  /* allocated while it was the innermost... or any enclosing region */
    uint64_t max_live_bytes;   /* the device total's maximum while inside it */
    uint64_t retained_bytes;   /* the most bytes, at one exit, allocated inside and still live */
    uint64_t graph_bytes;      /* SAVED + AUTOGRAD + GRADIENT allocated inside */
    /* bytes that entered each category inside it: allocated there, or tagged/retagged into it
     * there (a buffer allocated raw and tagged counts under both OTHER and its tag) */
    uint64_t allocated_by_category[LP_CAT_COUNT];
} gp_region_stats;

typedef struct gp_iteration {
    const char *mark;   /* the mark that starts it */
    uint64_t time_ns;
    uint64_t live_bytes; /* host live total at the mark */
    uint64_t live_by_category[LP_CAT_COUNT];
} gp_iteration;

/* One sample of the timeline: live bytes per category at the end of a time bucket, and the
 * maximum of the total within it (so no peak is lost between samples). */
typedef struct gp_timeline_point {
    uint64_t time_ns;
    uint64_t live_total;
    uint64_t max_total;
    uint64_t live_by_category[LP_CAT_COUNT];
} gp_timeline_point;

typedef struct gp_region_span { /* a region instance on a thread, for the timeline */
    const char *name;
    uint32_t thread;
    uint32_t depth;
    uint64_t begin_ns, end_ns;
} gp_region_span;

/* A timed note (lp_note): a fact a tagging source learned about no one buffer. */
typedef struct gp_note {
    uint64_t time_ns;
    uint32_t thread;
    const char *key, *value; /* owned by the trace (p->trace) */
} gp_note;
#define GP_MAX_NOTES 10000
#define GP_MAX_SPANS 10000

typedef enum gp_finding_kind {
    GP_FIND_GRAPH_WITHOUT_GRAD,  /* graph memory allocated where grad should be off */
    GP_FIND_FORGOT_NO_GRAD,      /* grad on inside a region marked as inference */
    GP_FIND_GROWTH,              /* live memory grows across marked iterations */
    GP_FIND_PARAM_GRAD_IN_INFERENCE, /* parameter gradients allocated during inference */
    GP_FIND_GRAPH_ESCAPES,       /* outputs leave the inference region attached to a graph */
    GP_FIND_AUTOGRAD_ERROR,      /* autograd raised (note "autograd_error" of the PyTorch helper) */
    GP_FIND_KIND_COUNT
} gp_finding_kind;

/* "graph_without_grad", "forgot_no_grad", "growth_across_iterations", ... */
const char *gp_finding_kind_name(gp_finding_kind k);

typedef struct gp_finding_item { /* an op/module/site behind a finding */
    lp_category category;
    const char *op, *module;
    uint32_t stack;
    uint64_t bytes;
    uint64_t count;
} gp_finding_item;

/* Findings are one per (kind, region): the same detector firing in two regions gives two. */
typedef struct gp_finding {
    gp_finding_kind kind;
    const char *region;   /* the region it happened in, "" if none */
    uint64_t bytes;       /* bytes involved (allocated, retained or grown) */
    uint64_t count;
    uint64_t first_time_ns;
    gp_finding_item *items; /* sorted by bytes, largest first */
    size_t n_items;
    /* autograd_error: its kind ("inplace": a tensor saved for backward changed in place;
     * "inference_tensor": an inference_mode tensor saved for backward), the error's first line
     * and where the program was ("" for other kinds); strings owned by the trace */
    const char *error_kind, *message, *where;
    /* forgot_no_grad: grad mode is per thread. A thread (the trace's dense thread index) that
     * had grad off (no_grad, inference_mode, set_grad_enabled(False)) while thread built_thread,
     * with grad on, built part of this graph (a worker that a thread with grad off started:
     * threads do not inherit it); 0 and 0 when no graph of the finding was built so */
    uint32_t grad_off_thread, built_thread;
    /* graph_escapes_inference and forgot_no_grad: the most of its saved-for-backward bytes
     * alive at one time (bytes adds up every buffer once, over the whole run); 0 for others */
    uint64_t peak_bytes;
    /* growth_across_iterations: the iterations (1-based marks) its bytes grew between */
    uint32_t grew_from, grew_to;
} gp_finding;

/* A holder the model's calls take back with its graph (an RNN's state passed back in, a
 * key/value cache not detached): each call's graph then reaches all the earlier ones. */
#define GP_HOLDER_CARRIED "carried"

/* A name that kept graphs alive, as the PyTorch helper found it (note "holder"): a variable of
 * the program, a module's attribute or the items of a container, holding tensors whose graphs
 * are alive. Strings owned by the profile. */
typedef struct gp_holder {
    const char *name;      /* "total_loss", "Decoder.blocks.0.attn.k_cache", "embeddings" */
    const char *kind;      /* "local", "global", "attribute", GP_HOLDER_CARRIED */
    const char *where;     /* the program's lines that store it or put into it: "eval.py:36" */
    const char *container; /* "list", "dict", ... when it holds several tensors; "" for one */
    const char *grad_fn;   /* the first tensor's grad_fn: "AddBackward0" */
    uint64_t tensors;      /* tensors with a graph it holds */
    uint64_t nodes;        /* graph nodes reachable from them (bounded walk) */
    uint64_t time_ns;      /* when the helper looked */
} gp_holder;

/* An allocation that failed (out of memory), as the recorder noted it (LP_NOTE_ALLOC_FAILED). */
typedef struct gp_failed_alloc {
    uint64_t size; /* bytes asked */
    uint64_t time_ns;
    uint32_t thread;      /* dense thread index */
    uint64_t live_bytes;  /* host bytes live then */
    uint64_t graph_bytes; /* of them graph memory (saved, autograd, gradient) */
    const char *region;   /* the innermost region open on its thread then (a module's path under
                           * the PyTorch helper), "" if none; owned by the profile */
} gp_failed_alloc;

typedef struct gp_device_stats {
    int32_t device; /* LP_DEVICE_HOST or a CUDA ordinal */
    uint64_t peak_bytes, peak_time_ns;
    uint64_t live_bytes; /* at the end */
    uint64_t by_category_at_peak[LP_CAT_COUNT];
    uint64_t by_category_live[LP_CAT_COUNT]; /* at the end */
    uint64_t by_category_max[LP_CAT_COUNT];  /* each category's own maximum */
} gp_device_stats;

typedef struct gp_profile gp_profile;

/*
 * A replay observer sees every buffer event of the replay, in event order, after the engine has
 * applied it: the diff's alignment (align.h) is one. `seq` is the buffer's birth number (1, 2, ...
 * in allocation order, never reused); `allocs` is the number of allocations replayed so far (at an
 * allocation, its seq), so a free at allocs = n happened after the n-th allocation and before the
 * next.
 */
typedef struct gp_buffer_event {
    uint64_t seq;
    uint64_t allocs;
    uint64_t time_ns;
    uint32_t thread;
    int32_t device;
    uint64_t size;
    uint32_t stack;       /* the allocating stack (0 = none) */
    uint32_t site;        /* its site: an index in p->sites (the stack on the device) */
    lp_category category; /* the buffer's role now (after the event) */
    const char *op, *module; /* interned by the profile, "" if none */
    /* The innermost region open at its birth that is not a grad-mode scope (a module's forward,
     * a user region; "" if none), and how many regions of that name were entered before it: the
     * same in two runs of one program whatever their grad modes. */
    const char *scope;
    uint64_t scope_ordinal;
    bool first_tag;       /* retag: the buffer's first tag (a raw allocation getting its role) */
    /* The observer's own word for this buffer, kept by the engine from its birth to its free:
     * 0 at the alloc event, where the observer may set it; retag and free events see that value
     * (so the observer needs no table of its own from buffers to its records). */
    uint32_t *handle;
} gp_buffer_event;

typedef struct gp_replay_observer {
    void *ctx;
    void (*alloc)(void *ctx, gp_profile *p, const gp_buffer_event *b);
    void (*retag)(void *ctx, gp_profile *p, const gp_buffer_event *b);
    void (*free)(void *ctx, gp_profile *p, const gp_buffer_event *b);
    /* the device's live bytes reached a new peak with the allocation of buffer `seq` */
    void (*peak)(void *ctx, gp_profile *p, int32_t device, uint64_t seq);
} gp_replay_observer;

/* What the engine needs to know beyond the trace. */
typedef struct gp_analysis_options {
    /* Regions the program marked as inference (default {"inference"}): grad should be off there. */
    const char *const *inference_regions;
    size_t n_inference_regions;
    /* Buckets of the timeline (default 512). */
    size_t timeline_points;
    /* Growth detector: flag when the live total at the last mark exceeds the first by more than
     * this many bytes (default 64 KiB) and grew in at least 3/4 of the iterations (with >= 3). */
    uint64_t growth_threshold;
    /* Frame rules that classify untagged allocations (NULL = none; see rules.h). */
    const struct gp_rules *rules;
    /* Called for every buffer event (NULL = none); borrowed for the load. */
    const gp_replay_observer *observer;
    /* No per-site tables (p->sites empty, tag keys without a top site): the replay counts
     * nothing per site, for a caller that reads only totals, stacks and labels: the diff. */
    bool without_sites;
} gp_analysis_options;

void gp_analysis_options_default(gp_analysis_options *o);

struct gp_profile {
    /* the trace */
    gp_trace *trace; /* owned: closed by gp_profile_free */
    const char *path; /* a copy, owned by the profile */
    const gp_trace_info *info;

    /* totals over the run, all devices */
    uint64_t alloc_count, free_count, retag_count;
    uint64_t total_allocated_bytes;
    uint64_t duration_ns;
    /* the primary device (host, unless only device memory was recorded) */
    int32_t primary_device;
    uint64_t peak_bytes, peak_time_ns;
    uint64_t leaked_bytes, leaked_count; /* live at the end, all devices */
    uint64_t temporary_count;
    uint64_t unknown_frees; /* frees of addresses never seen allocated (before recording) */
    uint64_t failed_allocs; /* allocations that failed (out of memory) */
    gp_failed_alloc first_failed; /* the first of them, when failed_allocs > 0 */

    gp_device_stats *devices;
    size_t n_devices;
    gp_tag_key *tag_keys;
    size_t n_tag_keys;
    gp_site *sites;
    size_t n_sites;
    gp_module_stats *modules;
    size_t n_modules;
    gp_saved_tensor *saved;
    size_t n_saved;
    gp_region_stats *regions;
    size_t n_regions;
    gp_iteration *iterations;
    size_t n_iterations;
    gp_timeline_point *timeline; /* point i covers (time_ns - timeline_bucket_ns, time_ns] */
    size_t n_timeline;
    uint64_t timeline_bucket_ns;
    gp_region_span *spans; /* capped (the first GP_MAX_SPANS to end) */
    size_t n_spans;
    gp_finding *findings;
    size_t n_findings;
    gp_holder *holders; /* who kept graphs alive at the helper's look that found a carried
                         * holder, or else whose first holder kept the most graph nodes (the
                         * latest of equals); carried ones first, then the most nodes first */
    size_t n_holders;
    /* inference-region instances (eval calls, iterations) whose tensors saved for backward were
     * alive at the primary device's peak: "1 graph alive at the peak" */
    uint64_t graphs_at_peak;
    gp_note *notes; /* in time order, the first GP_MAX_NOTES */
    size_t n_notes;
    uint64_t notes_dropped; /* notes past the cap */

    gp_symbolizer *symbolizer; /* owned: the trace's modules, symbolized on demand */
    struct gp__profile_internal *internal;
};

/* Replays the trace at `path`. Returns 0, or -1 with a message naming the file in err (an
 * unreadable or empty trace). A damaged trace is not an error: p->info says what was lost. */
int gp_profile_load(const char *path, const gp_analysis_options *opts, gp_profile **out,
                    char *err, size_t err_size);
void gp_profile_free(gp_profile *p);

/* gp_profile_load with the symbolizer the profile is to use (NULL: a new one): e.g.
 * gp_symbolizer_share() of another profile's, so that two traces of one program open and resolve
 * their modules once; and with `trace`, the file at `path` opened already (perhaps scanned too:
 * gp_trace_scan), or NULL to open it here. The profile owns both from the call on, and frees them
 * with it even when the load fails. */
int gp__profile_load_with(const char *path, const gp_analysis_options *opts,
                          gp_symbolizer *symbolizer, gp_trace *trace, gp_profile **out, char *err,
                          size_t err_size);

/* The label and key of the site of memory allocated without a call stack. */
#define GP_NO_STACK "[no stack]"

/* A short human label for a site: the first frame outside the allocator and libprof, with its
 * file:line if known ("linear_forward (ops_linalg.c:210)"), or GP_NO_STACK. Owned by p. */
const char *gp_site_label(gp_profile *p, uint32_t stack);

/* Of a site of p->sites: its device; the category of the most bytes allocated there (the lowest
 * such, OTHER when OTHER has as many as any); the op and the module of the last tag its buffers
 * carried ("" if none had any; interned by p). */
int32_t gp_site_device(const gp_profile *p, const gp_site *s);
lp_category gp_site_category(const gp_profile *p, const gp_site *s);
const char *gp_site_op(const gp_profile *p, const gp_site *s);
const char *gp_site_module(const gp_profile *p, const gp_site *s);

/* The frames of a stack, innermost first, as "function (file:line)" strings owned by p, skipping
 * allocator/libprof frames. Returns the count written (<= max). */
size_t gp_site_frames(gp_profile *p, uint32_t stack, const char **frames, size_t max);

/* The Python frames of the program's own code on a stack (not torch's, not gradprof's), innermost
 * first, as "file.py:LINE (function)" strings owned by p. Returns the count written (<= max). */
size_t gp_site_program_frames(gp_profile *p, uint32_t stack, const char **frames, size_t max);

/* Bytes allocated at site `site` (an index in p->sites) in category c: the buffers born there,
 * each under its first role (a raw buffer's first tag replaces its frame-rule category). */
uint64_t gp_site_allocated(const gp_profile *p, size_t site, lp_category c);

/* gp_site_label of site `site` (an index in p->sites), kept by the profile after the first call:
 * for the renderers' orderings, which compare the labels of many sites. */
const char *gp__site_label_at(gp_profile *p, size_t site);

/* A key that identifies a site across runs (symbolized function names of up to 4 frames, joined
 * by ";"), owned by p. */
const char *gp_site_key(gp_profile *p, uint32_t stack);

/* Labels that tell the rows of one table apart: where two rows share a label (the same function
 * reached from different callers, or frames that could not be symbolized) but not a key (their
 * frames joined by ';', innermost first: gp_site_key, or more of them), out[i] is a new string
 * "LABEL via F", F the first frame of keys[i] that no neighbour with that label shares, by its
 * short name (gp_function_short_name), or where the neighbour's frame there has that short name
 * too (two overloads) by its signature (gp_function_signature), or where that is the same too
 * (two instances of a template) as symbolized; or "LABEL (outermost)" when keys[i] is another
 * key's start;
 * every other out[i] is NULL. The caller frees each out[i]. 0, or -1 when out of memory (all
 * NULL then). */
int gp_labels_distinct(const char *const *labels, const char *const *keys, size_t n, char **out);

/* The order of names where the tables break ties: runs of digits compare as numbers
 * ("encoder_layer_2" before "encoder_layer_10", "tensor.c:54" before "tensor.c:120"), the rest
 * byte by byte; names equal that way ("07", "7") by strcmp, so the order is total. */
int gp_natural_cmp(const char *a, const char *b);

/* Sorting helpers: return arrays of indexes (caller frees) ordered by the given measure. */
size_t *gp_sites_by(const gp_profile *p, const char *measure); /* "peak", "total", "count", "leaked" */
size_t *gp_tag_keys_by(const gp_profile *p, const char *measure);

#endif /* GRADPROF_TOOLS_ANALYSIS_H */
