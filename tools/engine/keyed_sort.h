/*
 * The tools' sort of (key, index) pairs by a 64-bit key: an LSD radix sort, 8 bits a pass, that
 * reads the keys once for all eight digit counts and skips every pass where all keys share the
 * digit (keys below 2^24 take three passes). Stable: pairs with equal keys keep their order.
 * For the large sorts of the analysers (hundreds of thousands of buffers or sites by birth
 * number or by measure), where qsort's calls through a comparator cost the most.
 */
#ifndef GRADPROF_TOOLS_KEYED_SORT_H
#define GRADPROF_TOOLS_KEYED_SORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct gp_keyed {
    uint64_t key;
    uint64_t index; /* the caller's: what the key belongs to */
} gp_keyed;

/* Sorts v[0..n) by key, ascending, using tmp (room for n pairs) as scratch. Returns whichever
 * of v and tmp holds the result. */
gp_keyed *gp__sort_keyed(gp_keyed *v, gp_keyed *tmp, size_t n);

#endif /* GRADPROF_TOOLS_KEYED_SORT_H */
