/*
 * libprof_wrap.a: link-time instrumentation, for programs that cannot run under LD_PRELOAD
 * (static binaries, setups that strip the environment). The linker's --wrap sends the program's
 * calls to malloc & co. here, and __real_* reaches the real ones:
 *
 *   cc prog.o -o prog \
 *      -Wl,--wrap=malloc,--wrap=free,--wrap=calloc,--wrap=realloc \
 *      -Wl,--wrap=posix_memalign,--wrap=aligned_alloc \
 *      libprof_wrap.a libprof_static.a -lunwind -lpthread -ldl -lm
 *
 * (add -llzma for -static: libunwind.a needs it). The order matters: the archives after the
 * objects, libprof_wrap.a before libprof_static.a. No --whole-archive is needed: --wrap turns the
 * objects' references to malloc into references to __wrap_malloc, which pull this object, and its
 * constructor with it, out of the archive (a program that calls none of the wrapped functions
 * has nothing to record). In CMake (tests/preload/CMakeLists.txt does this):
 *   target_link_options(prog PRIVATE "LINKER:--wrap=malloc,--wrap=free,--wrap=calloc"
 *                       "LINKER:--wrap=realloc,--wrap=posix_memalign,--wrap=aligned_alloc")
 *   target_link_libraries(prog PRIVATE prof_wrap)
 *
 * Recording starts from the environment exactly as with the preload library (GRADPROF_OUTPUT,
 * GRADPROF_ENABLE, ...), from a constructor, and the destructor ends the trace.
 *
 * Limits: only calls from the objects linked with --wrap are seen. Allocations inside shared
 * libraries (libc's own, libstdc++'s operator new, any .so) are not recorded; a block allocated
 * there and freed by wrapped code shows as a free of an address the trace never saw allocated.
 * With -static, libc.a's own calls through the public names are wrapped too. memalign, valloc,
 * pvalloc, reallocarray and strdup are not wrapped (add a --wrap and a __wrap_ function here if
 * needed). _exit and exec* are not hooked: a program that leaves through _exit loses what the
 * last flush interval held, as after a crash.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>

#include "interpose.h"
#include "recorder.h"

/* The real functions, resolved by the linker under --wrap. */
void *__real_malloc(size_t size);
void __real_free(void *p);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
int __real_posix_memalign(void **out, size_t align, size_t size);
void *__real_aligned_alloc(size_t align, size_t size);

/* What the program's calls become; each behaves exactly as the function it wraps. */
void *__wrap_malloc(size_t size);
void __wrap_free(void *p);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
int __wrap_posix_memalign(void **out, size_t align, size_t size);
void *__wrap_aligned_alloc(size_t align, size_t size);

void *__wrap_malloc(size_t size)
{
    void *p = __real_malloc(size);
    lp__ip_alloc(p, size);
    return p;
}

void __wrap_free(void *p)
{
    lp__ip_free(p);
    __real_free(p);
}

void *__wrap_calloc(size_t n, size_t size)
{
    void *p = __real_calloc(n, size);
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes))
        bytes = SIZE_MAX; /* failed: what was asked does not fit */
    lp__ip_alloc(p, bytes);
    return p;
}

void *__wrap_realloc(void *old, size_t size)
{
    return lp__ip_realloc(__real_realloc, old, size);
}

int __wrap_posix_memalign(void **out, size_t align, size_t size)
{
    return lp__ip_posix_memalign(__real_posix_memalign, out, align, size);
}

void *__wrap_aligned_alloc(size_t align, size_t size)
{
    void *p = __real_aligned_alloc(align, size);
    lp__ip_alloc(p, size);
    return p;
}

__attribute__((constructor(101))) static void lp__wrap_init(void)
{
    lp__ip_start("wrap");
}

__attribute__((destructor(101))) static void lp__wrap_fini(void)
{
    lp_stop();
}
