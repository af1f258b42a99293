/* What tests/preload/py_alloc.py allocates, and where (its line numbers). */
#ifndef GRADPROF_TESTS_PY_ALLOC_H
#define GRADPROF_TESTS_PY_ALLOC_H

#define PA_MAKE_LINE 7
#define PA_LINE_A 11
#define PA_LINE_B 12
#define PA_LINE_C 13
#define PA_LINE_MODULE 17
/* bytearray(n) allocates n + 1 bytes */
#define PA_SIZE_A (3000001 + 1)
#define PA_SIZE_B (3000003 + 1)
#define PA_SIZE_C (3000005 + 1)
#define PA_STDOUT "9000009\n"

#endif
