/*
 * Makes exactly the allocations listed in alloc_known.h, frees each, prints AK_STDOUT and exits
 * with 0 (1 if the allocator misbehaved). Built twice: as alloc_known (run under LD_PRELOAD) and,
 * with AK_WRAPPED defined, as alloc_wrapped (linked with ld --wrap; the functions that are not
 * wrapped are left out). Knows nothing of gradprof.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_known.h"

static int failures;

/* Touches the block and hides it from the optimizer, so no allocation is elided. */
static void use(void *p, size_t n)
{
    if (p == NULL) {
        failures++;
        return;
    }
    memset(p, 0x5A, n);
    __asm__ volatile("" : : "r"(p) : "memory");
}

/* `p`, as a value the compiler cannot follow: a failed realloc leaves the block the caller's, which
 * -Wuse-after-free cannot know. */
static void *opaque(void *p)
{
    __asm__ volatile("" : "+r"(p));
    return p;
}

static void check_aligned(const void *p, uintptr_t align)
{
    if ((uintptr_t)p % align != 0)
        failures++;
}

int main(void)
{
    void *blocks[AK_MALLOC_COUNT];
    for (int i = 0; i < AK_MALLOC_COUNT; i++) {
        blocks[i] = malloc(AK_MALLOC_SIZE);
        use(blocks[i], AK_MALLOC_SIZE);
    }
    void *big = malloc(AK_BIG_SIZE);
    use(big, AK_BIG_SIZE);

    /* A failing malloc records only that it failed (a note with the size). */
    volatile size_t huge = SIZE_MAX / 2;
    if (malloc(huge) != NULL)
        failures++;

    void *zeroed[AK_CALLOC_COUNT];
    for (int i = 0; i < AK_CALLOC_COUNT; i++) {
        zeroed[i] = calloc(AK_CALLOC_N, AK_CALLOC_SIZE);
        for (int j = 0; zeroed[i] && j < AK_CALLOC_N * AK_CALLOC_SIZE; j++)
            failures += ((unsigned char *)zeroed[i])[j] != 0;
        use(zeroed[i], AK_CALLOC_N * AK_CALLOC_SIZE);
    }

    /* realloc: from NULL, grow, shrink, to 0. */
    char *r = realloc(NULL, AK_REALLOC_FIRST);
    use(r, AK_REALLOC_FIRST);
    r = realloc(r, AK_REALLOC_GROW);
    use(r, AK_REALLOC_GROW);
    r = realloc(r, AK_REALLOC_SHRINK);
    use(r, AK_REALLOC_SHRINK);
    r = realloc(r, 0); /* glibc: frees and returns NULL */
    free(r);

    /* A failing realloc records only that it failed and leaves the block the program's. */
    char *keep = malloc(AK_REALLOC_KEEP);
    use(keep, AK_REALLOC_KEEP);
    if (realloc(opaque(keep), huge) != NULL)
        failures++;
    failures += keep[AK_REALLOC_KEEP - 1] != 0x5A;
    free(keep);

    void *pm = NULL;
    if (posix_memalign(&pm, AK_POSIX_MEMALIGN_ALIGN, AK_POSIX_MEMALIGN_SIZE) != 0)
        failures++;
    use(pm, AK_POSIX_MEMALIGN_SIZE);
    check_aligned(pm, AK_POSIX_MEMALIGN_ALIGN);
    void *bad = NULL;
    if (posix_memalign(&bad, 3, 100) == 0) /* EINVAL: records nothing */
        failures++;
    if (posix_memalign(&bad, AK_POSIX_MEMALIGN_ALIGN, huge) == 0) /* ENOMEM: that it failed */
        failures++;

    void *aa = aligned_alloc(AK_ALIGNED_ALLOC_ALIGN, AK_ALIGNED_ALLOC_SIZE);
    use(aa, AK_ALIGNED_ALLOC_SIZE);
    check_aligned(aa, AK_ALIGNED_ALLOC_ALIGN);

#ifndef AK_WRAPPED
    void *ma = memalign(AK_MEMALIGN_ALIGN, AK_MEMALIGN_SIZE);
    use(ma, AK_MEMALIGN_SIZE);
    check_aligned(ma, AK_MEMALIGN_ALIGN);
    void *va = valloc(AK_VALLOC_SIZE);
    use(va, AK_VALLOC_SIZE);
    check_aligned(va, 4096);
    void *pv = pvalloc(AK_PVALLOC_SIZE);
    use(pv, AK_PVALLOC_SIZE);
    check_aligned(pv, 4096);
    if (malloc_usable_size(pv) < AK_PVALLOC_SIZE)
        failures++;
    char *ra = reallocarray(NULL, AK_REALLOCARRAY_N1, AK_REALLOCARRAY_SIZE);
    use(ra, AK_REALLOCARRAY_N1 * AK_REALLOCARRAY_SIZE);
    ra = reallocarray(ra, AK_REALLOCARRAY_N2, AK_REALLOCARRAY_SIZE);
    use(ra, AK_REALLOCARRAY_N2 * AK_REALLOCARRAY_SIZE);
    if (reallocarray(opaque(ra), huge, huge) != NULL) /* overflows: ENOMEM, records nothing */
        failures++;
    char text[AK_STRDUP_SIZE];
    memset(text, 'x', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    char *dup = strdup(text);
    use(dup, AK_STRDUP_SIZE);
    free(dup);
    free(ra);
    free(pv);
    free(va);
    free(ma);
#endif
    free(aa);
    free(pm);
    for (int i = 0; i < AK_CALLOC_COUNT; i++)
        free(zeroed[i]);
    free(big);
    for (int i = 0; i < AK_MALLOC_COUNT; i++)
        free(blocks[i]);
    free(NULL);

    if (failures != 0) {
        printf("alloc_known: %d failures\n", failures);
        return 1;
    }
    fputs(AK_STDOUT, stdout);
    return 0;
}
