/* fp_chains.c: allocations from FPC_CHAINS call chains x FPC_DEPTHS recursion depths, FPC_ROUNDS
 * times, on the main thread and one other; each (thread, chain, depth) has its own size, so every
 * allocation of one size has one call stack. Shared with test_preload.c. */
#ifndef GRADPROF_TESTS_FP_CHAINS_H
#define GRADPROF_TESTS_FP_CHAINS_H

#define FPC_CHAINS 3
#define FPC_DEPTHS 6
#define FPC_ROUNDS 40
/* The size of (thread t in {0, 1}, chain c, depth d). */
#define FPC_SIZE(t, c, d) (7000 + 256 * (t) + 16 * (c) + (d))
#define FPC_STDOUT "fp_chains: done\n"

#endif /* GRADPROF_TESTS_FP_CHAINS_H */
