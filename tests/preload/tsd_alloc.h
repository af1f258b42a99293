/* The allocations tsd_alloc.c makes, shared with test_preload.c. */
#ifndef GRADPROF_TESTS_TSD_ALLOC_H
#define GRADPROF_TESTS_TSD_ALLOC_H

#define TD_THREADS 100
#define TD_BODY_SIZE 3001   /* each thread: malloc'd in its body, the value of key 1 */
#define TD_DTOR_SIZE 3002   /* key 1's destructor: frees the value, then malloc/free of this */
#define TD_MAIN_SIZE 3003   /* the main thread: TD_MAIN blocks, never freed */
#define TD_MAIN 2
#define TD_ROUND2_SIZE 3004 /* key 2's destructor, first round: a new value of this size (so a
                               second round runs); second round: frees it */
/* In all: 2 * TD_THREADS + TD_MAIN allocations (202) and 2 * TD_THREADS frees (200) of the first
 * three sizes, TD_THREADS of each for TD_ROUND2_SIZE, and not one free of an unknown block. */

#define TD_STDOUT "tsd_alloc: done\n"

#endif /* GRADPROF_TESTS_TSD_ALLOC_H */
