/* What cancel_alloc.c does, shared with test_preload.c. */
#ifndef GRADPROF_TESTS_CANCEL_ALLOC_H
#define GRADPROF_TESTS_CANCEL_ALLOC_H

#define CA_THREADS 200    /* threads started and cancelled */
#define CA_AT_ONCE 4      /* how many run at a time */
#define CA_SIZE 5309      /* every block the threads allocate */
#define CA_BATCH 200      /* malloc/free pairs between two sleeps (cancellation points) */
#define CA_NAP_US 50
#define CA_MAIN_SIZE 5311 /* the main thread's own pairs, after the cancels */
#define CA_MAIN 100

/* stdout: "cancel_alloc: allocs A frees F cancelled C\n" with the threads' counts. */

#endif /* GRADPROF_TESTS_CANCEL_ALLOC_H */
