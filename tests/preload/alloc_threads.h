/* alloc_threads.c: AT_THREADS threads, thread t making AT_PAIRS malloc/free pairs of
 * AT_SIZE(t) bytes. Shared with test_preload.c. */
#ifndef GRADPROF_TESTS_ALLOC_THREADS_H
#define GRADPROF_TESTS_ALLOC_THREADS_H

#define AT_THREADS 16
#define AT_PAIRS 100000
#define AT_SIZE(t) (3001 + 8 * (t)) /* 3001, 3009, ..., 3121 */

#define AT_STDOUT "alloc_threads: done\n"

#endif /* GRADPROF_TESTS_ALLOC_THREADS_H */
