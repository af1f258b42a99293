/* fsize_limit.c: a program that lowers its own file size limit, then allocates from two threads.
 * Shared with test_preload.c. */
#ifndef GRADPROF_TESTS_FSIZE_LIMIT_H
#define GRADPROF_TESTS_FSIZE_LIMIT_H

#define FL_LIMIT 262144 /* RLIMIT_FSIZE, bytes: a few of the recorder's chunks */
#define FL_SIZE 7001    /* malloc/free pairs, FL_COUNT on each of the two threads */
#define FL_COUNT 200000
#define FL_STDOUT "fsize_limit: done\n"

#endif /* GRADPROF_TESTS_FSIZE_LIMIT_H */
