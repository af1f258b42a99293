/*
 * gp_samples: a profile's allocations as heap-profile samples, for the pprof export. One sample
 * per (call stack, device, category, op, module, grad mode) with four values, as Go's heap
 * profiles have them:
 *   alloc_objects, alloc_space   allocations made (and their bytes), each under its first role
 *                                (a raw allocation's first tag replaces what the frame rules
 *                                said, as the engine counts sites and tag keys)
 *   inuse_objects, inuse_space   buffers (and bytes) live at the device's peak instant, under
 *                                the role they had then
 * so that the host samples' inuse_space sums to the host peak and their alloc_space to the
 * bytes allocated on the host, as the engine's own tables do.
 *
 * The grad mode of a buffer is that of its latest tag (the tensor library and the PyTorch helper
 * say it), else that of its thread when it was allocated (the trace's GRAD_MODE records): "on",
 * "off", or "" when the trace could not be followed (then every sample says "").
 *
 * Collected while the engine replays the trace (gp_samples_load: a replay observer, analysis.h),
 * after a pass over the same file that notes each allocation's grad mode (8 bytes per ALLOC or
 * TAG event; its reader is closed before the replay). Memory besides: one entry per live buffer
 * and per sample key.
 */
#ifndef GRADPROF_TOOLS_SAMPLES_H
#define GRADPROF_TOOLS_SAMPLES_H

#include <stddef.h>
#include <stdint.h>

#include "analysis.h"

typedef struct gp_sample {
    uint32_t stack; /* global stack id, 0 = none */
    int32_t device;
    lp_category category;
    const char *op, *module; /* interned by the profile, "" if none */
    const char *grad;        /* "on", "off" or "" (not known) */
    uint64_t alloc_objects, alloc_space;
    uint64_t inuse_objects, inuse_space; /* at the device's peak */
} gp_sample;

typedef struct gp_samples {
    gp_sample *items; /* in the order their keys first appeared in the replay */
    size_t n;
    struct gp__samples_state *state;
} gp_samples;

/*
 * Replays the trace at `path` as gp_profile_load does (opts as there; opts->observer must be
 * NULL) and collects its samples. Returns 0 with *p and *s set (free both), or -1 with a message
 * naming the file in err.
 */
int gp_samples_load(const char *path, const gp_analysis_options *opts, gp_profile **p,
                    gp_samples **s, char *err, size_t err_size);
void gp_samples_free(gp_samples *s); /* NULL is a no-op */

/*
 * The symbolized frames of a call stack, innermost first, without the allocator's and libprof's
 * innermost frames (the frames gp_site_frames names), each with its module id and offset. Returns
 * the count written (<= max). The symbols belong to the profile's symbolizer.
 */
size_t gp_stack_symbols(gp_profile *p, uint32_t stack, const gp_symbol **syms, uint32_t *modules,
                        uint64_t *offsets, size_t max);

#endif /* GRADPROF_TOOLS_SAMPLES_H */
