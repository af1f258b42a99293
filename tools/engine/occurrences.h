/*
 * Occurrence counts of one run, for the twins of the diff's alignment (align.h): how many buffers
 * of each kind the run has made in each instance of the kind's scope. A kind is a buffer's twin
 * identity without the instance (its thread, size, role, innermost frames and scope's name, as a
 * hash); the instance is the scope's ordinal (how many regions of that name were entered before
 * it). An unscoped kind (no region open) has one instance, ordinal 0.
 *
 * Memory is bounded by the kinds, not by the instances: a kind keeps the count of its latest
 * instance, and those of the instances before it as runs (instances first, first + step, ...,
 * last, one count each), so a loop that makes the same buffers in every iteration adds nothing.
 * A kind's instances arrive in increasing order (the kind names its thread and its scope's name)
 * except where regions of one name nest on a thread; an instance before the kind's latest is
 * counted on by itself, exactly.
 *
 * A zeroed gp_occurrences is empty; gp_occurrences_free releases it.
 */
#ifndef GRADPROF_TOOLS_OCCURRENCES_H
#define GRADPROF_TOOLS_OCCURRENCES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* u64 key -> u64 value in 16-byte slots (value 0 marks an empty slot), linear probing. */
typedef struct gp_u64map {
    struct gp_u64slot {
        uint64_t key, val;
    } * slots;
    size_t cap, len;
} gp_u64map;

typedef struct gp_occurrences {
    gp_u64map kinds; /* kind -> count (unscoped), or a flag | index into scoped[] */
    struct gp_scoped_kind *scoped;
    size_t n_scoped, cap_scoped;
    struct gp_count_run *runs;
    size_t n_runs, cap_runs;
    gp_u64map back; /* gp_instance_key -> count, for instances counted out of order */
} gp_occurrences;

/* A key for a kind in one instance of its scope (the strict twin key of align.h). */
uint64_t gp_instance_key(uint64_t kind, uint64_t ordinal);

/* Counts a new buffer of `kind` in instance `ordinal` (0 when !scoped) and returns its occurrence
 * index there: 0 for the first. A kind is scoped or not for good. Sets *oom when out of memory
 * (the count may then be wrong). */
uint64_t gp_occurrence_next(gp_occurrences *o, uint64_t kind, bool scoped, uint64_t ordinal,
                            bool *oom);

/* How many buffers of `kind` were counted in instance `ordinal` (0 when unscoped). */
uint64_t gp_occurrence_count(const gp_occurrences *o, uint64_t kind, uint64_t ordinal);

void gp_occurrences_free(gp_occurrences *o);

#endif /* GRADPROF_TOOLS_OCCURRENCES_H */
