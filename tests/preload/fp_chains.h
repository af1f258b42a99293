/* fp_chains.c: allocations from FPC_CHAINS call chains x FPC_DEPTHS recursion depths, FPC_ROUNDS
 * times, in FPC_ROLES roles: on the main thread, on another thread, in a signal handler on the
 * main thread's stack and in one on an alternate signal stack; each (role, chain, depth) has its
 * own size, so every allocation of one size has one call stack. Shared with test_preload.c. */
#ifndef GRADPROF_TESTS_FP_CHAINS_H
#define GRADPROF_TESTS_FP_CHAINS_H

#define FPC_CHAINS 3
#define FPC_DEPTHS 6
#define FPC_ROUNDS 40
#define FPC_ROLES 4
/* The size of (role t in [0, FPC_ROLES), chain c, depth d). */
#define FPC_SIZE(t, c, d) (7000 + 256 * (t) + 16 * (c) + (d))
#define FPC_STDOUT "fp_chains: done\n"

#endif /* GRADPROF_TESTS_FP_CHAINS_H */
