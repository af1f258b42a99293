/*
 * The allocations alloc_known.c (and alloc_wrapped.c, the same program linked with ld --wrap)
 * makes, shared with test_preload.c. Sizes are distinctive so that the test can tell the program's
 * own allocations from the dynamic loader's and libc's.
 */
#ifndef GRADPROF_TESTS_ALLOC_KNOWN_H
#define GRADPROF_TESTS_ALLOC_KNOWN_H

/* malloc, realloc and posix_memalign of SIZE_MAX / 2 fail: each leaves a note, no allocation */
#define AK_FAILED_COUNT 3
#define AK_MALLOC_SIZE 777 /* malloc, AK_MALLOC_COUNT times */
#define AK_MALLOC_COUNT 7
#define AK_BIG_SIZE 1234567 /* malloc, once: above the mmap threshold */
#define AK_CALLOC_N 13      /* calloc(13, 31), AK_CALLOC_COUNT times */
#define AK_CALLOC_SIZE 31
#define AK_CALLOC_COUNT 3
#define AK_REALLOC_FIRST 501        /* realloc(NULL, 501) */
#define AK_REALLOC_GROW 50003       /* realloc(p, 50003): grows */
#define AK_REALLOC_SHRINK 203       /* realloc(p, 203): shrinks; then realloc(p, 0) frees */
#define AK_REALLOC_KEEP 919         /* malloc(919); a failing realloc of it; then free */
#define AK_POSIX_MEMALIGN_SIZE 3001 /* posix_memalign(&p, 64, 3001) */
#define AK_POSIX_MEMALIGN_ALIGN 64
#define AK_ALIGNED_ALLOC_SIZE 2560 /* aligned_alloc(256, 2560) */
#define AK_ALIGNED_ALLOC_ALIGN 256
/* Not wrapped by libprof_wrap.a: only the preloaded program makes these. */
#define AK_MEMALIGN_SIZE 1111 /* memalign(128, 1111) */
#define AK_MEMALIGN_ALIGN 128
#define AK_VALLOC_SIZE 4097  /* valloc(4097) */
#define AK_PVALLOC_SIZE 3333 /* pvalloc(3333) */
#define AK_REALLOCARRAY_N1 7 /* reallocarray(NULL, 7, 113) = 791 bytes */
#define AK_REALLOCARRAY_N2 9 /* reallocarray(q, 9, 113) = 1017 bytes */
#define AK_REALLOCARRAY_SIZE 113
/* strdup of a string of AK_STRDUP_SIZE - 1 bytes: libc's own call to malloc. */
#define AK_STRDUP_SIZE 1313

#define AK_STDOUT "alloc_known: done\n"

#endif /* GRADPROF_TESTS_ALLOC_KNOWN_H */
