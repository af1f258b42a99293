/*
 * The gradient-leak detectors (DESIGN.md "Detectors"; the finding kinds are gp_finding_kind in
 * analysis.h), internal to the engine. The replay (analysis.c) owns one gp__detectors per load
 * and feeds it through the hooks below, in event order, with the facts each detector judges: the
 * detectors see no engine state, and read the profile only through its public fields. At the end
 * gp__detectors_finish runs the growth detector and hands every finding to the profile.
 *
 * Findings are one per (kind, region), made the first time a hook reports one, with
 * first_time_ns = that hook's `now`; their items are one per (category, op, module), with the
 * stack of the first buffer of it. Strings passed in are borrowed: they must live as long as the
 * profile (the profile's interned strings do).
 *
 * Out of memory: a hook that cannot record sets the engine's flag (`oom` of gp__detectors_new)
 * and returns; the engine then fails the load.
 */
#ifndef GRADPROF_TOOLS_DETECTORS_H
#define GRADPROF_TOOLS_DETECTORS_H

#include <stdbool.h>
#include <stdint.h>

#include "analysis.h"

typedef struct gp__detectors gp__detectors;

/* New detectors with the growth detector's threshold (gp_analysis_options.growth_threshold).
 * `oom` is the engine's out-of-memory flag, which the hooks set (never clear); it must outlive
 * the detectors. NULL when out of memory. */
gp__detectors *gp__detectors_new(uint64_t growth_threshold, bool *oom);

/* Frees the detectors and the findings not handed to a profile. NULL is a no-op. */
void gp__detectors_free(gp__detectors *d);

/* The grad context of a buffer's thread when the buffer entered a graph category. */
typedef struct gp__grad_context {
    int grad_off_depth; /* open grad-off scopes (no_grad, inference_mode) */
    int grad_on_depth;  /* open scopes that turn grad back on (enable_grad, inference_mode off) */
    int backward_depth; /* open backward passes */
    bool mode_off;      /* the thread's last grad-mode event turned grad off */
    bool event_grad;    /* the event's own grad-enabled flag */
    const char *inference_region; /* the innermost open inference region, NULL if none */
    uint32_t thread;              /* the buffer's thread (dense index) */
    uint32_t grad_off_elsewhere;  /* another thread with grad off (a grad-off scope, or turned
                                   * off) while this one has it on, or 0 */
} gp__grad_context;

/*
 * A buffer of `size` bytes (birth number `seq`) entered graph category `cat` (lp_category_is_graph:
 * allocated so, or tagged or retagged into it), made at call stack `stack` under tag (op, module),
 * in context c: graph_without_grad inside a grad-off scope (not inside enable_grad or backward);
 * forgot_no_grad for a graph built (SAVED, AUTOGRAD) with grad on inside an inference region
 * (noting the first grad_off_elsewhere: gp_finding.grad_off_thread);
 * param_grad_in_inference for a GRADIENT inside an inference region (not inside backward).
 * Returns true when it counted the buffer in forgot_no_grad: the engine then calls
 * gp__detect_graph_left when the buffer leaves that category.
 */
bool gp__detect_graph_buffer(gp__detectors *d, const gp__grad_context *c, lp_category cat,
                             const char *op, const char *module, uint32_t stack, uint64_t size,
                             uint64_t seq, uint64_t now);

/*
 * A buffer of a graph category (birth number seq; `counted`: gp__detect_graph_buffer returned true
 * for it) left that category: freed or retagged. When that happened while a backward pass ran
 * (in_backward), the graph was built for it, not forgotten (input gradients of a model in eval
 * mode, a saliency map, a training step in eval mode): a counted buffer is taken out of its
 * forgot_no_grad finding (a finding left empty is dropped), and one born before the last mark
 * counts as graph memory kept across that mark for a backward pass (the growth detector's
 * exception: a policy gradient's episode). Otherwise a counted buffer stays counted.
 */
void gp__detect_graph_left(gp__detectors *d, uint64_t seq, uint64_t size, bool counted,
                           bool in_backward);

/*
 * An instance of inference region `region` that ended two entries of it ago (on its thread) still
 * holds `saved` > 0 bytes saved for backward: outputs left the region attached to a graph that
 * something keeps (graph_escapes_inference; an output kept only until the next entry replaces it
 * is not an escape, which is why the engine asks one entry later). Returns true when the finding
 * wants the buffers listed (its first 64): the engine then calls gp__detect_escape_item once per
 * live buffer of that instance that is saved for backward; false when it counted `saved` itself.
 */
bool gp__detect_escape(gp__detectors *d, const char *region, uint64_t saved, uint64_t now);
void gp__detect_escape_item(gp__detectors *d, const char *region, lp_category cat, const char *op,
                            const char *module, uint32_t stack, uint64_t size, uint64_t now);

/* Bytes saved for backward inside an escaped instance of `region` came (delta > 0: the escape
 * itself, or a buffer of it retagged saved) or went (a free, a retag): the finding keeps the most
 * alive at once (gp_finding.peak_bytes). */
void gp__detect_escape_live(gp__detectors *d, const char *region, int64_t delta, uint64_t now);

/* A mark was appended to p->iterations: the growth detector notes each graph tag key's live
 * bytes there. */
void gp__detect_mark(gp__detectors *d, const gp_profile *p);

/* An autograd_error note of the PyTorch helper, its fields f = kind, message, op, module, where:
 * the autograd_error finding, one item per (op, module); the first error's kind, message and
 * where are the finding's. */
void gp__detect_autograd_error(gp__detectors *d, const char *const f[5], uint64_t now);

/*
 * At the end of the replay, once p's tag keys have their top_site: runs the growth detector over
 * p->iterations, then hands every finding to p (p->findings, n_findings; ordered by kind, then
 * by first occurrence; items by bytes, largest first). Returns 0, or -1 when out of memory.
 */
int gp__detectors_finish(gp__detectors *d, gp_profile *p);

#endif /* GRADPROF_TOOLS_DETECTORS_H */
