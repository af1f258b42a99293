/*
 * symbolize — turns trace frames (module + offset) into function, file and line, for the gradprof
 * tools. Internal to tools/; built on elfutils' libdwfl.
 *
 * Offsets: a frame is recorded as offset = ip - load base, where the load base is
 * dl_iterate_phdr's dlpi_addr for the object. For shared libraries and PIE executables that is the
 * load bias, so the offset is the address in the ELF file's own (link-time) address space; for a
 * non-PIE executable dlpi_addr is 0 and the offset is the absolute address, which is again the
 * file's own address. Either way the symbolizer looks the offset up in the file as linked; the
 * recorded base and size are kept only for messages.
 *
 * Return addresses: the unwinder records, for every frame but possibly the innermost, the address
 * *after* the call instruction. That address may already belong to the next source line, or to the
 * next function when the call was the last instruction (a noreturn call). gp_symbolize() therefore
 * looks up offset - 1, which lies inside the call instruction, as perf, gdb and heaptrack do;
 * gp_symbolize_pc() looks up the offset itself, for exact instruction addresses (the interrupted
 * innermost frame, a function's entry).
 *
 * What is found where: the function name comes from the ELF symbol table (.symtab, else .dynsym),
 * demangled when it is a C++ name; file and line come from DWARF line tables, in the file or in a
 * separate debug file that libdw finds by itself (by build-id under /usr/lib/debug, by
 * .gnu_debuglink next to the file, and through debuginfod only if DEBUGINFOD_URLS is set). When
 * DWARF says the address lies in inlined code, the function is the innermost inlined function (the
 * one the line belongs to) and inlined_into names the function it was inlined into.
 *
 * Python frames: a module whose path is "py:<file>:<qualname>" (trace_format.h) is a Python
 * function, resolved without libdw: function = the qualified name (after the path's last ':'),
 * file = the file name, line = the offset, the same for gp_symbolize() and gp_symbolize_pc();
 * its quality is GP_SYM_FULL.
 *
 * Never fails hard: a module whose file is missing, is not ELF, has a different build-id than the
 * trace recorded, or has no symbols yields "<basename>+0x<offset>" names, and
 * gp_symbolizer_module_quality() says why, once per module, for the caller to print.
 *
 * Caching: modules are opened on first use and kept open; every (module, offset, kind) is resolved
 * once and the result kept, so a report costs one libdw lookup per unique address, not per event.
 *
 * Ownership: every string and gp_symbol returned belongs to the symbolizer and lives until
 * gp_symbolizer_free() (of the last one sharing it, see gp_symbolizer_share). Not thread-safe:
 * use one symbolizer (and whatever shares it) per thread.
 */
#ifndef GRADPROF_TOOLS_SYMBOLIZE_H
#define GRADPROF_TOOLS_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_symbolizer gp_symbolizer;

/* One resolved frame. */
typedef struct gp_symbol {
    const char *function;     /* demangled name; the fallback "<basename>+0x<offset>" when
                               * unresolved (module 0: "0x<offset>"); never NULL */
    const char *inlined_into; /* the function `function` was inlined into; NULL if not inlined */
    const char *file;         /* source file as the line table names it: absolute, or relative to
                               * the compilation directory ("./malloc/malloc.c"); NULL if unknown */
    int line;                 /* source line; 0 if unknown */
    bool resolved;            /* false when `function` is the fallback name */
    const char *module;       /* the module's path as registered; "" for unknown modules */
    uint64_t offset;          /* the offset asked for (not adjusted by -1) */
} gp_symbol;

/* How much a module can tell. */
typedef enum gp_sym_quality {
    GP_SYM_FULL = 0,  /* function names and DWARF file:line */
    GP_SYM_NAMES = 1, /* function names only: no DWARF found */
    GP_SYM_NONE = 2,  /* nothing: file missing, unreadable, mismatched or without symbols */
} gp_sym_quality;

/* Lookup counters, for tests and --verbose output. */
typedef struct gp_sym_stats {
    uint64_t queries;        /* gp_symbolize() + gp_symbolize_pc() calls */
    uint64_t lookups;        /* of those, the ones that missed the cache and were resolved */
    uint64_t modules_opened; /* modules whose file was opened (successfully or not) */
} gp_sym_stats;

/* A new, empty symbolizer, or NULL when out of memory. */
gp_symbolizer *gp_symbolizer_new(void);

/* A new symbolizer with no modules registered that shares `with`'s opened files, looked-up
 * symbols and strings: a module registered in both with the same path and build-id is opened
 * once, and each of its addresses resolved once for both (two traces of one program). Module ids
 * stay each symbolizer's own. Strings and gp_symbols returned by either live until both are
 * freed. NULL when out of memory or `with` is NULL. */
gp_symbolizer *gp_symbolizer_share(gp_symbolizer *with);

/* Frees the symbolizer; its open modules and every string and gp_symbol it returned go with the
 * last symbolizer sharing them. NULL is a no-op. */
void gp_symbolizer_free(gp_symbolizer *s);

/* Registers module `module_id` (> 0, as in the trace's module map) with the ELF file at `path`
 * (copied), the build-id recorded for it as lowercase or uppercase hex (NULL or "" = not checked),
 * and its recorded load base and size (kept for messages). Nothing is opened yet; a bad file only
 * shows when the module is first used. Returns 0, -EINVAL for id 0 or a NULL path, -EEXIST if the
 * id is already registered, or -ENOMEM. */
int gp_symbolizer_add_module(gp_symbolizer *s, uint32_t module_id, const char *path,
                             const char *build_id, uint64_t base, uint64_t size);

/* Resolves a return address: looks up offset - 1 (see "Return addresses" above). `module_id` 0 is
 * the trace's "unknown module" (offset is then a raw address) and, like an unregistered id, gives
 * a fallback name. Never returns NULL except when out of memory. */
const gp_symbol *gp_symbolize(gp_symbolizer *s, uint32_t module_id, uint64_t offset);

/* Resolves an exact instruction address: looks up offset itself. Otherwise as gp_symbolize(). */
const gp_symbol *gp_symbolize_pc(gp_symbolizer *s, uint32_t module_id, uint64_t offset);

/* Opens the module if that has not happened yet and says how much it can tell. When the answer is
 * not GP_SYM_FULL and `why` is non-NULL, *why is set to one line naming the file and the reason
 * (e.g. "/usr/lib/libfoo.so: build-id mismatch: ..."), owned by the symbolizer; with GP_SYM_FULL
 * *why is set to NULL. An unregistered id gives GP_SYM_NONE. */
gp_sym_quality gp_symbolizer_module_quality(gp_symbolizer *s, uint32_t module_id, const char **why);

/* The lookup counters so far. */
gp_sym_stats gp_symbolizer_stats(const gp_symbolizer *s);

/* A demangled C++ function name as a table shows it: the qualified name without return type,
 * parameter lists, template arguments, ABI tags, qualifiers or clone suffix
 * ("std::vector<int>::push_back(int const&) const" -> "std::vector::push_back", as pprof shows
 * names); operator names and "(anonymous namespace)" are kept. Returns `name` itself when there
 * is nothing to drop or it does not read as C++ (unbalanced, or longer than `size`), else a
 * string in `buf`. */
const char *gp_function_short_name(const char *name, char *buf, size_t size);

/* The short name with its parameter list and qualifiers, template arguments dropped from both
 * ("std::ostream& ns::f<int>(std::vector<int> const&, bool) const" -> "ns::f(std::vector const&,
 * bool) const"): what tells two overloads apart where their short names are one. The short name
 * (gp_function_short_name) when there is no parameter list; `name` itself when that is. */
const char *gp_function_signature(const char *name, char *buf, size_t size);

/* Demangles a C++ (Itanium ABI, "_Z...") name into a malloc'd string the caller frees; NULL when
 * `name` is not a mangled name or out of memory. Exposed for tests. */
char *gp__sym_demangle(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* GRADPROF_TOOLS_SYMBOLIZE_H */
