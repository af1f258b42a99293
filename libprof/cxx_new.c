/*
 * libprof_preload.so's C++ operator new and delete: every form (plain, array, nothrow, aligned
 * with std::align_val_t, aligned + nothrow; sized, aligned and sized + aligned delete), recorded
 * once each whatever allocator sits below (cxx_new.h says how internal calls are told apart).
 *
 * Written in C, compiled with -fexceptions: a C++ exception (std::bad_alloc, or whatever a
 * new_handler throws) passes through these frames, and the cleanup attribute restores the
 * wrapper's bookkeeping on the way, with libgcc's C personality routine; the library needs no
 * libstdc++. The exceptions are the real operator new's own: the real definition of each operator
 * (lp__cxx_find: the next one in the global scope, or one in a library loaded with RTLD_LOCAL,
 * such as a Python extension's libstdc++; resolved at first use, and looked for again when the
 * program loads something) does the work. Only if there is none do malloc semantics stand in: the
 * new_handler loop of std::get_new_handler, then std::__throw_bad_alloc from libstdc++ for the
 * throwing forms (abort if even that is missing), NULL for the nothrow forms.
 *
 * Mangled names are those of the Itanium C++ ABI on LP64 (size_t is 'm'); std::align_val_t is
 * passed as a size_t and a std::nothrow_t const & as a pointer.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "cxx_new.h"
#include "interpose.h"

#define LP__EXPORT __attribute__((visibility("default")))

LP__TLS int lp__cxx_depth;
LP__TLS void *lp__cxx_freeing;

/* ---- the real operators ---------------------------------------------------------------------- */

enum lp__cxx_op {
    LP__NEW,           /* operator new(size_t) */
    LP__NEW_NT,        /* operator new(size_t, nothrow_t const &) */
    LP__NEW_ARR,       /* operator new[](size_t) */
    LP__NEW_ARR_NT,    /* operator new[](size_t, nothrow_t const &) */
    LP__NEW_AL,        /* operator new(size_t, align_val_t) */
    LP__NEW_AL_NT,     /* operator new(size_t, align_val_t, nothrow_t const &) */
    LP__NEW_ARR_AL,    /* operator new[](size_t, align_val_t) */
    LP__NEW_ARR_AL_NT, /* operator new[](size_t, align_val_t, nothrow_t const &) */
    LP__DEL,           /* operator delete(void *) */
    LP__DEL_SZ,        /* operator delete(void *, size_t) */
    LP__DEL_NT,        /* operator delete(void *, nothrow_t const &) */
    LP__DEL_AL,        /* operator delete(void *, align_val_t) */
    LP__DEL_SZ_AL,     /* operator delete(void *, size_t, align_val_t) */
    LP__DEL_AL_NT,     /* operator delete(void *, align_val_t, nothrow_t const &) */
    LP__DEL_ARR,       /* operator delete[](void *) */
    LP__DEL_ARR_SZ,    /* operator delete[](void *, size_t) */
    LP__DEL_ARR_NT,    /* operator delete[](void *, nothrow_t const &) */
    LP__DEL_ARR_AL,    /* operator delete[](void *, align_val_t) */
    LP__DEL_ARR_SZ_AL, /* operator delete[](void *, size_t, align_val_t) */
    LP__DEL_ARR_AL_NT, /* operator delete[](void *, align_val_t, nothrow_t const &) */
    LP__CXX_OPS
};

static const char *const lp__cxx_names[LP__CXX_OPS] = {
    "_Znwm",
    "_ZnwmRKSt9nothrow_t",
    "_Znam",
    "_ZnamRKSt9nothrow_t",
    "_ZnwmSt11align_val_t",
    "_ZnwmSt11align_val_tRKSt9nothrow_t",
    "_ZnamSt11align_val_t",
    "_ZnamSt11align_val_tRKSt9nothrow_t",
    "_ZdlPv",
    "_ZdlPvm",
    "_ZdlPvRKSt9nothrow_t",
    "_ZdlPvSt11align_val_t",
    "_ZdlPvmSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t",
    "_ZdaPv",
    "_ZdaPvm",
    "_ZdaPvRKSt9nothrow_t",
    "_ZdaPvSt11align_val_t",
    "_ZdaPvmSt11align_val_t",
    "_ZdaPvSt11align_val_tRKSt9nothrow_t",
};

static void *g_cxx_real[LP__CXX_OPS]; /* atomic; NULL until found */

/* The code ranges of the objects that provide real operators, and of this library (a real
 * operator may tail-call another, e.g. libstdc++'s new[] jumps to new: the return address is then
 * the one into this library's wrapper): calls from there are internal. */
#define LP__CXX_RANGES 16
static struct {
    uintptr_t lo, hi;
} g_ranges[LP__CXX_RANGES];
static int g_nranges; /* atomic: entries below it are complete */
static pthread_mutex_t g_ranges_lock = PTHREAD_MUTEX_INITIALIZER;

bool lp__cxx_internal(const void *ra)
{
    uintptr_t a = (uintptr_t)ra;
    int n = __atomic_load_n(&g_nranges, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (a >= g_ranges[i].lo && a < g_ranges[i].hi)
            return true;
    return false;
}

/* dl_iterate_phdr callback: adds the executable segments of the object holding *data. */
static int lp__add_ranges_of(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t f = *(const uintptr_t *)data;
    bool holds = false;
    for (int i = 0; i < info->dlpi_phnum && !holds; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        holds = ph->p_type == PT_LOAD && f >= lo && f < lo + ph->p_memsz;
    }
    if (!holds)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        int n = g_nranges;
        bool known = false;
        for (int k = 0; k < n; k++)
            known |= g_ranges[k].lo == lo && g_ranges[k].hi == hi;
        if (known || n >= LP__CXX_RANGES)
            continue;
        g_ranges[n].lo = lo;
        g_ranges[n].hi = hi;
        __atomic_store_n(&g_nranges, n + 1, __ATOMIC_RELEASE);
    }
    return 1;
}

/* The loaded objects lp__cxx_find may look in: names (the loader's own strings, valid while the
 * objects stay loaded) of every object but the program and this library, in load order. */
#define LP__CXX_OBJECTS 512
struct lp__cxx_objects {
    uintptr_t self; /* an address inside this library */
    const char *names[LP__CXX_OBJECTS];
    int n;
    unsigned long long adds; /* the loader's count of objects loaded so far */
};

static int lp__cxx_collect(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct lp__cxx_objects *q = data;
    q->adds = info->dlpi_adds;
    if (!q->self) /* only the count wanted */
        return 1;
    if (!info->dlpi_name || !*info->dlpi_name || q->n == LP__CXX_OBJECTS)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) { /* skip this library */
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && q->self >= lo && q->self < lo + ph->p_memsz)
            return 0;
    }
    q->names[q->n++] = info->dlpi_name;
    return 0;
}

/* The real definition of operator `name`: the next one after this library in the global scope
 * (dlsym RTLD_NEXT: an allocator preloaded after gradprof, or libstdc++ loaded with the program),
 * else one in any loaded object: a library loaded with RTLD_LOCAL (a Python extension's
 * libstdc++) binds its operator new to this library, which must then find the libstdc++ it
 * would have used. NULL when nothing defines it yet. *adds gets the loader's count of objects
 * loaded, so that a miss is looked into again only when something new was loaded. */
static void *lp__cxx_find(const char *name, unsigned long long *adds)
{
    void *f = dlsym(RTLD_NEXT, name);
    static struct lp__cxx_objects q; /* under g_ranges_lock */
    q = (struct lp__cxx_objects){.self = (uintptr_t)lp__cxx_find};
    dl_iterate_phdr(lp__cxx_collect, &q);
    *adds = q.adds;
    for (int i = 0; i < q.n && f == NULL; i++) { /* outside the callback: dlopen takes locks */
        void *h = dlopen(q.names[i], RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            f = dlsym(h, name);
            dlclose(h);
        }
    }
    return f;
}

/* The loader's count of objects loaded so far. */
static unsigned long long lp__cxx_loads(void)
{
    struct lp__cxx_objects q = {.self = 0};
    dl_iterate_phdr(lp__cxx_collect, &q);
    return q.adds;
}

/* The real operator `op` (lp__cxx_find), resolved at first use and kept; while there is none,
 * looked for again only after the program loaded another object. Never recorded: the loader's
 * own allocations (a failed lookup's error message) are gradprof's, not the program's. */
static void *lp__cxx_real(enum lp__cxx_op op)
{
    static unsigned long long g_missing_at[LP__CXX_OPS]; /* loads at the last miss, under lock */
    void *f = __atomic_load_n(&g_cxx_real[op], __ATOMIC_ACQUIRE);
    if (__builtin_expect(f != NULL, 1))
        return f;
    unsigned long long loads = lp__cxx_loads();
    bool guarded = lp__guard_enter();
    pthread_mutex_lock(&g_ranges_lock);
    f = __atomic_load_n(&g_cxx_real[op], __ATOMIC_ACQUIRE);
    if (f == NULL && loads != g_missing_at[op]) {
        f = lp__cxx_find(lp__cxx_names[op], &loads);
        if (f == NULL) {
            g_missing_at[op] = loads;
        } else {
            uintptr_t at = (uintptr_t)lp__cxx_real;
            if (g_nranges == 0)
                dl_iterate_phdr(lp__add_ranges_of, &at);
            at = (uintptr_t)f;
            dl_iterate_phdr(lp__add_ranges_of, &at);
            __atomic_store_n(&g_cxx_real[op], f, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&g_ranges_lock);
    if (guarded)
        lp__guard_exit();
    return f;
}

/* ---- bookkeeping of one operator new call ---------------------------------------------------- */

/* Internal allocations not yet accounted for (normally one: the block being returned). */
#define LP__CXX_PENDING 8
static LP__TLS struct {
    void *p;
    size_t size;
} lp__pending[LP__CXX_PENDING];
static LP__TLS int lp__npending;

void lp__cxx_inner(void *p, size_t size)
{
    if (p == NULL)
        return;
    if (lp__npending == LP__CXX_PENDING) { /* cannot happen but in a pathological new_handler */
        lp__ip_alloc(p, size);
        return;
    }
    lp__pending[lp__npending].p = p;
    lp__pending[lp__npending].size = size;
    lp__npending++;
}

/* One active wrapper. */
typedef struct lp__cxx_frame {
    int mark;    /* lp__npending at entry */
    bool record; /* called by the program (not internally): this wrapper records */
    bool done;   /* returned normally */
} lp__cxx_frame;

/* Records the pending internal allocations from `from` on (blocks the program will see freed
 * later, such as an exception object) and forgets them. */
static void lp__cxx_settle(int from)
{
    for (int i = from; i < lp__npending; i++)
        lp__ip_alloc(lp__pending[i].p, lp__pending[i].size);
    lp__npending = from;
}

/* Runs when an exception leaves the real operator new (the cleanup attribute; also at normal
 * return, when it does nothing). */
static void lp__cxx_unwind(lp__cxx_frame *f)
{
    if (f->done)
        return;
    lp__cxx_depth--;
    lp__cxx_settle(f->mark);
}

static lp__cxx_frame lp__cxx_enter(const void *ra)
{
    lp__cxx_frame f = {lp__npending, !(lp__cxx_depth > 0 && lp__cxx_internal(ra)), false};
    lp__cxx_depth++;
    return f;
}

/* The real operator returned `p` for a request of `size` bytes. */
static void *lp__cxx_leave(lp__cxx_frame *f, void *p, size_t size)
{
    lp__cxx_depth--;
    f->done = true;
    for (int i = f->mark; i < lp__npending; i++) {
        if (lp__pending[i].p == p) { /* the block itself: accounted for by the wrapper */
            lp__pending[i] = lp__pending[--lp__npending];
            break;
        }
    }
    if (f->record) {
        lp__cxx_settle(f->mark);
        lp__ip_alloc(p, size);
    }
    return p;
}

/* ---- the fallback: no real operator ---------------------------------------------------------- */

typedef void (*lp__handler_fn)(void);

static _Noreturn void lp__cxx_throw_bad_alloc(void)
{
    void (*thrower)(void) = NULL;
    *(void **)(&thrower) = dlsym(RTLD_DEFAULT, "_ZSt17__throw_bad_allocv");
    if (thrower != NULL)
        thrower();
    abort(); /* no C++ runtime at all: nothing could catch it; std::terminate would abort */
}

/* Allocates as operator new would: the new_handler loop, then bad_alloc (or NULL if nothrow). */
static void *lp__cxx_fallback_new(size_t size, size_t align, bool nothrow)
{
    for (;;) {
        void *p = align ? lp__real_aligned(align, size) : lp__real_malloc(size ? size : 1);
        if (p != NULL)
            return p;
        lp__handler_fn (*get)(void) = NULL;
        *(void **)(&get) = dlsym(RTLD_DEFAULT, "_ZSt15get_new_handlerv");
        lp__handler_fn handler = get ? get() : NULL;
        if (handler == NULL) {
            if (nothrow)
                return NULL;
            lp__cxx_throw_bad_alloc();
        }
        handler();
    }
}

/* ---- operator new ---------------------------------------------------------------------------- */

typedef void *(*lp__new_fn)(size_t);
typedef void *(*lp__new_nt_fn)(size_t, const void *);
typedef void *(*lp__new_al_fn)(size_t, size_t);
typedef void *(*lp__new_al_nt_fn)(size_t, size_t, const void *);

/* The body of every operator new wrapper: `call` is the real operator's call, `fallback` what
 * stands in without one. */
#define LP__CXX_NEW_BODY(op, fn_type, call, fallback)                                              \
    fn_type real;                                                                                  \
    *(void **)(&real) = lp__cxx_real(op);                                                          \
    if (real == NULL)                                                                              \
        return lp__cxx_leave_fallback(size, fallback);                                             \
    lp__cxx_frame f __attribute__((cleanup(lp__cxx_unwind))) =                                     \
        lp__cxx_enter(__builtin_return_address(0));                                                \
    void *p = call;                                                                                \
    return lp__cxx_leave(&f, p, size)

/* Without a real operator: the fallback's block, recorded as the program's. */
static void *lp__cxx_leave_fallback(size_t size, void *p)
{
    lp__ip_alloc(p, size);
    return p;
}

LP__EXPORT void *_Znwm(size_t size);
LP__EXPORT void *_Znwm(size_t size)
{
    LP__CXX_NEW_BODY(LP__NEW, lp__new_fn, real(size), lp__cxx_fallback_new(size, 0, false));
}

LP__EXPORT void *_Znam(size_t size);
LP__EXPORT void *_Znam(size_t size)
{
    LP__CXX_NEW_BODY(LP__NEW_ARR, lp__new_fn, real(size), lp__cxx_fallback_new(size, 0, false));
}

LP__EXPORT void *_ZnwmRKSt9nothrow_t(size_t size, const void *nt);
LP__EXPORT void *_ZnwmRKSt9nothrow_t(size_t size, const void *nt)
{
    LP__CXX_NEW_BODY(LP__NEW_NT, lp__new_nt_fn, real(size, nt),
                     lp__cxx_fallback_new(size, 0, true));
}

LP__EXPORT void *_ZnamRKSt9nothrow_t(size_t size, const void *nt);
LP__EXPORT void *_ZnamRKSt9nothrow_t(size_t size, const void *nt)
{
    LP__CXX_NEW_BODY(LP__NEW_ARR_NT, lp__new_nt_fn, real(size, nt),
                     lp__cxx_fallback_new(size, 0, true));
}

LP__EXPORT void *_ZnwmSt11align_val_t(size_t size, size_t align);
LP__EXPORT void *_ZnwmSt11align_val_t(size_t size, size_t align)
{
    LP__CXX_NEW_BODY(LP__NEW_AL, lp__new_al_fn, real(size, align),
                     lp__cxx_fallback_new(size, align, false));
}

LP__EXPORT void *_ZnamSt11align_val_t(size_t size, size_t align);
LP__EXPORT void *_ZnamSt11align_val_t(size_t size, size_t align)
{
    LP__CXX_NEW_BODY(LP__NEW_ARR_AL, lp__new_al_fn, real(size, align),
                     lp__cxx_fallback_new(size, align, false));
}

LP__EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t size, size_t align, const void *nt);
LP__EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t size, size_t align, const void *nt)
{
    LP__CXX_NEW_BODY(LP__NEW_AL_NT, lp__new_al_nt_fn, real(size, align, nt),
                     lp__cxx_fallback_new(size, align, true));
}

LP__EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t size, size_t align, const void *nt);
LP__EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t size, size_t align, const void *nt)
{
    LP__CXX_NEW_BODY(LP__NEW_ARR_AL_NT, lp__new_al_nt_fn, real(size, align, nt),
                     lp__cxx_fallback_new(size, align, true));
}

/* ---- operator delete ------------------------------------------------------------------------- */

typedef void (*lp__del_fn)(void *);
typedef void (*lp__del_sz_fn)(void *, size_t);
typedef void (*lp__del_nt_fn)(void *, const void *);
typedef void (*lp__del_sz_al_fn)(void *, size_t, size_t);
typedef void (*lp__del_al_nt_fn)(void *, size_t, const void *);

/* The body of every operator delete wrapper: records the free before the real one (unless an
 * outer wrapper is freeing this very block: sized delete calling plain delete), and marks the
 * block so that the real operator's own free of it is not recorded again. */
#define LP__CXX_DELETE_BODY(op, fn_type, call)                                                     \
    fn_type real;                                                                                  \
    *(void **)(&real) = lp__cxx_real(op);                                                          \
    if (p == NULL || p == lp__cxx_freeing) {                                                       \
        if (real != NULL)                                                                          \
            call;                                                                                  \
        else                                                                                       \
            lp__real_free(p);                                                                      \
        return;                                                                                    \
    }                                                                                              \
    lp__ip_free(p);                                                                                \
    void *outer = lp__cxx_freeing;                                                                 \
    lp__cxx_freeing = p;                                                                           \
    if (real != NULL)                                                                              \
        call;                                                                                      \
    else                                                                                           \
        lp__real_free(p);                                                                          \
    lp__cxx_freeing = outer

LP__EXPORT void _ZdlPv(void *p);
LP__EXPORT void _ZdlPv(void *p)
{
    LP__CXX_DELETE_BODY(LP__DEL, lp__del_fn, real(p));
}

LP__EXPORT void _ZdaPv(void *p);
LP__EXPORT void _ZdaPv(void *p)
{
    LP__CXX_DELETE_BODY(LP__DEL_ARR, lp__del_fn, real(p));
}

LP__EXPORT void _ZdlPvm(void *p, size_t size);
LP__EXPORT void _ZdlPvm(void *p, size_t size)
{
    LP__CXX_DELETE_BODY(LP__DEL_SZ, lp__del_sz_fn, real(p, size));
}

LP__EXPORT void _ZdaPvm(void *p, size_t size);
LP__EXPORT void _ZdaPvm(void *p, size_t size)
{
    LP__CXX_DELETE_BODY(LP__DEL_ARR_SZ, lp__del_sz_fn, real(p, size));
}

LP__EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *nt);
LP__EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *nt)
{
    LP__CXX_DELETE_BODY(LP__DEL_NT, lp__del_nt_fn, real(p, nt));
}

LP__EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *nt);
LP__EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *nt)
{
    LP__CXX_DELETE_BODY(LP__DEL_ARR_NT, lp__del_nt_fn, real(p, nt));
}

LP__EXPORT void _ZdlPvSt11align_val_t(void *p, size_t align);
LP__EXPORT void _ZdlPvSt11align_val_t(void *p, size_t align)
{
    LP__CXX_DELETE_BODY(LP__DEL_AL, lp__del_sz_fn, real(p, align));
}

LP__EXPORT void _ZdaPvSt11align_val_t(void *p, size_t align);
LP__EXPORT void _ZdaPvSt11align_val_t(void *p, size_t align)
{
    LP__CXX_DELETE_BODY(LP__DEL_ARR_AL, lp__del_sz_fn, real(p, align));
}

LP__EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t size, size_t align);
LP__EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t size, size_t align)
{
    LP__CXX_DELETE_BODY(LP__DEL_SZ_AL, lp__del_sz_al_fn, real(p, size, align));
}

LP__EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t size, size_t align);
LP__EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t size, size_t align)
{
    LP__CXX_DELETE_BODY(LP__DEL_ARR_SZ_AL, lp__del_sz_al_fn, real(p, size, align));
}

LP__EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *nt);
LP__EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *nt)
{
    LP__CXX_DELETE_BODY(LP__DEL_AL_NT, lp__del_al_nt_fn, real(p, align, nt));
}

LP__EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *nt);
LP__EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *nt)
{
    LP__CXX_DELETE_BODY(LP__DEL_ARR_AL_NT, lp__del_al_nt_fn, real(p, align, nt));
}
