/* Known call chains for the recorder's stack walks (fp_chains.h): the same allocations, again
 * and again, so that after the first (checked against libunwind) the frame-pointer walk answers.
 * Built twice, with frame pointers (fp_chains) and without (fp_chains_nofp: the frame-pointer
 * walk must see that it cannot be used, the walk by call-frame information must answer). The
 * signal handlers' chains cross a signal frame, the alternate stack's a change of stacks. Knows
 * nothing of gradprof. */
#include <pthread.h>
#include <signal.h>
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

/* One round of every chain at every depth, in role `role`. */
static void round_of(int role)
{
    chain_fn chains[FPC_CHAINS] = {chain_a, chain_b, chain_c};
    for (int c = 0; c < FPC_CHAINS; c++)
        for (int d = 0; d < FPC_DEPTHS; d++)
            free(chains[c](role, c, d, d));
}

static void *work(void *arg)
{
    for (int r = 0; r < FPC_ROUNDS; r++)
        round_of(arg != NULL);
    return NULL;
}

/* Raised synchronously (raise), so the allocator is not interrupted. */
static void on_usr1(int sig)
{
    (void)sig;
    round_of(2);
}

static void on_usr2(int sig)
{
    (void)sig;
    round_of(3);
}

int main(void)
{
    pthread_t th;
    if (pthread_create(&th, NULL, work, (void *)1) != 0)
        return 1;
    work(NULL);
    pthread_join(th, NULL);
    static char alt[256 * 1024];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
    struct sigaction on_stack = {.sa_handler = on_usr1}, on_alt = {.sa_handler = on_usr2,
                                                                   .sa_flags = SA_ONSTACK};
    if (sigaltstack(&ss, NULL) != 0 || sigaction(SIGUSR1, &on_stack, NULL) != 0 ||
        sigaction(SIGUSR2, &on_alt, NULL) != 0)
        return 1;
    for (int r = 0; r < FPC_ROUNDS; r++)
        if (raise(SIGUSR1) != 0 || raise(SIGUSR2) != 0)
            return 1;
    fputs(FPC_STDOUT, stdout);
    return 0;
}
