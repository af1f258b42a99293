/* alloc_known.c linked with ld --wrap against libprof_wrap.a: the functions libprof_wrap does not
 * wrap (memalign, valloc, pvalloc, reallocarray) are left out. */
#define AK_WRAPPED 1
#include "alloc_known.c"
