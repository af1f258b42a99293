/* Known call chains for the recorder's frame-pointer walk (fp_chains.h): the same allocations,
 * again and again, so that after the first (checked against libunwind) the walk answers. Built
 * twice, with frame pointers (fp_chains) and without (fp_chains_nofp: the walk must see that it
 * cannot be used). Knows nothing of gradprof. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp_chains.h"

typedef void *(*chain_fn)(int thread, int chain, int depth, int left);

/* Three chains, each recursing `left` more times through itself before allocating. */
__attribute__((noinline)) static void *chain_leaf(int thread, int chain, int depth)
{
    size_t size = FPC_SIZE(thread, chain, depth);
    char *p = malloc(size);
    if (p)
        memset(p, 0x3C, size);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) static void *chain_a(int thread, int chain, int depth, int left)
{
    void *p = left ? chain_a(thread, chain, depth, left - 1) : chain_leaf(thread, chain, depth);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) static void *chain_b(int thread, int chain, int depth, int left)
{
    void *p = left ? chain_b(thread, chain, depth, left - 1) : chain_a(thread, chain, depth, 0);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) static void *chain_c(int thread, int chain, int depth, int left)
{
    void *p = left ? chain_c(thread, chain, depth, left - 1) : chain_b(thread, chain, depth, 0);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

static void *work(void *arg)
{
    int thread = arg != NULL;
    chain_fn chains[FPC_CHAINS] = {chain_a, chain_b, chain_c};
    for (int r = 0; r < FPC_ROUNDS; r++)
        for (int c = 0; c < FPC_CHAINS; c++)
            for (int d = 0; d < FPC_DEPTHS; d++)
                free(chains[c](thread, c, d, d));
    return NULL;
}

int main(void)
{
    pthread_t th;
    if (pthread_create(&th, NULL, work, (void *)1) != 0)
        return 1;
    work(NULL);
    pthread_join(th, NULL);
    fputs(FPC_STDOUT, stdout);
    return 0;
}
