/*
 * libprof_preload.so: records every heap allocation of an unmodified program.
 *
 *   LD_PRELOAD=libprof_preload.so GRADPROF_OUTPUT=run.%p.gptrace ./program
 *
 * Interposes malloc, calloc, realloc, reallocarray, free, posix_memalign, aligned_alloc, memalign,
 * valloc, pvalloc and malloc_usable_size, every C++ operator new and delete (cxx_new.c: recorded
 * there, once, whichever allocator sits below; what the real operator new does through the
 * functions here is internal and not recorded again), plus the exits that skip destructors
 * (_exit, _Exit: the trace is ended first), the exec family (the trace is flushed first; the new
 * image starts its own), pthread_cancel (from the first call on, the recorder keeps
 * cancellation off while it unwinds stacks too) and pthread_getattr_np (marked while inside: it
 * allocates holding the thread's lock, which the recorder's stack bounds would take again). fork is handled by the recorder's pthread_atfork
 * handlers.
 *
 * The real functions come from dlsym(RTLD_NEXT), so another allocator preloaded after this one
 * (LD_PRELOAD="libprof_preload.so libtcmalloc_minimal.so.4") is what gets called. One found
 * *before* this library (preloaded first, or linked into the program itself) takes the program's
 * calls and none reach this library: that is said in one warning. dlsym may itself allocate
 * (glibc's dlerror buffer): while the real functions are being resolved, allocations are served
 * from a small static pool, which is never handed to the real free or realloc.
 *
 * Rules: the program's behaviour must not change. Nothing here aborts; if the real allocator
 * cannot be found the allocation fails with ENOMEM as if memory were exhausted, and a warning is
 * printed once. Never built with sanitizers (they interpose malloc themselves).
 *
 * Known limits: allocations made before this library's constructor (by the dynamic loader and by
 * libc's start-up) are not recorded; memory the program maps itself (mmap, brk/sbrk) is not heap
 * and not recorded; a signal handler's allocations and frees while the recorder records an event
 * of the same thread are not recorded (lp__guard_enter refuses them), and while the thread is
 * inside an operator new or delete are taken for the operator's own (when they come from the
 * allocator's object);
 * a vfork child that calls exec flushes from the parent's memory.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <pthread.h>
#include <stdatomic.h>

#include "cxx_new.h"
#include "interpose.h"
#include "recorder.h"

#define LP__EXPORT __attribute__((visibility("default")))
#define LP__EXECL_MAX_ARGS (1024 * 1024)

/* ---- the real functions ---------------------------------------------------------------------- */

typedef struct lp__real_fns {
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    size_t (*malloc_usable_size)(void *);
    void (*exit_)(int);
    int (*execve)(const char *, char *const[], char *const[]);
    int (*execvp)(const char *, char *const[]);
    int (*execvpe)(const char *, char *const[], char *const[]);
    int (*fexecve)(int, char *const[], char *const[]);
    int (*pthread_cancel)(pthread_t);
    int (*pthread_getattr_np)(pthread_t, pthread_attr_t *);
} lp__real_fns;

enum { LP__REAL_UNRESOLVED, LP__REAL_RESOLVING, LP__REAL_READY };

static lp__real_fns g_real;
static int g_real_state = LP__REAL_UNRESOLVED; /* atomic; READY publishes g_real (release) */

/* The symbol `name` from the objects after this one, else glibc's `fallback` (may be NULL). */
static void *lp__resolve(const char *name, const char *fallback)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL && fallback != NULL)
        f = dlsym(RTLD_DEFAULT, fallback);
    return f;
}

/*
 * Resolves the real functions once. Returns true when they are ready; false while another call
 * (on this thread, from inside dlsym, or on another thread) is resolving them: the caller then
 * serves the request from the bootstrap pool. Never blocks.
 */
static bool lp__real_ready(void)
{
    int state = __atomic_load_n(&g_real_state, __ATOMIC_ACQUIRE);
    if (__builtin_expect(state == LP__REAL_READY, 1))
        return true;
    int expected = LP__REAL_UNRESOLVED;
    if (!__atomic_compare_exchange_n(&g_real_state, &expected, LP__REAL_RESOLVING, false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return false;

    lp__real_fns r;
    /* The casts go through void * (POSIX guarantees dlsym results convert to function pointers). */
#define LP__RESOLVE(field, name, fallback) *(void **)(&r.field) = lp__resolve(name, fallback)
    LP__RESOLVE(malloc, "malloc", "__libc_malloc");
    LP__RESOLVE(free, "free", "__libc_free");
    LP__RESOLVE(calloc, "calloc", "__libc_calloc");
    LP__RESOLVE(realloc, "realloc", "__libc_realloc");
    LP__RESOLVE(posix_memalign, "posix_memalign", NULL);
    LP__RESOLVE(aligned_alloc, "aligned_alloc", NULL);
    LP__RESOLVE(memalign, "memalign", "__libc_memalign");
    LP__RESOLVE(valloc, "valloc", "__libc_valloc");
    LP__RESOLVE(pvalloc, "pvalloc", "__libc_pvalloc");
    LP__RESOLVE(malloc_usable_size, "malloc_usable_size", NULL);
    LP__RESOLVE(exit_, "_exit", NULL);
    LP__RESOLVE(execve, "execve", NULL);
    LP__RESOLVE(execvp, "execvp", NULL);
    LP__RESOLVE(execvpe, "execvpe", NULL);
    LP__RESOLVE(fexecve, "fexecve", NULL);
    LP__RESOLVE(pthread_cancel, "pthread_cancel", NULL);
    LP__RESOLVE(pthread_getattr_np, "pthread_getattr_np", NULL);
#undef LP__RESOLVE
    g_real = r;
    __atomic_store_n(&g_real_state, LP__REAL_READY, __ATOMIC_RELEASE);
    if (r.malloc == NULL || r.free == NULL || r.calloc == NULL || r.realloc == NULL)
        lp__warn_once(LP__WARN_OTHER, "preload: the real malloc/free/calloc/realloc were not "
                                      "found; allocations will fail with ENOMEM");
    return true;
}

/* ---- the bootstrap pool ---------------------------------------------------------------------- */

/* Serves allocations while the real functions are being resolved. A bump allocator: each block
 * has its size in the 8 bytes before it; blocks are never reused. Freeing a pool block is a no-op;
 * realloc of one copies it out to a real block. */
#define LP__POOL_BYTES (16 * 1024)

static _Alignas(64) unsigned char g_pool[LP__POOL_BYTES];
static size_t g_pool_used; /* atomic */

static bool lp__in_pool(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return a >= (uintptr_t)g_pool && a < (uintptr_t)g_pool + sizeof g_pool;
}

/* A zeroed pool block of `size` bytes aligned to `align` (a power of two, >= 16), or NULL with
 * errno ENOMEM when the pool is exhausted. */
static void *lp__pool_alloc(size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    if (size > sizeof g_pool || align > sizeof g_pool / 4) {
        errno = ENOMEM;
        return NULL;
    }
    size_t used = __atomic_load_n(&g_pool_used, __ATOMIC_RELAXED);
    for (;;) {
        uintptr_t start = (uintptr_t)g_pool + used + sizeof(size_t);
        start = (start + align - 1) & ~(uintptr_t)(align - 1);
        size_t end = (size_t)(start - (uintptr_t)g_pool) + size;
        if (end > sizeof g_pool) {
            errno = ENOMEM;
            return NULL;
        }
        if (__atomic_compare_exchange_n(&g_pool_used, &used, end, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            memcpy((void *)(start - sizeof(size_t)), &size, sizeof size);
            return (void *)start; /* static storage: already zero, never reused */
        }
    }
}

static size_t lp__pool_size(const void *p)
{
    size_t size;
    memcpy(&size, (const unsigned char *)p - sizeof size, sizeof size);
    return size;
}

/* The allocator is missing altogether (see lp__real_ready): fail as if out of memory. */
static void *lp__no_memory(void)
{
    errno = ENOMEM;
    return NULL;
}

/* ---- the allocation functions ---------------------------------------------------------------- */

/* Records the allocation `p` of `size` bytes, made for a caller whose return address is `ra`,
 * unless it is the internal work of a real operator new in progress on this thread (cxx_new.h). */
static inline __attribute__((always_inline)) void lp__alloc_from(const void *ra, void *p,
                                                                  size_t size)
{
    if (p != NULL && __builtin_expect(lp__cxx_depth != 0, 0) && lp__cxx_internal(ra)) {
        lp__cxx_inner(p, size);
        return;
    }
    lp__ip_alloc(p, size);
}

LP__EXPORT void *malloc(size_t size)
{
    if (!lp__real_ready())
        return lp__pool_alloc(size, 16);
    if (g_real.malloc == NULL)
        return lp__no_memory();
    void *p = g_real.malloc(size);
    lp__alloc_from(__builtin_return_address(0), p, size);
    return p;
}

LP__EXPORT void free(void *p)
{
    if (p == NULL || lp__in_pool(p))
        return;
    if (!lp__real_ready() || g_real.free == NULL)
        return; /* cannot happen for a block the real malloc made; leaking beats crashing */
    if (__builtin_expect(p != lp__cxx_freeing, 1)) /* else operator delete recorded it */
        lp__ip_free(p);
    g_real.free(p);
}

LP__EXPORT void *calloc(size_t n, size_t size)
{
    if (!lp__real_ready()) {
        size_t bytes;
        if (__builtin_mul_overflow(n, size, &bytes))
            return lp__no_memory();
        return lp__pool_alloc(bytes, 16);
    }
    if (g_real.calloc == NULL)
        return lp__no_memory();
    void *p = g_real.calloc(n, size);
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes))
        bytes = SIZE_MAX; /* failed: what was asked does not fit */
    lp__alloc_from(__builtin_return_address(0), p, bytes);
    return p;
}

/* The real allocator, unrecorded, for operator new when no real operator new exists. */
void *lp__real_malloc(size_t size)
{
    if (!lp__real_ready())
        return lp__pool_alloc(size, 16);
    return g_real.malloc ? g_real.malloc(size) : lp__no_memory();
}

void lp__real_free(void *p)
{
    if (p == NULL || lp__in_pool(p) || !lp__real_ready() || g_real.free == NULL)
        return;
    g_real.free(p);
}

void *lp__real_aligned(size_t align, size_t size)
{
    void *p = NULL;
    if (!lp__real_ready())
        return lp__pool_alloc(size, align);
    if (g_real.posix_memalign == NULL ||
        g_real.posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size) != 0)
        return NULL;
    return p;
}

/* realloc of a pool block: a new block (from the pool while still resolving), the old bytes
 * copied; the pool block itself stays where it is. */
static void *lp__realloc_from_pool(void *old, size_t size)
{
    if (size == 0)
        return NULL; /* freed, as glibc's realloc(p, 0) */
    void *p = malloc(size);
    if (p != NULL) {
        size_t old_size = lp__pool_size(old);
        memcpy(p, old, old_size < size ? old_size : size);
    }
    return p;
}

LP__EXPORT void *realloc(void *old, size_t size)
{
    if (old != NULL && lp__in_pool(old))
        return lp__realloc_from_pool(old, size);
    if (!lp__real_ready()) {
        if (old != NULL)
            return lp__no_memory(); /* a real block before the real functions exist: impossible */
        return lp__pool_alloc(size, 16);
    }
    if (g_real.realloc == NULL)
        return lp__no_memory();
    return lp__ip_realloc(g_real.realloc, old, size);
}

LP__EXPORT void *reallocarray(void *old, size_t n, size_t size)
{
    /* glibc's reallocarray is exactly this; its internal realloc call would not reach us. */
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes))
        return lp__no_memory();
    return realloc(old, bytes);
}

LP__EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
    if (!lp__real_ready()) {
        if (align < sizeof(void *) || (align & (align - 1)) != 0)
            return EINVAL;
        void *p = lp__pool_alloc(size, align);
        if (p == NULL)
            return ENOMEM;
        *out = p;
        return 0;
    }
    if (g_real.posix_memalign == NULL)
        return ENOMEM;
    int rc = g_real.posix_memalign(out, align, size);
    if (rc == 0)
        lp__alloc_from(__builtin_return_address(0), *out, size);
    else if (rc == ENOMEM)
        lp__ip_failed(size);
    return rc;
}

/* The aligned allocators that return the block: from the pool while resolving, else `real`. */
static inline __attribute__((always_inline)) void *
lp__aligned(const void *ra, void *(*real)(size_t, size_t), size_t align, size_t size)
{
    if (real == NULL)
        return lp__no_memory();
    void *p = real(align, size);
    lp__alloc_from(ra, p, size);
    return p;
}

static void *lp__pool_aligned(size_t align, size_t size)
{
    if ((align & (align - 1)) != 0) {
        errno = EINVAL;
        return NULL;
    }
    return lp__pool_alloc(size, align);
}

LP__EXPORT void *aligned_alloc(size_t align, size_t size)
{
    if (!lp__real_ready())
        return lp__pool_aligned(align, size);
    return lp__aligned(__builtin_return_address(0), g_real.aligned_alloc, align, size);
}

LP__EXPORT void *memalign(size_t align, size_t size)
{
    if (!lp__real_ready())
        return lp__pool_aligned(align, size);
    return lp__aligned(__builtin_return_address(0), g_real.memalign, align, size);
}

LP__EXPORT void *valloc(size_t size)
{
    if (!lp__real_ready())
        return lp__pool_alloc(size, 4096);
    if (g_real.valloc == NULL)
        return lp__no_memory();
    void *p = g_real.valloc(size);
    lp__alloc_from(__builtin_return_address(0), p, size);
    return p;
}

LP__EXPORT void *pvalloc(size_t size)
{
    if (!lp__real_ready())
        return lp__pool_alloc(size, 4096);
    if (g_real.pvalloc == NULL)
        return lp__no_memory();
    void *p = g_real.pvalloc(size);
    lp__alloc_from(__builtin_return_address(0), p, size);
    return p;
}

/* Interposed only so that a pool block never reaches the real one (which reads a chunk header). */
LP__EXPORT size_t malloc_usable_size(void *p)
{
    if (p == NULL)
        return 0;
    if (lp__in_pool(p))
        return lp__pool_size(p);
    if (!lp__real_ready() || g_real.malloc_usable_size == NULL)
        return 0;
    return g_real.malloc_usable_size(p);
}

/* ---- exits and execs ------------------------------------------------------------------------- */

/* Ends the process now, as the real _exit (exit_group when it cannot be found). */
static _Noreturn void lp__real_exit(int status)
{
    if (lp__real_ready() && g_real.exit_ != NULL)
        g_real.exit_(status);
    for (;;)
        syscall(SYS_exit_group, status);
}

LP__EXPORT _Noreturn void _exit(int status)
{
    lp__before_exit();
    lp__real_exit(status);
}

LP__EXPORT _Noreturn void _Exit(int status)
{
    lp__before_exit();
    lp__real_exit(status);
}

/* An exec function that cannot be found: the call fails with ENOSYS. */
static int lp__no_exec(void)
{
    errno = ENOSYS;
    return -1;
}

LP__EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    if (!lp__real_ready() || g_real.execve == NULL)
        return lp__no_exec();
    lp__before_exec();
    return g_real.execve(path, argv, envp);
}

LP__EXPORT int execv(const char *path, char *const argv[])
{
    return execve(path, argv, environ);
}

LP__EXPORT int execvp(const char *file, char *const argv[])
{
    if (!lp__real_ready() || g_real.execvp == NULL)
        return lp__no_exec();
    lp__before_exec();
    return g_real.execvp(file, argv);
}

LP__EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    if (!lp__real_ready() || g_real.execvpe == NULL)
        return lp__no_exec();
    lp__before_exec();
    return g_real.execvpe(file, argv, envp);
}

LP__EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    if (!lp__real_ready() || g_real.fexecve == NULL)
        return lp__no_exec();
    lp__before_exec();
    return g_real.fexecve(fd, argv, envp);
}

enum lp__execl_kind { LP__EXECL, LP__EXECLP, LP__EXECLE };

/*
 * The execl family: builds the argv array on the stack (as glibc does) from arg0 and the
 * NULL-terminated list in *ap, then execle's envp after the NULL, and calls the matching
 * exec*v function above. Returns only on failure (-1, errno set).
 */
static int lp__execl(enum lp__execl_kind kind, const char *path, const char *arg0, va_list *ap)
{
    va_list count;
    va_copy(count, *ap);
    size_t n = 1; /* arg0 */
    while (va_arg(count, const char *) != NULL && n <= LP__EXECL_MAX_ARGS)
        n++;
    va_end(count);
    if (n > LP__EXECL_MAX_ARGS) { /* the kernel refuses this many; keep the stack use bounded */
        errno = E2BIG;
        return -1;
    }
    char *argv[n + 1];
    argv[0] = (char *)arg0;
    for (size_t i = 1; i <= n; i++) /* argv[n] is the terminating NULL */
        argv[i] = va_arg(*ap, char *);
    switch (kind) {
    case LP__EXECLP:
        return execvp(path, argv);
    case LP__EXECLE:
        return execve(path, argv, va_arg(*ap, char *const *));
    case LP__EXECL:
    default:
        return execve(path, argv, environ);
    }
}

LP__EXPORT int execl(const char *path, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    int rc = lp__execl(LP__EXECL, path, arg0, &ap);
    va_end(ap);
    return rc;
}

LP__EXPORT int execlp(const char *file, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    int rc = lp__execl(LP__EXECLP, file, arg0, &ap);
    va_end(ap);
    return rc;
}

LP__EXPORT int execle(const char *path, const char *arg0, ...)
{
    va_list ap;
    va_start(ap, arg0);
    int rc = lp__execl(LP__EXECLE, path, arg0, &ap);
    va_end(ap);
    return rc;
}

/* ---- cancellation ---------------------------------------------------------------------------- */

/* Only noted: from now on the recorder keeps cancellation off while it unwinds stacks too (its
 * writes, file creation and locks always do; per event this costs about 20 ns, so only for
 * programs that cancel threads). */
LP__EXPORT int pthread_cancel(pthread_t thread)
{
    atomic_store(&lp__cancel_used, true);
    if (!lp__real_ready() || g_real.pthread_cancel == NULL)
        return ENOSYS;
    return g_real.pthread_cancel(thread);
}

/* Only marked: while inside, the recorder does not ask for this thread's stack bounds (see
 * lp__in_getattr). Before the real functions are resolved, the real one is looked up here. */
LP__EXPORT int pthread_getattr_np(pthread_t thread, pthread_attr_t *attr)
{
    int (*real)(pthread_t, pthread_attr_t *) =
        lp__real_ready() ? g_real.pthread_getattr_np
                         : (int (*)(pthread_t, pthread_attr_t *))dlsym(RTLD_NEXT,
                                                                       "pthread_getattr_np");
    if (real == NULL)
        return ENOSYS;
    bool was = lp__in_getattr;
    lp__in_getattr = true;
    int rc = real(thread, attr);
    lp__in_getattr = was;
    return rc;
}

/* ---- start and stop -------------------------------------------------------------------------- */

/* Whether the object loaded at `base` (dl_iterate_phdr's dlpi_addr) itself defines `sym`: its
 * dlsym answer lies in that object and is a definition, not a canonical PLT entry. */
static bool lp__object_defines(const char *path, uintptr_t base, const char *sym)
{
    void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL)
        return false;
    void *f = dlsym(h, sym);
    Dl_info info;
    const ElfW(Sym) *entry = NULL;
    struct link_map *map = NULL;
    bool defines = f != NULL && dladdr1(f, &info, (void **)&entry, RTLD_DL_SYMENT) &&
                   entry != NULL && entry->st_shndx != SHN_UNDEF &&
                   dladdr1(f, &info, (void **)&map, RTLD_DL_LINKMAP) && map != NULL &&
                   map->l_addr == base;
    dlclose(h);
    return defines;
}

/* The loaded objects in link-map order (the program first, then the preloaded libraries in their
 * order, then the rest), up to this library. */
typedef struct lp__objects {
    char paths[16][512];
    uintptr_t bases[16];
    int n;
    uintptr_t self;
    bool reached_self;
} lp__objects;

static int lp__collect_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    lp__objects *o = data;
    if (info->dlpi_addr == o->self) {
        o->reached_self = true;
        return 1;
    }
    if (o->n < 16) {
        snprintf(o->paths[o->n], sizeof o->paths[o->n], "%s", info->dlpi_name);
        o->bases[o->n++] = info->dlpi_addr;
    }
    return 0;
}

/*
 * Warns once when the program's calls to malloc do not reach this library's: an allocator
 * preloaded before it, or linked into the program, takes every call, and nothing is recorded.
 *
 * dlsym(RTLD_DEFAULT, "malloc") is not the answer by itself: a non-PIE program that takes
 * malloc's address (/usr/bin/python3.11) has a canonical PLT entry for it, an undefined symbol
 * with an address, and dlsym returns that entry so that function pointers compare equal. The
 * program's own calls through that entry go where its GOT points: the first object after the
 * program in the global scope that defines malloc. So when the answer is such an entry, the
 * objects between the program and this library are asked one by one whether they define malloc.
 */
static void lp__check_malloc_binding(void)
{
    void *bound = dlsym(RTLD_DEFAULT, "malloc");
    Dl_info bound_info, own_info;
    const ElfW(Sym) *entry = NULL;
    if (bound == NULL ||
        !dladdr1(bound, &bound_info, (void **)&entry, RTLD_DL_SYMENT) ||
        !dladdr((void *)lp__check_malloc_binding, &own_info))
        return;
    const char *where = NULL;
    static lp__objects objects; /* 8 KB: not on a constructor's stack */
    if (entry != NULL && entry->st_shndx == SHN_UNDEF) { /* the program's canonical PLT entry */
        memset(&objects, 0, sizeof objects);
        objects.self = (uintptr_t)own_info.dli_fbase;
        struct link_map *own_map = NULL;
        if (dladdr1((void *)lp__check_malloc_binding, &own_info, (void **)&own_map,
                    RTLD_DL_LINKMAP) && own_map != NULL)
            objects.self = own_map->l_addr;
        dl_iterate_phdr(lp__collect_object, &objects);
        if (!objects.reached_self)
            return;
        for (int i = 1; i < objects.n && where == NULL; i++) /* 0 is the program */
            if (objects.paths[i][0] && lp__object_defines(objects.paths[i], objects.bases[i],
                                                          "malloc"))
                where = objects.paths[i];
        if (where == NULL)
            return; /* the first definition after the program is this library's */
    } else if (bound_info.dli_fbase == own_info.dli_fbase) {
        return;
    } else {
        where = bound_info.dli_fname && *bound_info.dli_fname ? bound_info.dli_fname
                                                              : "the program";
    }
    char msg[400];
    snprintf(msg, sizeof msg,
             "the program's malloc is the one in %.200s, which comes before libprof_preload.so: "
             "allocations are not recorded (list libprof_preload.so first in LD_PRELOAD)",
             where);
    lp__warn_once(LP__WARN_OTHER, msg);
}

__attribute__((constructor(101))) static void lp__preload_init(void)
{
    lp__real_ready();
    lp__ip_start("preload");
    if (lp_is_recording())
        lp__check_malloc_binding();
}

__attribute__((destructor(101))) static void lp__preload_fini(void)
{
    lp_stop();
}
