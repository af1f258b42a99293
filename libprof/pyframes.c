/*
 * Python frames for the recorder (pyframes.h), as py-spy and memray merge them: CPython 3.11 runs
 * Python-to-Python calls inside one C activation of _PyEval_EvalFrameDefault, so each activation
 * on the native stack stands for a group of Python frames: from the thread's current frame back
 * to the first "entry" frame (is_entry), then from the frame before it to the next entry frame
 * for the next activation outwards, and so on.
 *
 * Reading without the GIL. Only the calling thread's own frames are read, while it is inside an
 * allocation: they cannot change under it (only this thread pushes and pops them, and a thread
 * that released the GIL is blocked in C code below its frames). The thread state comes from
 * PyGILState_GetThisThreadState() (a thread-specific-data read, GIL-free), asked only while the
 * runtime is initialized and not finalizing. Then plain pointer reads of the 3.11 structures:
 * PyThreadState.cframe->current_frame, _PyInterpreterFrame.{f_code, previous, prev_instr,
 * is_entry}, PyCodeObject.{co_filename, co_qualname, co_firstlineno}; the line by
 * PyCode_Addr2Line (a pure walk of the code's line table). Nothing here allocates, takes a lock
 * or calls into the interpreter otherwise. A code object is checked to be one (its type) before
 * it is read, strings likewise; a walk stops after LP__PY_MAX_WALK frames.
 *
 * Layouts come from the CPython 3.11 internal headers this file is compiled against (Debian's
 * python3.11-dev, with Py_BUILD_CORE); the running interpreter must be 3.11 too (Py_Version, any
 * patch release: the 3.11 frame and code layouts did not change across them). Otherwise, or when
 * the headers were not found at build time, Python frames are off: native frames only, and one
 * line on stderr when GRADPROF_VERBOSE=1.
 *
 * The interpreter's symbols are looked up in the loaded objects' dynamic symbol tables (as
 * dlsym(RTLD_DEFAULT) would, without its error-message allocations) each time objects were
 * loaded, until a Python runtime is found: libprof never links libpython. The eval loop's
 * address range is its dynamic symbol's [value, value + st_size).
 *
 * Known limits: code of the eval loop that the compiler moved out of line
 * (_PyEval_EvalFrameDefault.cold, error paths) is not in that range: an allocation made from
 * there leaves its activation unrecognised, and its Python frames go to the next activation out.
 */
#define _GNU_SOURCE
#include "pyframes.h"

#include <elf.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recorder.h"

/* What every build shares: whether and when the process was looked at, what was found. */
static struct {
    atomic_ullong looked; /* dlpi_adds + 1 at the last look; 0 = never */
    atomic_bool ready;    /* Python frames can be read */
    bool seen;            /* a Python runtime was found (ready or not): no more looks */
    char status[96];
} L;

/* Code objects whose frames the walk leaves out (lp_hide_python_code); set once each, read by
 * every thread's walk: the count is published after its entry. */
static struct {
    const void *_Atomic code[LP_HIDDEN_CODE_MAX];
    atomic_int n;
} H;

void lp_hide_python_code(const void *code)
{
    static atomic_int claimed;
    if (!code)
        return;
    for (int i = 0; i < atomic_load(&H.n); i++)
        if (atomic_load_explicit(&H.code[i], memory_order_relaxed) == code)
            return;
    int i = atomic_fetch_add(&claimed, 1);
    if (i >= LP_HIDDEN_CODE_MAX)
        return;
    atomic_store_explicit(&H.code[i], code, memory_order_relaxed);
    /* slots are claimed in order, each published once the ones before it are */
    int want = i;
    while (!atomic_compare_exchange_weak(&H.n, &want, i + 1))
        want = i;
}

static void lp__py_off(const char *why)
{
    snprintf(L.status, sizeof L.status, "off: %s", why);
    const char *v = getenv("GRADPROF_VERBOSE");
    if (v && strcmp(v, "1") == 0) {
        char line[160];
        snprintf(line, sizeof line, "Python frames off: %s", why);
        lp__warn_once(LP__WARN_PYTHON, line);
    }
}

/*
 * Symbol lookup without dlsym: a dlsym that fails leaves an error message malloc'd by glibc,
 * made inside the recorder (not recorded) and freed later by the program's next dl* call
 * (recorded: a free of memory never seen allocated), and it would clear an error the program has
 * yet to read with dlerror. So the loaded objects' dynamic symbol tables are searched directly,
 * in link-map order (the program first, as RTLD_DEFAULT does), through their GNU hash tables
 * (objects without one are skipped). Nothing is allocated.
 */
enum {
    LP__PY_SYM_GIL,
    LP__PY_SYM_VERSION,
    LP__PY_SYM_ADDR2LINE,
    LP__PY_SYM_EVAL,
    LP__PY_SYM_INITIALIZED,
    LP__PY_SYM_FINALIZING,
    LP__PY_SYM_CODE_TYPE,
    LP__PY_SYM_UNICODE_TYPE,
    LP__PY_NSYMS
};
static const char *const lp__py_names[LP__PY_NSYMS] = {"PyGILState_GetThisThreadState",
                                                       "Py_Version",
                                                       "PyCode_Addr2Line",
                                                       "_PyEval_EvalFrameDefault",
                                                       "Py_IsInitialized",
                                                       "_Py_IsFinalizing",
                                                       "PyCode_Type",
                                                       "PyUnicode_Type"};

typedef struct lp__py_syms {
    uintptr_t addr[LP__PY_NSYMS]; /* 0 = not found */
    uint64_t size[LP__PY_NSYMS];
    uintptr_t text_lo, text_hi; /* the executable segments of the eval loop's object */
} lp__py_syms;

static uint32_t lp__gnu_hash(const char *name)
{
    uint32_t h = 5381;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = h * 33 + *p;
    return h;
}

/* A dynamic-section address: relocated in place by the loader on most targets, not on others. */
static uintptr_t lp__dyn_addr(uintptr_t base, ElfW(Addr) v)
{
    return v < base ? base + v : v;
}

/* The span of an object's executable segments. */
static void lp__text_range(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi)
{
    *lo = UINTPTR_MAX;
    *hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < *lo)
            *lo = a;
        if (a + ph->p_memsz > *hi)
            *hi = a + ph->p_memsz;
    }
    if (*hi == 0)
        *lo = 0;
}

static int lp__py_scan(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    lp__py_syms *out = data;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn)
        return 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *gnu = NULL;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == DT_SYMTAB)
            symtab = (const ElfW(Sym) *)lp__dyn_addr(info->dlpi_addr, dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_STRTAB)
            strtab = (const char *)lp__dyn_addr(info->dlpi_addr, dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_GNU_HASH)
            gnu = (const uint32_t *)lp__dyn_addr(info->dlpi_addr, dyn->d_un.d_ptr);
    }
    if (!symtab || !strtab || !gnu || gnu[0] == 0)
        return 0;
    uint32_t nbuckets = gnu[0], symoffset = gnu[1], bloom_words = gnu[2];
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(gnu + 4) + bloom_words);
    const uint32_t *chain = buckets + nbuckets;
    int missing = 0;
    for (int k = 0; k < LP__PY_NSYMS; k++) {
        if (out->addr[k])
            continue; /* an earlier object defines it */
        uint32_t h = lp__gnu_hash(lp__py_names[k]);
        for (uint32_t i = buckets[h % nbuckets]; i >= symoffset && i != 0; i++) {
            uint32_t h2 = chain[i - symoffset];
            const ElfW(Sym) *sym = &symtab[i];
            if ((h | 1) == (h2 | 1) && sym->st_shndx != SHN_UNDEF && sym->st_value != 0 &&
                strcmp(strtab + sym->st_name, lp__py_names[k]) == 0) {
                out->addr[k] = info->dlpi_addr + sym->st_value;
                out->size[k] = sym->st_size;
                if (k == LP__PY_SYM_EVAL)
                    lp__text_range(info, &out->text_lo, &out->text_hi);
                break;
            }
            if (h2 & 1)
                break;
        }
        missing += out->addr[k] == 0;
    }
    return missing == 0; /* all found: stop */
}

static void lp__py_look(void);

bool lp__py_ready(unsigned long long loads)
{
    if (atomic_load_explicit(&L.ready, memory_order_acquire))
        return true;
    unsigned long long looked = atomic_load_explicit(&L.looked, memory_order_relaxed);
    if (looked == loads + 1 || L.seen)
        return false; /* nothing new loaded, or a runtime that cannot be read */
    /* One thread looks; the others go on without Python frames meanwhile. */
    if (!atomic_compare_exchange_strong(&L.looked, &looked, loads + 1))
        return false;
    lp__py_look();
    return atomic_load_explicit(&L.ready, memory_order_acquire);
}

const char *lp__py_status(void)
{
    return L.seen ? L.status : NULL;
}

#ifdef GRADPROF_PYTHON_FRAMES

#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>

#define LP__PY_MAX_WALK 4096 /* frames: a cycle or a damaged chain ends here */

/* The interpreter's functions and objects, set once before L.ready. */
static struct {
    PyThreadState *(*this_thread_state)(void);
    int (*addr2line)(PyCodeObject *, int);
    int (*is_initialized)(void);
    int (*is_finalizing)(void);
    const void *code_type, *unicode_type;
    uintptr_t eval_lo, eval_hi;
    uintptr_t text_lo, text_hi; /* the interpreter's own code: libpython or the executable */
} P;

/* One look for the interpreter; lp__py_ready lets one thread look at a time. */
static void lp__py_look(void)
{
    lp__py_syms f;
    memset(&f, 0, sizeof f);
    dl_iterate_phdr(lp__py_scan, &f);
    if (!f.addr[LP__PY_SYM_GIL])
        return; /* no Python runtime (yet) */
    L.seen = true;
    const unsigned long *version = (const unsigned long *)f.addr[LP__PY_SYM_VERSION];
    char why[80];
    if (!version || (*version >> 16) != (PY_VERSION_HEX >> 16)) {
        if (version)
            snprintf(why, sizeof why, "the interpreter is CPython %lu.%lu, built for %d.%d",
                     *version >> 24, (*version >> 16) & 0xFF, PY_MAJOR_VERSION, PY_MINOR_VERSION);
        else
            snprintf(why, sizeof why, "the interpreter is older than CPython 3.11");
        lp__py_off(why);
        return;
    }
    for (int k = 0; k < LP__PY_NSYMS; k++) {
        if (k != LP__PY_SYM_FINALIZING && !f.addr[k]) {
            snprintf(why, sizeof why, "the interpreter does not export %s", lp__py_names[k]);
            lp__py_off(why);
            return;
        }
    }
    if (f.size[LP__PY_SYM_EVAL] == 0) {
        lp__py_off("the eval loop's size is not in the symbol table");
        return;
    }
    *(void **)&P.this_thread_state = (void *)f.addr[LP__PY_SYM_GIL];
    *(void **)&P.addr2line = (void *)f.addr[LP__PY_SYM_ADDR2LINE];
    *(void **)&P.is_initialized = (void *)f.addr[LP__PY_SYM_INITIALIZED];
    *(void **)&P.is_finalizing = (void *)f.addr[LP__PY_SYM_FINALIZING];
    P.code_type = (const void *)f.addr[LP__PY_SYM_CODE_TYPE];
    P.unicode_type = (const void *)f.addr[LP__PY_SYM_UNICODE_TYPE];
    P.eval_lo = f.addr[LP__PY_SYM_EVAL];
    P.eval_hi = P.eval_lo + f.size[LP__PY_SYM_EVAL];
    P.text_lo = f.text_lo;
    P.text_hi = f.text_hi;
    snprintf(L.status, sizeof L.status, "on (CPython %lu.%lu.%lu)", *version >> 24,
             (*version >> 16) & 0xFF, (*version >> 8) & 0xFF);
    atomic_store_explicit(&L.ready, true, memory_order_release);
}

bool lp__py_is_eval(uintptr_t ip)
{
    return ip > P.eval_lo && ip <= P.eval_hi; /* a return address is after its call */
}

bool lp__py_is_interpreter(uintptr_t ip)
{
    return ip > P.text_lo && ip <= P.text_hi;
}

/* Reads frame f into o; false when f is not a frame this walk can read (its code is not a code
 * object). */
static bool lp__py_read(const _PyInterpreterFrame *f, lp__pyframe *o)
{
    PyCodeObject *code = f->f_code;
    if (!code || (const void *)Py_TYPE(code) != P.code_type)
        return false;
    o->code = code;
    o->filename = code->co_filename;
    o->qualname = code->co_qualname;
    o->firstlineno = code->co_firstlineno;
    ptrdiff_t lasti = f->prev_instr - _PyCode_CODE(code);
    o->lasti = lasti >= 0 && lasti < Py_SIZE(code) ? (int32_t)lasti : -1;
    o->entry = f->is_entry;
    o->hidden = false;
    for (int i = 0, k = atomic_load_explicit(&H.n, memory_order_acquire); i < k; i++)
        o->hidden |= atomic_load_explicit(&H.code[i], memory_order_relaxed) == code;
    return true;
}

int lp__py_walk(lp__pyframe *out, int max, int outer)
{
    if (!P.is_initialized() || (P.is_finalizing && P.is_finalizing()))
        return 0;
    PyThreadState *ts = P.this_thread_state();
    if (!ts || !ts->cframe)
        return 0;
    int n = 0, walked = 0;
    _PyInterpreterFrame *f = ts->cframe->current_frame;
    for (; f && n < max && walked < LP__PY_MAX_WALK; f = f->previous, walked++)
        if (!lp__py_read(f, &out[n++]))
            return n - 1; /* stop rather than guess */
    if (!f || outer <= 0)
        return n;
    /* Beyond max: only the links (and that each frame runs a code object) are read, the last
     * `outer` frames kept in a ring. */
    enum { RING = LP_MAX_STACK_DEPTH };
    const _PyInterpreterFrame *ring[RING];
    int seen = 0;
    if (outer > RING)
        outer = RING;
    for (; f && walked < LP__PY_MAX_WALK; f = f->previous, walked++) {
        if (!f->f_code || (const void *)Py_TYPE(f->f_code) != P.code_type)
            break;
        ring[seen++ % outer] = f;
    }
    int keep = seen < outer ? seen : outer;
    for (int j = seen - keep; j < seen; j++)
        if (!lp__py_read(ring[j % outer], &out[n++]))
            return n - 1;
    return n;
}

int lp__py_line(const lp__pyframe *f)
{
    if (f->lasti < 0)
        return f->firstlineno;
    int line = P.addr2line((PyCodeObject *)f->code, f->lasti * (int)sizeof(_Py_CODEUNIT));
    return line > 0 ? line : f->firstlineno;
}

/* Appends code point c as UTF-8 at out[*n] if it fits before `end`. */
static bool lp__utf8_put(char *out, size_t *n, size_t end, uint32_t c)
{
    char b[4];
    size_t k;
    if (c < 0x80) {
        b[0] = (char)c;
        k = 1;
    } else if (c < 0x800) {
        b[0] = (char)(0xC0 | c >> 6);
        b[1] = (char)(0x80 | (c & 0x3F));
        k = 2;
    } else if (c < 0x10000) {
        b[0] = (char)(0xE0 | c >> 12);
        b[1] = (char)(0x80 | (c >> 6 & 0x3F));
        b[2] = (char)(0x80 | (c & 0x3F));
        k = 3;
    } else {
        b[0] = (char)(0xF0 | c >> 18);
        b[1] = (char)(0x80 | (c >> 12 & 0x3F));
        b[2] = (char)(0x80 | (c >> 6 & 0x3F));
        b[3] = (char)(0x80 | (c & 0x3F));
        k = 4;
    }
    if (*n + k > end)
        return false;
    memcpy(out + *n, b, k);
    *n += k;
    return true;
}

/*
 * Appends the text of unicode object `o` at out[*n], at most up to `end`, as UTF-8: compact
 * strings only, read from the PyASCIIObject layout (ASCII data in place, else the cached UTF-8
 * copy, else the code points encoded here); "?" for anything else. Cut on a character boundary.
 */
static void lp__str_put(const void *o, char *out, size_t *n, size_t end)
{
    const PyASCIIObject *a = o;
    if (!a || (const void *)Py_TYPE(a) != P.unicode_type || !a->state.compact || !a->state.ready ||
        a->length < 0) {
        lp__utf8_put(out, n, end, '?');
        return;
    }
    size_t len = (size_t)a->length;
    if (a->state.ascii) {
        const char *s = (const char *)(a + 1);
        size_t k = len < end - *n ? len : end - *n;
        memcpy(out + *n, s, k);
        *n += k;
        return;
    }
    const PyCompactUnicodeObject *c = o;
    const void *data = c + 1;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = a->state.kind == PyUnicode_1BYTE_KIND   ? ((const uint8_t *)data)[i]
                      : a->state.kind == PyUnicode_2BYTE_KIND ? ((const uint16_t *)data)[i]
                                                              : ((const uint32_t *)data)[i];
        if (cp > 0x10FFFF)
            cp = 0xFFFD;
        if (!lp__utf8_put(out, n, end, cp))
            return;
    }
}

size_t lp__py_path(const lp__pyframe *f, char *out, size_t size)
{
    if (size < 8) {
        if (size)
            out[0] = '\0';
        return 0;
    }
    size_t n = 0, limit = size - 1;
    memcpy(out, "py:", 3);
    n = 3;
    size_t file_end = n + (limit - n) * 3 / 4; /* room for the name after the file */
    lp__str_put(f->filename, out, &n, file_end);
    out[n++] = ':';
    size_t name_at = n;
    lp__str_put(f->qualname, out, &n, limit);
    for (size_t i = name_at; i < n; i++)
        if (out[i] == ':')
            out[i] = '.';
    out[n] = '\0';
    return n;
}

#else /* no CPython 3.11 headers at build time: no Python frames */

static void lp__py_look(void)
{
    lp__py_syms f;
    memset(&f, 0, sizeof f);
    dl_iterate_phdr(lp__py_scan, &f);
    if (!f.addr[LP__PY_SYM_GIL])
        return;
    L.seen = true;
    lp__py_off("gradprof was built without CPython 3.11's internal headers (python3.11-dev)");
}

bool lp__py_is_eval(uintptr_t ip)
{
    (void)ip;
    return false;
}

bool lp__py_is_interpreter(uintptr_t ip)
{
    (void)ip;
    return false;
}

int lp__py_walk(lp__pyframe *out, int max, int outer)
{
    (void)out;
    (void)max;
    (void)outer;
    return 0;
}

int lp__py_line(const lp__pyframe *f)
{
    return f->firstlineno;
}

size_t lp__py_path(const lp__pyframe *f, char *out, size_t size)
{
    (void)f;
    if (size)
        out[0] = '\0';
    return 0;
}

#endif
