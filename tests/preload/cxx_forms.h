/*
 * The allocations cxx_forms.cpp (C++) and c_forms.c (C) make, shared with test_preload.c: every
 * form of operator new and delete and the C allocation functions, each with a size of its own,
 * allocated and freed once, so that a trace can be checked form by form under any allocator.
 */
#ifndef GRADPROF_TESTS_CXX_FORMS_H
#define GRADPROF_TESTS_CXX_FORMS_H

#define CF_ALIGN 128 /* the std::align_val_t of the aligned forms */

/* One row per delete form (each once), with the new form it pairs with: (size, new, delete). */
#define CF_ROWS(X)                                                                                 \
    X(7001, new_plain, delete_plain)                                                                           \
    X(7003, new_plain, delete_sized)                                                                     \
    X(7005, new_nothrow, delete_nothrow)                                                           \
    X(7007, new_array, delete_array)                                                               \
    X(7009, new_array, delete_array_sized)                                                         \
    X(7011, new_array_nothrow, delete_array_nothrow)                                               \
    X(7013, new_aligned, delete_aligned)                                                           \
    X(7015, new_aligned, delete_aligned_sized)                                                     \
    X(7017, new_aligned_nothrow, delete_aligned_nothrow)                                           \
    X(7019, new_array_aligned, delete_array_aligned)                                               \
    X(7021, new_array_aligned, delete_array_aligned_sized)                                         \
    X(7023, new_array_aligned_nothrow, delete_array_aligned_nothrow)
#define CF_NROWS 12

#define CF_EXPR_NEW_SIZE 7101   /* new Obj / delete obj (a 7101-byte object), CF_EXPR_COUNT times */
#define CF_EXPR_COUNT 5
#define CF_VECTOR_ELEM 1009     /* std::vector of 1009-byte elements, 5 push_backs: 1, 2, 4, 8 */
#define CF_MALLOC_SIZE 7201     /* malloc/free, CF_MALLOC_COUNT times (both programs) */
#define CF_MALLOC_COUNT 4
#define CF_CALLOC_N 7           /* calloc(7, 1031) (both programs) */
#define CF_CALLOC_SIZE 1031
#define CF_REALLOC_FIRST 7203   /* malloc(7203) then realloc to 72005 (both programs) */
#define CF_REALLOC_GROW 72005
#define CF_MEMALIGN_SIZE 7207   /* posix_memalign(&p, 64, 7207) (both programs) */
#define CF_ALIGNED_ALLOC_SIZE 7296 /* aligned_alloc(128, 7296) (both programs) */
/* C++ only: a failing new of CF_HUGE bytes throws std::bad_alloc, which is caught; a failing
 * nothrow new returns nullptr; then a new_handler that frees a CF_RESERVE_SIZE block (malloc'd
 * before) runs once before the failing new throws. Nothing of these is recorded but the reserve's
 * malloc and free; after them, CF_AFTER_SIZE is new'd and deleted: the recorder still works. */
#define CF_HUGE (1ull << 62)
#define CF_RESERVE_SIZE 7301
#define CF_AFTER_SIZE 7303

#define CF_STDOUT "forms: done\n"

#endif /* GRADPROF_TESTS_CXX_FORMS_H */
