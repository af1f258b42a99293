/* The C allocation functions of cxx_forms.h, in C: the same sizes and counts as cxx_forms.cpp's C
 * part, each successful call checked to leave errno alone (as the allocators do), also on a new
 * thread's first allocation. Knows nothing of gradprof. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cxx_forms.h"

static int failures = 0;

static void use(void *p, size_t n)
{
    if (p == NULL) {
        failures++;
        return;
    }
    if (errno != EDOM) /* set before each call: a successful one leaves it */
        failures++;
    memset(p, 0x5A, n);
    __asm__ volatile("" : : "r"(p) : "memory");
    errno = EDOM;
}

static void *first_on_a_thread(void *arg)
{
    (void)arg;
    errno = EDOM;
    void *p = malloc(CF_MALLOC_SIZE + 1);
    use(p, 1);
    free(p);
    return errno == EDOM ? NULL : (void *)1;
}

int main(void)
{
    errno = EDOM;
    pthread_t th;
    void *rc = (void *)1;
    if (pthread_create(&th, NULL, first_on_a_thread, NULL) != 0 || pthread_join(th, &rc) != 0 ||
        rc != NULL)
        failures++;
    errno = EDOM;
    for (int i = 0; i < CF_MALLOC_COUNT; i++) {
        void *p = malloc(CF_MALLOC_SIZE);
        use(p, CF_MALLOC_SIZE);
        free(p);
        if (errno != EDOM)
            failures++;
    }
    void *c = calloc(CF_CALLOC_N, CF_CALLOC_SIZE);
    use(c, 1);
    free(c);
    void *r = malloc(CF_REALLOC_FIRST);
    use(r, 1);
    r = realloc(r, CF_REALLOC_GROW);
    use(r, 1);
    free(r);
    void *m = NULL;
    if (posix_memalign(&m, 64, CF_MEMALIGN_SIZE) != 0)
        failures++;
    use(m, 1);
    free(m);
    void *a = aligned_alloc(CF_ALIGN, CF_ALIGNED_ALLOC_SIZE);
    use(a, 1);
    if ((uintptr_t)a % CF_ALIGN != 0)
        failures++;
    free(a);
    if (failures != 0) {
        printf("forms: %d failures\n", failures);
        return 1;
    }
    fputs(CF_STDOUT, stdout);
    return 0;
}
