/* What a trace's "clock" metadata says when one thread recorded for more than a few milliseconds
 * (libprof/recorder.c, lp__event_time): "monotonic+tsc" where the CPU has an invariant TSC and the
 * option is on, else "monotonic". For test_recorder and test_preload. */
#ifndef GRADPROF_TESTS_TSC_CLOCK_H
#define GRADPROF_TESTS_TSC_CLOCK_H

#include <stdbool.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

static inline const char *expected_clock(bool tsc_option)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (tsc_option && __get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000007u &&
        __get_cpuid(0x80000007u, &a, &b, &c, &d) && (d & (1u << 8)))
        return "monotonic+tsc";
#endif
    (void)tsc_option;
    return "monotonic";
}

#endif
