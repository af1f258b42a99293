/* The allocations alloc_cxx.cpp makes, shared with test_preload.c. */
#ifndef GRADPROF_TESTS_ALLOC_CXX_H
#define GRADPROF_TESTS_ALLOC_CXX_H

#define AX_NEW_SIZE 2345 /* new Blob (a 2345-byte object), AX_NEW_COUNT times */
#define AX_NEW_COUNT 2
#define AX_ARRAY_SIZE 4321 /* new char[4321], AX_ARRAY_COUNT times */
#define AX_ARRAY_COUNT 3
#define AX_ALIGNED_SIZE 1536 /* new Aligned (alignas(256), 1536 bytes): aligned operator new */
#define AX_ALIGNED_ALIGN 256
#define AX_NOTHROW_SIZE 1999 /* new (std::nothrow) char[1999] */
#define AX_ELEM_SIZE 1003    /* std::vector<Elem> of 1003-byte elements grown by push_back */
#define AX_PUSHES 5          /* capacities 1, 2, 4, 8: one block of each */

#define AX_STDOUT "alloc_cxx: done\n"

#endif /* GRADPROF_TESTS_ALLOC_CXX_H */
