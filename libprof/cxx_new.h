/*
 * What the preload library's C++ operator new/delete wrappers (cxx_new.c) share with its malloc
 * family (preload.c). Not installed.
 *
 * The problem: C++ allocations reach the allocator by two roads. Under glibc, libstdc++'s operator
 * new calls malloc (through the PLT, so the preload's malloc sees it); under tcmalloc or jemalloc,
 * their own operator new never calls malloc at all. To count each C++ allocation exactly once
 * whatever sits below, the preload library interposes every operator new/delete and records there
 * (the size the program asked for, its stack); what the real operator new then does through the
 * malloc family is *internal* and is not recorded again.
 *
 * Internal means: called while an operator new wrapper is active on this thread
 * (lp__cxx_depth > 0) from the code of an object that provides the real operator new (libstdc++,
 * libtcmalloc, libjemalloc: lp__cxx_internal). A new_handler the program installed runs its own
 * code, so what it allocates and frees is recorded. A free is internal when it frees the very
 * block an operator delete wrapper is freeing (lp__cxx_freeing), whoever calls it.
 */
#ifndef GRADPROF_LIBPROF_CXX_NEW_H
#define GRADPROF_LIBPROF_CXX_NEW_H

#include <stdbool.h>
#include <stddef.h>

#include "recorder.h"

#pragma GCC visibility push(hidden)

/* How many operator new wrappers are active on this thread. */
extern LP__TLS int lp__cxx_depth;
/* The block an operator delete wrapper is freeing (its free was recorded already), or NULL. */
extern LP__TLS void *lp__cxx_freeing;

/* Whether `ra`, a return address, lies in an object that provides a real operator new/delete. */
bool lp__cxx_internal(const void *ra);

/* Hands an internal allocation (made by the real operator new in progress) to the wrappers,
 * which record it only if it is not the block that operator new returns (an exception object
 * that libstdc++ allocated to throw std::bad_alloc, for one). */
void lp__cxx_inner(void *p, size_t size);

/* The real allocator under the preload library (preload.c), for the fallback when no real
 * operator new can be found: malloc semantics, never recorded. */
void *lp__real_malloc(size_t size);
void lp__real_free(void *p);
void *lp__real_aligned(size_t align, size_t size);

#pragma GCC visibility pop

#endif /* GRADPROF_LIBPROF_CXX_NEW_H */
