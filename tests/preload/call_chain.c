/* A known call chain for stack tests: main -> cc_a -> cc_b -> cc_c -> malloc(CC_SIZE). Built with
 * -g -O0 -fno-omit-frame-pointer -fno-optimize-sibling-calls; each function also does work after
 * its call, so no frame is a tail call. Knows nothing of gradprof. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call_chain.h"

/* Extern (not static) so that nm lists them under these names. */
void *cc_a(void);
void *cc_b(void);
void *cc_c(void);

__attribute__((noinline)) void *cc_c(void)
{
    void *p = malloc(CC_SIZE);
    if (p != NULL)
        memset(p, 0x5A, CC_SIZE);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void *cc_b(void)
{
    void *p = cc_c();
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void *cc_a(void)
{
    void *p = cc_b();
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

int main(void)
{
    void *p = cc_a();
    if (p == NULL)
        return 1;
    free(p);
    fputs(CC_STDOUT, stdout);
    return 0;
}
