/* What realloc_race.c does, shared with test_preload.c. */
#ifndef GRADPROF_TESTS_REALLOC_RACE_H
#define GRADPROF_TESTS_REALLOC_RACE_H

#define RR_ROUNDS 200000 /* per thread */
#define RR_SMALL 40      /* thread 1: malloc(RR_SMALL), realloc to RR_BIG (moves), free */
#define RR_BIG 8000
#define RR_OTHER 40      /* thread 2: malloc/free pairs of the size thread 1 just gave back */

#define RR_STDOUT "realloc_race: done\n"

#endif /* GRADPROF_TESTS_REALLOC_RACE_H */
