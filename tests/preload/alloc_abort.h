/* alloc_abort.c's allocations, shared with test_preload.c. */
#ifndef GRADPROF_TESTS_ALLOC_ABORT_H
#define GRADPROF_TESTS_ALLOC_ABORT_H

#define AB_EARLY 7001 /* allocated AB_EARLY_COUNT times, long before the abort */
#define AB_EARLY_COUNT 3
#define AB_LATE 7002 /* allocated AB_LATE_COUNT times just before the abort */
#define AB_LATE_COUNT 2
#define AB_SLEEP_MS 400 /* between the two: many flush intervals (the test sets 20 ms) */

#define AB_STDOUT "alloc_abort: aborting\n"

#endif /* GRADPROF_TESTS_ALLOC_ABORT_H */
