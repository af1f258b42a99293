/*
 * Alignment of two runs of one program (A usually grad on, B grad off), buffer by buffer.
 *
 * Twins. Every host allocation gets a twin key that survives across runs: a hash of its thread
 * (the dense index of the trace reader, i.e. the order threads first appeared), its size, the role
 * it was born with (category, op, module; for raw allocations what the frame rules say), its
 * innermost GP_ALIGN_STACK_FRAMES frames as module path + offset (ASLR-independent; none when the
 * trace has no stacks) and its scope (the innermost region open at its birth that is not a
 * grad-mode scope -- a module's forward, a user region -- with the number of regions of that name
 * entered before it, so an allocation one run makes and the other does not shifts occurrences
 * within that region only), plus the occurrence index of that key in its thread. Buffer n of key K in
 * A and buffer n of key K in B are twins. No address or stack id takes part. Leftovers -- a buffer
 * live at A's peak with no twin, and a buffer live in B at the corresponding instant with no twin
 * anywhere in A -- are then paired by a loose key, the same with only the innermost
 * GP_ALIGN_LOOSE_FRAMES frames, in birth order: the same code reached from another caller (a
 * table resized at another moment). Graph memory that only A makes has no loose twin either.
 *
 * The instants. A's instant is its host peak (the allocation that first reached it). B's
 * corresponding instant is right after B made the twin of the newest buffer live at A's peak that
 * has a twin in B: the allocations just before A's peak, made by B.
 *
 * Every buffer live at A's peak (the A side of the union) is one of
 *   PAIRED    its twin is live in B at the corresponding instant: the two cancel;
 *   FREED     its twin was freed by B before that instant: held by graph construction;
 *   NO_TWIN   B has no twin (graph nodes, copies autograd makes): held by graph construction;
 *   LATER     B had not made its twin yet at that instant: unaligned;
 * and every buffer live in B at that instant without a twin live at A's peak is B_MORE. So
 *   A's peak - B's live bytes at the instant = held - b_more + unaligned, exactly.
 *
 * Saved inferred. A buffer live at A's peak is memory autograd kept for backward, found without
 * tags, when it is tagged SAVED (at the peak, or later in its life: a tensor saved by the op that
 * follows the peak), or when it has no twin, or when B frees its twin sooner: before B
 * made the twin of some allocation that A made before it freed the buffer (A's allocations after
 * its peak are sampled as such anchors, at most GP_ALIGN_ANCHORS of them, evenly). Only tensor
 * memory (activation, saved or temporary, by tag or frame rule) counts: parameters, inputs,
 * gradients, graph nodes and raw memory nothing classified are never saved.
 *
 * Use: gp_align_new; load A with gp_align_observer(al, 0) in gp_analysis_options.observer, then B
 * with gp_align_observer(al, 1); gp_align_finish; read buffers[]. Only host memory is aligned.
 * Ownership: the gp_align owns its buffers; strings in them belong to the profiles they came from
 * (`side` says which), which must outlive their use. gp_align_free(NULL) is a no-op.
 */
#ifndef GRADPROF_TOOLS_ALIGN_H
#define GRADPROF_TOOLS_ALIGN_H

#include <stdbool.h>
#include <stdint.h>

#include "analysis.h"

#define GP_ALIGN_STACK_FRAMES 8 /* innermost frames in the twin key */
#define GP_ALIGN_LOOSE_FRAMES 2 /* innermost frames in the loose key (leftovers) */
#define GP_ALIGN_ANCHORS 65536  /* post-peak anchors sampled from A */

typedef enum gp_twin_state {
    GP_TWIN_PAIRED,  /* A: the twin is live in B at the instant */
    GP_TWIN_FREED,   /* A: B freed the twin before the instant (held) */
    GP_TWIN_NONE,    /* A: no twin in B (held) */
    GP_TWIN_LATER,   /* A: B makes the twin after the instant (unaligned) */
    GP_TWIN_B_MORE,  /* B: live at the instant, its twin is not live at A's peak */
} gp_twin_state;

/* One buffer of the union: live at A's peak (side 0) or a B_MORE buffer of B (side 1). */
typedef struct gp_aligned {
    gp_twin_state state;
    int side;              /* whose labels and stack: 0 = A (at its peak), 1 = B (at the instant) */
    lp_category category;
    const char *op, *module; /* interned by that side's profile */
    uint32_t stack;        /* that side's stack id */
    uint64_t size;
    bool saved_inferred;
    /* Lifetimes, for FREED buffers: from allocation to free, in ns and in allocations made in
     * between; A's runs to the end of the trace when A never freed it (a_freed false). */
    uint64_t a_life_ns, b_life_ns, a_life_allocs, b_life_allocs;
    bool a_freed;
} gp_aligned;

typedef struct gp_align {
    gp_aligned *buffers;
    size_t n_buffers;
    /* the instants */
    uint64_t a_peak_seq, a_peak_time_ns; /* A's host peak allocation (birth number) and time */
    uint64_t b_seq, b_time_ns;           /* B's instant: right after its allocation b_seq */
    bool b_found;                        /* false: no buffer live at A's peak has a twin in B */
    /* sums over buffers[] */
    uint64_t a_bytes;     /* live at A's peak (host) */
    uint64_t b_bytes;     /* live in B at the instant (host) */
    uint64_t held_bytes, b_more_bytes, unaligned_bytes, saved_inferred_bytes, paired_bytes;
    uint64_t loose_bytes; /* bytes live at A's peak whose twin only the loose key found */
    uint64_t a_allocs, b_allocs; /* allocations each run made */
    struct gp__align_internal *internal;
} gp_align;

gp_align *gp_align_new(void); /* NULL when out of memory */
void gp_align_free(gp_align *al);

/* The observer to load run `which` (0 = A, first; 1 = B, after A) with. Borrowed from al. */
const gp_replay_observer *gp_align_observer(gp_align *al, int which);

/* Classifies the buffers once both runs are loaded and frees what only that needed (al's
 * observers are gone then). Returns 0, or -1 when out of memory (during either load or now). */
int gp_align_finish(gp_align *al);

#endif /* GRADPROF_TOOLS_ALIGN_H */
