/* call_chain.c: main -> cc_a -> cc_b -> cc_c -> malloc(CC_SIZE). Shared with test_preload.c. */
#ifndef GRADPROF_TESTS_CALL_CHAIN_H
#define GRADPROF_TESTS_CALL_CHAIN_H

#define CC_SIZE 12345
#define CC_STDOUT "call_chain: done\n"

#endif /* GRADPROF_TESTS_CALL_CHAIN_H */
