/*
 * symbolize — module + offset to function, file and line with libdwfl; see symbolize.h.
 *
 * One Dwfl per module, with the file reported at bias 0 (dwfl_report_elf with base 0 and
 * add_p_vaddr): dwfl addresses are then the file's own link-time addresses, which is exactly what a
 * recorded offset is (see symbolize.h). One Dwfl per module rather than one for all keeps modules
 * that were loaded at the same address at different times (dlclose + dlopen) apart.
 */
#define _GNU_SOURCE /* vasprintf */
#include "symbolize.h"

#include "hashmap.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <gelf.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* libstdc++'s demangler (the Itanium C++ ABI's __cxa_demangle); elfutils does not export one. */
char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

enum { KIND_RETURN = 0, KIND_PC = 1 };

/* An address range of a compilation unit, for the CU lookup fallback (sym_find_cu). */
typedef struct sym_cu_range {
    Dwarf_Addr lo, hi; /* DWARF addresses, [lo, hi) */
    Dwarf_Die cu;
} sym_cu_range;

/* A module file (path + build-id): opened once, shared by every symbolizer that shares its core
 * and registers the same file (see gp_symbolizer_share). */
typedef struct sym_module {
    uint32_t id;          /* the id it was first registered with (messages) */
    char *path;           /* owned */
    char *build_id;       /* owned, lowercase hex, "" if not recorded */
    const char *basename; /* points into path */
    bool shareable;       /* a path with a basename: registrations of it can share this file */
    bool opened;          /* sym_module_open() ran */
    Dwfl *dwfl;           /* owned; NULL when the file could not be reported */
    Dwfl_Module *mod;     /* NULL when the module is unusable (quality GP_SYM_NONE) */
    Dwarf *dwarf;         /* owned by dwfl; NULL without DWARF */
    Dwarf_Addr dwarf_bias;
    sym_cu_range *cu_ranges; /* owned; sorted by lo; built on the first fallback lookup */
    size_t ncu_ranges;
    bool cu_ranges_built;
    gp_sym_quality quality;
    char *why; /* owned; NULL with GP_SYM_FULL */
    struct sym_fn *fns; /* owned; function symbols sorted by address (sym_build_fns) */
    size_t nfns;
    bool fns_built;
} sym_module;

/* A defined symbol: [addr, addr + size) is `name` (owned by libelf, valid while open). Data
 * symbols are kept too, so that an address in data is not taken for the function before it. */
typedef struct sym_fn {
    GElf_Addr addr;
    GElf_Xword size;
    const char *name;
    int rank; /* preference at equal addresses: functions first, then global < weak < local */
    bool function;
} sym_fn;

/* A cached lookup: `where` is SYM_FILE | the file's index for a registered module, else the
 * module id itself (0, or an id no module was registered with). */
typedef struct sym_entry {
    uint64_t offset;
    uint32_t where;
    uint32_t kind;
    gp_symbol *sym; /* owned; NULL = empty slot */
} sym_entry;

#define SYM_FILE 0x80000000u /* trace module ids are far below */

/* A block of symbols (with their fallback names): tens of thousands of small records that live
 * as long as the core, so they are carved from blocks instead of costing a malloc header each. */
typedef struct sym_block {
    struct sym_block *next;
    size_t used, cap; /* bytes of data */
    uint64_t data[];
} sym_block;

#define SYM_BLOCK_BYTES ((size_t)64 << 10)

/* What symbolizers sharing a core have in common: the files, the lookups made, the strings. */
typedef struct sym_core {
    sym_module *modules; /* the files, in order of registration */
    size_t nmodules, modules_cap;
    sym_entry *cache; /* open addressing, linear probing; capacity a power of two */
    sym_block *blocks; /* where the cache's symbols live, the newest first */
    size_t cache_count, cache_cap;
    char **strings; /* interned strings (owned); open addressing, capacity a power of two */
    size_t string_count, string_cap;
    unsigned refs; /* symbolizers using it */
} sym_core;

/* One registration: a trace's module id -> a file of the core. */
typedef struct sym_reg {
    uint32_t id;
    uint32_t file;       /* index into core->modules */
    uint64_t base, size; /* as recorded; for messages only */
} sym_reg;

struct gp_symbolizer {
    sym_core *core;
    sym_reg *regs; /* sorted by id */
    size_t nregs, regs_cap;
    gp_sym_stats stats;
};

/* Default search for separate debug files: by build-id and .gnu_debuglink, as eu-addr2line does. */
static char *sym_debuginfo_path = NULL;
static const Dwfl_Callbacks sym_callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &sym_debuginfo_path,
};

char *gp__sym_demangle(const char *name)
{
    if (name == NULL || strncmp(name, "_Z", 2) != 0)
        return NULL;
    int status = 0;
    char *out = __cxa_demangle(name, NULL, NULL, &status);
    if (status != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* ---- names as tables show them ------------------------------------------------------------ */

static bool sym_ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* The length of the operator's name after the word "operator" at `p` ("()", "<<", " new[]",
 * " unsigned long"), up to the '(' of its parameter list; 0 when `p` is no operator name. */
static size_t sym_operator_len(const char *p)
{
    if (!strncmp(p, "()", 2) || !strncmp(p, "[]", 2))
        return 2;
    if (*p == ' ') { /* new, delete, a conversion: up to the parameter list */
        size_t n = strcspn(p, "(");
        return p[n] ? n : 0;
    }
    size_t n = strspn(p, "+-*/%^&|~!=<>,");
    return n && (p[n] == '(' || (p[n] == ' ' && p[n + 1] == '<')) ? n : 0; /* "<< <T>(" */
}

const char *gp_function_short_name(const char *name, char *buf, size_t size)
{
    if (!strpbrk(name, "(<[ ") || size == 0)
        return name; /* a C name, or a fallback */
    static const char anon[] = "(anonymous namespace)";
    size_t o = 0, start = 0; /* start: after the return type, if there is one */
    int braces = 0;
    for (const char *p = name; *p;) {
        size_t copy = 1;
        bool op = false;
        if (!strncmp(p, anon, sizeof anon - 1)) {
            copy = sizeof anon - 1;
        } else if (!strncmp(p, "operator", 8) && (p == name || !sym_ident_char(p[-1])) &&
                   !sym_ident_char(p[8])) {
            size_t n = sym_operator_len(p + 8);
            if (n == 0)
                return name;
            copy = 8 + n;
            op = true;
        } else if (*p == '<' || *p == '(' || *p == '[') {
            /* template arguments, parameters or an ABI tag: dropped, with what they hold */
            int d = 0;
            do {
                if (*p == '<' || *p == '(' || *p == '[')
                    d++;
                else if (*p == '>' || *p == ')' || *p == ']')
                    d--;
                p++;
            } while (*p && d > 0);
            if (d != 0)
                return name;
            /* a parameter list's qualifiers, a clone's suffix */
            for (;;) {
                static const char *const after[] = {" const", " volatile", " &&", " &",
                                                    " noexcept"};
                size_t k = 0, n = 0;
                for (; k < sizeof after / sizeof *after; k++)
                    if (!strncmp(p, after[k], n = strlen(after[k])) && !sym_ident_char(p[n]))
                        break;
                if (k < sizeof after / sizeof *after)
                    p += n;
                else if (!strncmp(p, " [clone ", 8) && strchr(p, ']'))
                    p = strchr(p, ']') + 1;
                else
                    break;
            }
            continue;
        } else if (*p == '>' || *p == ')' || *p == ']') {
            return name; /* unbalanced: not a name this reads */
        } else if (*p == '{') {
            braces++;
        } else if (*p == '}') {
            braces--;
        } else if (*p == ' ' && braces == 0) { /* what came before is the return type */
            start = o + 1;
        }
        if (o + copy >= size)
            return name;
        memcpy(buf + o, p, copy);
        o += copy;
        p += copy;
        if (op && p[0] == ' ' && p[1] == '<')
            p++; /* the space between an operator and its template arguments */
    }
    buf[o] = '\0';
    return start < o && braces == 0 ? buf + start : name;
}

const char *gp_function_signature(const char *name, char *buf, size_t size)
{
    /* the parameter list: the last '(' group outside any other bracket, operator names passed */
    const char *open = NULL, *close = NULL, *group = NULL;
    int d = 0;
    for (const char *p = name; *p; p++) {
        if (d == 0 && !strncmp(p, "operator", 8) && (p == name || !sym_ident_char(p[-1])) &&
            !sym_ident_char(p[8])) {
            size_t n = sym_operator_len(p + 8);
            if (n) {
                p += 8 + n - 1;
                continue;
            }
        }
        if (*p == '(' && d == 0)
            group = p;
        if (*p == '<' || *p == '(' || *p == '[' || *p == '{') {
            d++;
        } else if ((*p == '>' || *p == ')' || *p == ']' || *p == '}') && --d == 0 && *p == ')' &&
                   group) {
            open = group;
            close = p;
            group = NULL;
        }
    }
    const char *s = gp_function_short_name(name, buf, size);
    if (!open || d != 0 || s == name)
        return s;
    size_t o = strlen(s);
    memmove(buf, s, o + 1);
    /* the parameters without their template arguments, then the qualifiers, not a clone's
     * suffix */
    const char *tail = strstr(close, " [clone ");
    const char *end = tail ? tail : close + strlen(close);
    for (const char *p = open; p < end && o + 1 < size; p++) {
        if (*p == '<' && p < close) {
            int t = 0;
            do
                t += *p == '<' ? 1 : *p == '>' ? -1 : 0;
            while (t > 0 && ++p < close);
            continue;
        }
        buf[o++] = *p;
    }
    if (o + 1 >= size)
        return name;
    buf[o] = '\0';
    return buf;
}

/* ---- string interning --------------------------------------------------------------------- */

/* The hash of a string for the string table. */
static uint64_t sym_hash_str(const char *str)
{
    uint64_t h, unused;
    gp__hash_text(str, strlen(str), &h, &unused);
    return h;
}

static int sym_strings_grow(sym_core *s)
{
    size_t cap = s->string_cap ? s->string_cap * 2 : 256;
    char **slots = calloc(cap, sizeof *slots);
    if (slots == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < s->string_cap; i++) {
        char *str = s->strings[i];
        if (str == NULL)
            continue;
        size_t j = sym_hash_str(str) & (cap - 1);
        while (slots[j] != NULL)
            j = (j + 1) & (cap - 1);
        slots[j] = str;
    }
    free(s->strings);
    s->strings = slots;
    s->string_cap = cap;
    return 0;
}

/* Returns the symbolizer's copy of str (one per distinct string), or NULL when out of memory. */
static const char *sym_intern_core(sym_core *s, const char *str)
{
    if (2 * (s->string_count + 1) > s->string_cap && sym_strings_grow(s) != 0)
        return NULL;
    size_t j = sym_hash_str(str) & (s->string_cap - 1);
    while (s->strings[j] != NULL) {
        if (strcmp(s->strings[j], str) == 0)
            return s->strings[j];
        j = (j + 1) & (s->string_cap - 1);
    }
    char *copy = strdup(str);
    if (copy == NULL)
        return NULL;
    s->strings[j] = copy;
    s->string_count++;
    return copy;
}

static const char *sym_intern(gp_symbolizer *s, const char *str)
{
    return sym_intern_core(s->core, str);
}

/* Interns the demangled form of name when it is a C++ name, else name itself. */
static const char *sym_intern_demangled(gp_symbolizer *s, const char *name)
{
    char *demangled = gp__sym_demangle(name);
    const char *out = sym_intern(s, demangled ? demangled : name);
    free(demangled);
    return out;
}

/* ---- modules ------------------------------------------------------------------------------- */

gp_symbolizer *gp_symbolizer_new(void)
{
    gp_symbolizer *s = calloc(1, sizeof *s);
    if (s && !(s->core = calloc(1, sizeof *s->core))) {
        free(s);
        return NULL;
    }
    if (s)
        s->core->refs = 1;
    return s;
}

gp_symbolizer *gp_symbolizer_share(gp_symbolizer *with)
{
    if (with == NULL)
        return NULL;
    gp_symbolizer *s = calloc(1, sizeof *s);
    if (s) {
        s->core = with->core;
        s->core->refs++;
    }
    return s;
}

/* Room for a symbol and `extra` bytes after it, valid until the core is freed; NULL when out of
 * memory. */
static gp_symbol *sym_new(sym_core *c, size_t extra)
{
    size_t need = (sizeof(gp_symbol) + extra + 7) & ~(size_t)7;
    sym_block *b = c->blocks;
    if (b == NULL || b->cap - b->used < need) {
        size_t cap = need > SYM_BLOCK_BYTES ? need : SYM_BLOCK_BYTES;
        b = malloc(sizeof *b + cap);
        if (b == NULL)
            return NULL;
        *b = (sym_block){.next = c->blocks, .cap = cap};
        c->blocks = b;
    }
    gp_symbol *s = (gp_symbol *)((char *)b->data + b->used);
    b->used += need;
    return s;
}

static void sym_core_free(sym_core *c)
{
    for (size_t i = 0; i < c->nmodules; i++) {
        sym_module *m = &c->modules[i];
        if (m->dwfl != NULL)
            dwfl_end(m->dwfl);
        free(m->path);
        free(m->build_id);
        free(m->why);
        free(m->cu_ranges);
        free(m->fns);
    }
    free(c->modules);
    for (sym_block *b = c->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(c->cache);
    for (size_t i = 0; i < c->string_cap; i++)
        free(c->strings[i]);
    free(c->strings);
    free(c);
}

void gp_symbolizer_free(gp_symbolizer *s)
{
    if (s == NULL)
        return;
    if (--s->core->refs == 0)
        sym_core_free(s->core);
    free(s->regs);
    free(s);
}

/* The registration of this id, or NULL. */
static sym_reg *sym_find_reg(gp_symbolizer *s, uint32_t id)
{
    size_t lo = 0, hi = s->nregs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->regs[mid].id == id)
            return &s->regs[mid];
        if (s->regs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The file registered with this id, or NULL. */
static sym_module *sym_find_module(gp_symbolizer *s, uint32_t id)
{
    sym_reg *r = sym_find_reg(s, id);
    return r ? &s->core->modules[r->file] : NULL;
}

/* The index of the core's file for (path, build_id), added if new (build_id already lowercase);
 * -ENOMEM. */
static int64_t sym_file_get(sym_core *c, uint32_t id, const char *path, const char *build_id)
{
    const char *slash = strrchr(path, '/');
    bool shareable = (slash ? slash[1] : path[0]) != '\0';
    if (shareable)
        for (size_t i = 0; i < c->nmodules; i++) /* a few hundred files at most */
            if (c->modules[i].shareable && strcmp(c->modules[i].path, path) == 0 &&
                strcmp(c->modules[i].build_id, build_id) == 0)
                return (int64_t)i;
    if (c->nmodules == c->modules_cap) {
        size_t cap = c->modules_cap ? c->modules_cap * 2 : 16;
        sym_module *grown = realloc(c->modules, cap * sizeof *grown);
        if (grown == NULL)
            return -ENOMEM;
        c->modules = grown;
        c->modules_cap = cap;
    }
    sym_module m = {.id = id, .shareable = shareable};
    m.path = strdup(path);
    m.build_id = strdup(build_id);
    if (m.path == NULL || m.build_id == NULL) {
        free(m.path);
        free(m.build_id);
        return -ENOMEM;
    }
    slash = strrchr(m.path, '/');
    m.basename = slash ? slash + 1 : m.path;
    c->modules[c->nmodules] = m;
    return (int64_t)c->nmodules++;
}

int gp_symbolizer_add_module(gp_symbolizer *s, uint32_t module_id, const char *path,
                             const char *build_id, uint64_t base, uint64_t size)
{
    if (s == NULL || module_id == 0 || path == NULL)
        return -EINVAL;
    if (sym_find_reg(s, module_id) != NULL)
        return -EEXIST;
    if (s->nregs == s->regs_cap) {
        size_t cap = s->regs_cap ? s->regs_cap * 2 : 16;
        sym_reg *grown = realloc(s->regs, cap * sizeof *grown);
        if (grown == NULL)
            return -ENOMEM;
        s->regs = grown;
        s->regs_cap = cap;
    }
    char *lower = strdup(build_id ? build_id : "");
    if (lower == NULL)
        return -ENOMEM;
    for (char *p = lower; *p; p++)
        if (*p >= 'A' && *p <= 'F')
            *p = (char)(*p - 'A' + 'a');
    int64_t file = sym_file_get(s->core, module_id, path, lower);
    free(lower);
    if (file < 0)
        return (int)file;
    sym_reg r = {.id = module_id, .file = (uint32_t)file, .base = base, .size = size};
    /* Keep the array sorted by id; trace module ids usually arrive in order, so this appends. */
    size_t at = s->nregs;
    while (at > 0 && s->regs[at - 1].id > module_id)
        at--;
    memmove(&s->regs[at + 1], &s->regs[at], (s->nregs - at) * sizeof r);
    s->regs[at] = r;
    s->nregs++;
    return 0;
}

/* Marks the module unusable (or degraded) with a formatted reason. */
__attribute__((format(printf, 3, 4))) static void sym_set_why(sym_module *m, gp_sym_quality quality,
                                                              const char *fmt, ...)
{
    m->quality = quality;
    free(m->why);
    m->why = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&m->why, fmt, ap) < 0)
        m->why = NULL; /* the quality still says it; the reason is lost to out-of-memory */
    va_end(ap);
}

static bool sym_is_function(const GElf_Sym *sym)
{
    int type = GELF_ST_TYPE(sym->st_info);
    return type == STT_FUNC || type == STT_GNU_IFUNC;
}

/* Whether the module's symbol table (.symtab, else .dynsym) defines at least one function. */
static bool sym_has_functions(Dwfl_Module *mod)
{
    int n = dwfl_module_getsymtab(mod);
    for (int i = 1; i < n; i++) {
        GElf_Sym sym;
        GElf_Word shndx;
        const char *name = dwfl_module_getsym(mod, i, &sym, &shndx);
        if (name != NULL && sym_is_function(&sym) && sym.st_shndx != SHN_UNDEF)
            return true;
    }
    return false;
}

/* Opens the module's file once and decides its quality; never fails, only degrades. */
/* Whether the module is a Python function's pseudo-module, "py:<file>:<qualname>". */
static bool sym_is_python(const sym_module *m)
{
    return strncmp(m->path, "py:", 3) == 0;
}

static void sym_module_open(gp_symbolizer *s, sym_module *m)
{
    if (m->opened)
        return;
    m->opened = true;
    s->stats.modules_opened++;
    m->quality = GP_SYM_NONE;
    if (sym_is_python(m)) { /* no file to open: the path says it all */
        m->quality = GP_SYM_FULL;
        return;
    }
    if (m->path[0] == '\0') {
        sym_set_why(m, GP_SYM_NONE, "module %" PRIu32 ": no file path recorded", m->id);
        return;
    }
    /* stat first: opening a FIFO or device named by a stale trace could block or have effects. */
    struct stat st;
    if (stat(m->path, &st) != 0) {
        sym_set_why(m, GP_SYM_NONE, "%s: cannot open: %s", m->path, strerror(errno));
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        sym_set_why(m, GP_SYM_NONE, "%s: not a regular file", m->path);
        return;
    }
    m->dwfl = dwfl_begin(&sym_callbacks);
    if (m->dwfl == NULL) {
        sym_set_why(m, GP_SYM_NONE, "%s: libdw: %s", m->path, dwfl_errmsg(-1));
        return;
    }
    dwfl_report_begin(m->dwfl);
    Dwfl_Module *mod = dwfl_report_elf(m->dwfl, m->basename, m->path, -1, 0, true);
    dwfl_report_end(m->dwfl, NULL, NULL);
    if (mod == NULL) {
        sym_set_why(m, GP_SYM_NONE, "%s: not a usable ELF file: %s", m->path, dwfl_errmsg(-1));
        return;
    }
    if (m->build_id[0] != '\0') {
        const unsigned char *bits = NULL;
        GElf_Addr vaddr;
        int len = dwfl_module_build_id(mod, &bits, &vaddr);
        char hex[2 * 64 + 1] = "";
        for (int i = 0; i < len && i < 64; i++)
            snprintf(hex + 2 * i, 3, "%02x", bits[i]);
        if (len <= 0) {
            sym_set_why(m, GP_SYM_NONE,
                        "%s: build-id mismatch: the trace recorded %s, the file has none "
                        "(the file changed since the recording)",
                        m->path, m->build_id);
            return;
        }
        if (strcmp(hex, m->build_id) != 0) {
            sym_set_why(m, GP_SYM_NONE,
                        "%s: build-id mismatch: the trace recorded %s, the file has %s "
                        "(the file changed since the recording)",
                        m->path, m->build_id, hex);
            return;
        }
    }
    m->dwarf = dwfl_module_getdwarf(mod, &m->dwarf_bias);
    if (m->dwarf != NULL) {
        m->mod = mod;
        m->quality = GP_SYM_FULL;
    } else if (sym_has_functions(mod)) {
        m->mod = mod;
        sym_set_why(m, GP_SYM_NAMES,
                    "%s: no DWARF debug info (not in the file, no separate debug file found by "
                    "build-id or debuglink): function names only, no file:line",
                    m->path);
    } else {
        sym_set_why(m, GP_SYM_NONE, "%s: no symbol table and no debug info (stripped)", m->path);
    }
}

gp_sym_quality gp_symbolizer_module_quality(gp_symbolizer *s, uint32_t module_id, const char **why)
{
    sym_module *m = s ? sym_find_module(s, module_id) : NULL;
    if (why != NULL)
        *why = NULL;
    if (m == NULL) {
        if (why != NULL)
            *why = "module not in the trace's module map";
        return GP_SYM_NONE;
    }
    sym_module_open(s, m);
    if (why != NULL && m->quality != GP_SYM_FULL)
        *why = m->why ? m->why : "out of memory";
    return m->quality;
}

gp_sym_stats gp_symbolizer_stats(const gp_symbolizer *s)
{
    gp_sym_stats none = {0};
    return s ? s->stats : none;
}

/* ---- resolution ---------------------------------------------------------------------------- */

/* The function name a DWARF subprogram or inlined_subroutine DIE stands for: its linkage name
 * demangled, else its plain name (both followed through abstract_origin or specification); NULL
 * if it has neither. */
static const char *sym_die_function(gp_symbolizer *s, Dwarf_Die *die)
{
    Dwarf_Attribute attr;
    const char *linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
    if (linkage == NULL)
        linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
    if (linkage != NULL)
        return sym_intern_demangled(s, linkage);
    const char *name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attr));
    return name ? sym_intern(s, name) : NULL;
}

static bool sym_is_function_scope(Dwarf_Die *die)
{
    int tag = dwarf_tag(die);
    return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine;
}

static int sym_cu_range_cmp(const void *a, const void *b)
{
    const sym_cu_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Collects the address ranges of every compilation unit, sorted. Ranges starting at 0 are the
 * placeholders linkers leave for discarded code (address 0 is never code in a loaded object). */
static void sym_build_cu_ranges(sym_module *m)
{
    m->cu_ranges_built = true;
    size_t cap = 0;
    Dwarf_CU *unit = NULL, *next = NULL;
    Dwarf_Half version;
    uint8_t unit_type;
    Dwarf_Die cu;
    while (dwarf_get_units(m->dwarf, unit, &next, &version, &unit_type, &cu, NULL) == 0) {
        unit = next;
        if (unit_type != DW_UT_compile && unit_type != DW_UT_skeleton)
            continue;
        Dwarf_Addr base, lo, hi;
        ptrdiff_t off = 0;
        while ((off = dwarf_ranges(&cu, off, &base, &lo, &hi)) > 0) {
            if (lo == 0 || lo >= hi)
                continue;
            if (m->ncu_ranges == cap) {
                size_t ncap = cap ? cap * 2 : 64;
                sym_cu_range *grown = realloc(m->cu_ranges, ncap * sizeof *grown);
                if (grown == NULL)
                    goto done; /* out of memory: keep what was collected */
                m->cu_ranges = grown;
                cap = ncap;
            }
            m->cu_ranges[m->ncu_ranges++] = (sym_cu_range){.lo = lo, .hi = hi, .cu = cu};
        }
    }
done:
    qsort(m->cu_ranges, m->ncu_ranges, sizeof *m->cu_ranges, sym_cu_range_cmp);
}

/* Finds the compilation unit covering pc (a dwfl address) and the bias to subtract for DWARF
 * addresses. libdwfl finds CUs through .debug_aranges, which clang does not emit by default and
 * elfutils 0.188 does not synthesize, so when it fails the CUs' own ranges are searched. */
static bool sym_find_cu(sym_module *m, Dwarf_Addr pc, Dwarf_Die *cu_out, Dwarf_Addr *bias)
{
    if (m->dwarf == NULL)
        return false;
    Dwarf_Die *cu = dwfl_module_addrdie(m->mod, pc, bias);
    if (cu != NULL) {
        *cu_out = *cu;
        return true;
    }
    if (!m->cu_ranges_built)
        sym_build_cu_ranges(m);
    *bias = m->dwarf_bias;
    Dwarf_Addr addr = pc - m->dwarf_bias;
    size_t lo = 0, hi = m->ncu_ranges; /* find the last range with lo <= addr */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->cu_ranges[mid].lo <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || addr >= m->cu_ranges[lo - 1].hi)
        return false;
    *cu_out = m->cu_ranges[lo - 1].cu;
    return true;
}

/* Fills function / inlined_into / file / line of out from the module at address pc. */
static int sym_fn_cmp(const void *a, const void *b)
{
    const sym_fn *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return x->rank - y->rank;
}

/* Sorts the module's symbols once: dwfl_module_addrinfo scans the whole symbol table on
 * every lookup, which for a library such as libtorch (100k+ symbols) costs milliseconds per
 * address. */
static void sym_build_fns(sym_module *m)
{
    m->fns_built = true;
    int n = dwfl_module_getsymtab(m->mod);
    if (n <= 1)
        return;
    m->fns = malloc((size_t)n * sizeof *m->fns);
    if (!m->fns)
        return;
    for (int i = 1; i < n; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        const char *name = dwfl_module_getsym_info(m->mod, i, &sym, &addr, NULL, NULL, NULL);
        int type = GELF_ST_TYPE(sym.st_info);
        if (!name || !*name || sym.st_shndx == SHN_UNDEF ||
            (type != STT_OBJECT && !sym_is_function(&sym)))
            continue;
        int bind = GELF_ST_BIND(sym.st_info);
        bool function = sym_is_function(&sym);
        m->fns[m->nfns++] = (sym_fn){addr, sym.st_size, name,
                                     (function ? 0 : 3) +
                                         (bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2),
                                     function};
    }
    qsort(m->fns, m->nfns, sizeof *m->fns, sym_fn_cmp);
}

/* The function containing pc: the nearest symbol starting at or before it (the preferred one
 * among equals), if that is a function and pc is inside its size (or it has no size). */
static const sym_fn *sym_find_fn(sym_module *m, GElf_Addr pc)
{
    if (!m->fns_built)
        sym_build_fns(m);
    size_t lo = 0, hi = m->nfns;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->fns[mid].addr <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    size_t i = lo - 1;
    while (i > 0 && m->fns[i - 1].addr == m->fns[i].addr)
        i--;
    const sym_fn *f = &m->fns[i];
    return f->function && (f->size == 0 || pc - f->addr < f->size) ? f : NULL;
}

static void sym_resolve(gp_symbolizer *s, sym_module *m, Dwarf_Addr pc, gp_symbol *out)
{
    Dwfl_Module *mod = m->mod;
    Dwarf_Addr start = 0, end = 0;
    dwfl_module_info(mod, NULL, &start, &end, NULL, NULL, NULL, NULL);
    if (pc < start || pc >= end)
        return;

    /* The out-of-line function, from the ELF symbol table. */
    const char *symbol = NULL;
    const sym_fn *fn = sym_find_fn(m, pc);
    if (fn)
        symbol = sym_intern_demangled(s, fn->name);

    /* Inlining and file:line, from DWARF. */
    const char *function = symbol;
    Dwarf_Die cu;
    Dwarf_Addr bias = 0;
    if (sym_find_cu(m, pc, &cu, &bias)) {
        Dwarf_Addr addr = pc - bias;
        Dwarf_Die *scopes = NULL;
        int n = dwarf_getscopes(&cu, addr, &scopes); /* innermost first */
        int inner = 0;
        while (inner < n && !sym_is_function_scope(&scopes[inner]))
            inner++;
        if (inner < n && dwarf_tag(&scopes[inner]) == DW_TAG_inlined_subroutine) {
            const char *inl = sym_die_function(s, &scopes[inner]);
            int outer = inner + 1;
            while (outer < n && !sym_is_function_scope(&scopes[outer]))
                outer++;
            const char *into = NULL;
            if (outer < n && dwarf_tag(&scopes[outer]) == DW_TAG_subprogram && symbol != NULL)
                into = symbol; /* the ELF name carries C++ parameter types */
            else if (outer < n)
                into = sym_die_function(s, &scopes[outer]);
            if (inl != NULL) {
                function = inl;
                out->inlined_into = into ? into : symbol;
            }
        } else if (inner < n && function == NULL) {
            function = sym_die_function(s, &scopes[inner]); /* no ELF symbol: DWARF's name */
        }
        free(scopes);

        Dwarf_Line *line = dwarf_getsrc_die(&cu, addr);
        int lineno = 0;
        const char *file = line ? dwarf_linesrc(line, NULL, NULL) : NULL;
        if (file != NULL && dwarf_lineno(line, &lineno) == 0 && lineno > 0) {
            out->file = sym_intern(s, file);
            out->line = out->file ? lineno : 0;
        }
    }
    if (function != NULL) {
        out->function = function;
        out->resolved = true;
    }
}

static uint64_t sym_key_hash(uint32_t where, uint64_t offset, uint32_t kind)
{
    return gp__mix64(offset ^ gp__mix64(((uint64_t)where << 1) | kind));
}

static int sym_cache_grow(sym_core *s)
{
    size_t cap = s->cache_cap ? s->cache_cap * 2 : 1024;
    sym_entry *slots = calloc(cap, sizeof *slots);
    if (slots == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < s->cache_cap; i++) {
        sym_entry *e = &s->cache[i];
        if (e->sym == NULL)
            continue;
        size_t j = sym_key_hash(e->where, e->offset, e->kind) & (cap - 1);
        while (slots[j].sym != NULL)
            j = (j + 1) & (cap - 1);
        slots[j] = *e;
    }
    free(s->cache);
    s->cache = slots;
    s->cache_cap = cap;
    return 0;
}

/* A Python frame: the qualified name after the path's last ':', the file before it, the line in
 * the offset (exact, whatever the kind). */
static void sym_resolve_python(gp_symbolizer *s, const sym_module *m, uint64_t line, gp_symbol *out)
{
    const char *path = m->path + 3, *colon = strrchr(path, ':');
    if (colon == NULL)
        return;
    char file[4096];
    snprintf(file, sizeof file, "%.*s", (int)(colon - path < 4095 ? colon - path : 4095), path);
    const char *function = sym_intern(s, colon[1] ? colon + 1 : "?");
    out->file = file[0] ? sym_intern(s, file) : NULL;
    out->line = out->file && line <= INT32_MAX ? (int)line : 0;
    if (function != NULL) {
        out->function = function;
        out->resolved = true;
    }
}

#define SYM_BASENAME_MAX 4000 /* the longest module basename an unresolved name keeps */
#define SYM_UNRESOLVED_MAX (SYM_BASENAME_MAX + 64) /* room for any unresolved name */

/* Writes "<module basename>+0x<offset>" (or "[module N]+0x.." without a name, "0x.." without a
 * module) to buf (SYM_UNRESOLVED_MAX bytes), the name of a frame nothing resolved. Returns its
 * length. */
static size_t sym_unresolved_name(char *buf, uint32_t module_id, const sym_module *m,
                                  uint64_t offset)
{
    size_t n = 0;
    if (m != NULL && m->basename[0] != '\0') {
        n = strnlen(m->basename, SYM_BASENAME_MAX);
        memcpy(buf, m->basename, n);
        buf[n++] = '+';
    } else if (module_id != 0) {
        n = (size_t)snprintf(buf, SYM_UNRESOLVED_MAX, "[module %" PRIu32 "]+", module_id);
    }
    char hex[16];
    int k = 0;
    do
        hex[k++] = "0123456789abcdef"[offset & 15];
    while ((offset >>= 4) != 0);
    buf[n++] = '0';
    buf[n++] = 'x';
    while (k > 0)
        buf[n++] = hex[--k];
    buf[n] = '\0';
    return n;
}

static const gp_symbol *sym_lookup(gp_symbolizer *s, uint32_t module_id, uint64_t offset,
                                   uint32_t kind)
{
    if (s == NULL)
        return NULL;
    sym_core *c = s->core;
    s->stats.queries++;
    sym_reg *reg = module_id ? sym_find_reg(s, module_id) : NULL;
    uint32_t where = reg ? SYM_FILE | reg->file : module_id;
    if (4 * (c->cache_count + 1) > 3 * c->cache_cap && sym_cache_grow(c) != 0)
        return NULL;
    size_t j = sym_key_hash(where, offset, kind) & (c->cache_cap - 1);
    while (c->cache[j].sym != NULL) {
        sym_entry *e = &c->cache[j];
        if (e->where == where && e->offset == offset && e->kind == kind)
            return e->sym;
        j = (j + 1) & (c->cache_cap - 1);
    }

    s->stats.lookups++;
    sym_module *m = reg ? &c->modules[reg->file] : NULL;
    if (m != NULL)
        sym_module_open(s, m);
    gp_symbol found = {.offset = offset, .module = m ? m->path : ""};
    if (m != NULL) {
        /* A return address points after the call; offset - 1 lies inside it. */
        uint64_t pc = (kind == KIND_RETURN && offset > 0) ? offset - 1 : offset;
        if (sym_is_python(m))
            sym_resolve_python(s, m, offset, &found);
        else if (m->mod != NULL)
            sym_resolve(s, m, pc, &found);
    }
    gp_symbol *out;
    if (found.resolved) {
        out = sym_new(c, 0);
        if (out == NULL)
            return NULL;
        *out = found;
    } else { /* named after where it is, right after it: no other frame has this name */
        char where_text[SYM_UNRESOLVED_MAX];
        size_t n = sym_unresolved_name(where_text, module_id, m, offset);
        out = sym_new(c, n + 1);
        if (out == NULL)
            return NULL;
        *out = found;
        out->function = memcpy(out + 1, where_text, n + 1);
        out->inlined_into = NULL;
    }
    c->cache[j] = (sym_entry){.offset = offset, .where = where, .kind = kind, .sym = out};
    c->cache_count++;
    return out;
}

const gp_symbol *gp_symbolize(gp_symbolizer *s, uint32_t module_id, uint64_t offset)
{
    return sym_lookup(s, module_id, offset, KIND_RETURN);
}

const gp_symbol *gp_symbolize_pc(gp_symbolizer *s, uint32_t module_id, uint64_t offset)
{
    return sym_lookup(s, module_id, offset, KIND_PC);
}
