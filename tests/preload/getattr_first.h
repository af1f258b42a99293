/* What getattr_first.c does, shared with test_preload.c. */
#ifndef GRADPROF_TESTS_GETATTR_FIRST_H
#define GRADPROF_TESTS_GETATTR_FIRST_H
#define GA_THREADS 16 /* threads whose first allocation is glibc's, inside pthread_getattr_np */
#define GA_SIZE 4409  /* then each mallocs and frees one block of this size */
#define GA_STDOUT "getattr_first: done\n"
#endif /* GRADPROF_TESTS_GETATTR_FIRST_H */
