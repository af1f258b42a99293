/* The random numbers of the tests and stress programs: Marsaglia's xorshift64, the same sequence
 * for a seed on every machine, so that a failure replays. The seed must not be 0. */
#ifndef GRADPROF_TESTS_XORSHIFT_H
#define GRADPROF_TESTS_XORSHIFT_H

#include <stdint.h>

/* Advances *s and returns its new value. */
static inline uint64_t xorshift64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

#endif
