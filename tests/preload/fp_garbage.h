/* fp_garbage.c: FPG_COUNT allocations of FPG_SIZE bytes from one place, each made with %rbp
 * pointing at a fake frame (call_with_rbp.S), freed at once. Shared with test_preload.c. */
#ifndef GRADPROF_TESTS_FP_GARBAGE_H
#define GRADPROF_TESTS_FP_GARBAGE_H

#define FPG_SIZE 5557
#define FPG_COUNT 400000
#define FPG_STDOUT "fp_garbage: done\n"

#endif /* GRADPROF_TESTS_FP_GARBAGE_H */
