/*
 * test_symbolize — the tools' symbolizer (tools/symbolize.h) on this test binary (PIE), on libc,
 * on a non-PIE helper program (symbolize_target) and its stripped and split-debug copies, and on
 * every fallback path. Module paths, offsets and build-ids are computed as the recorder computes
 * them: with dl_iterate_phdr, offset = address - dlpi_addr.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symbolize.h"

#if defined(__clang__)
#define TEST_NOINLINE __attribute__((noinline))
#else
#define TEST_NOINLINE __attribute__((noinline, noipa))
#endif

/* ---- finding a module as the recorder does ------------------------------------------------- */

typedef struct found_module {
    uintptr_t addr;     /* in: an address inside the object */
    int found;          /* out */
    char path[4096];    /* out: dlpi_name, or /proc/self/exe's target for the main program */
    uintptr_t base;     /* out: dlpi_addr */
    char build_id[129]; /* out: hex of NT_GNU_BUILD_ID, "" if none */
} found_module;

static void read_build_id(struct dl_phdr_info *info, char *hex, size_t hex_size)
{
    hex[0] = '\0';
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr);
        const char *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const char *name = p + sizeof *nh;
            const unsigned char *desc = (const unsigned char *)name + ((nh->n_namesz + 3) & ~3u);
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                for (size_t k = 0; k < nh->n_descsz && 2 * k + 2 < hex_size; k++)
                    snprintf(hex + 2 * k, 3, "%02x", desc[k]);
                return;
            }
            p = (const char *)desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
}

static int find_module_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    found_module *fm = data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type != PT_LOAD || fm->addr < lo || fm->addr >= lo + ph->p_memsz)
            continue;
        fm->found = 1;
        fm->base = info->dlpi_addr;
        if (info->dlpi_name && info->dlpi_name[0]) {
            snprintf(fm->path, sizeof fm->path, "%s", info->dlpi_name);
        } else {
            ssize_t n = readlink("/proc/self/exe", fm->path, sizeof fm->path - 1);
            fm->path[n > 0 ? n : 0] = '\0';
        }
        read_build_id(info, fm->build_id, sizeof fm->build_id);
        return 1;
    }
    return 0;
}

static found_module find_module(const void *addr)
{
    found_module fm = {.addr = (uintptr_t)addr};
    dl_iterate_phdr(find_module_cb, &fm);
    assert_true(fm.found);
    assert_true(fm.path[0] != '\0');
    return fm;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ---- code to symbolize ---------------------------------------------------------------------- */

volatile int test_sink;
static void *captured_ra;

static int captured_line;

/* Records its return address and the line of the call (passed as __LINE__ by the caller). */
TEST_NOINLINE static void capture_return_address(int line)
{
    captured_ra = __builtin_return_address(0);
    captured_line = line;
    test_sink++;
}

static const int static_fn_line = __LINE__ + 1;
TEST_NOINLINE static int static_fn(int x)
{
    return x * 5 + test_sink;
}

TEST_NOINLINE int symbolize_global_fn(int x);
static const int global_fn_line = __LINE__ + 1;
TEST_NOINLINE int symbolize_global_fn(int x)
{
    return x * 11 + test_sink;
}

/* A C function under a C++ mangled name: its ELF symbol is _ZN2ns3fooEi. */
int mangled_fn(int x) __asm__("_ZN2ns3fooEi");
TEST_NOINLINE int mangled_fn(int x)
{
    return x - 1 + test_sink;
}

TEST_NOINLINE static int return_address_caller(void)
{
    capture_return_address(__LINE__);
    return test_sink + 1; /* not a tail call: the return address stays in this function */
}

static inline __attribute__((always_inline)) int inlined_helper(void)
{
    capture_return_address(__LINE__);
    return test_sink + 2;
}

TEST_NOINLINE static int outer_with_inline(void)
{
    int r = inlined_helper();
    return r + test_sink;
}

static const char rodata_object[64] = "not code";

/* ---- tests ---------------------------------------------------------------------------------- */

static int setup(void **state)
{
    /* Never reach for the network from a test: libdw would try debuginfod for libc. */
    unsetenv("DEBUGINFOD_URLS");
    gp_symbolizer *s = gp_symbolizer_new();
    assert_non_null(s);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    gp_symbolizer_free(*state);
    return 0;
}

/* Registers the module containing addr as id and returns the address's offset in it. */
static uint64_t add_module_of(gp_symbolizer *s, uint32_t id, const void *addr)
{
    found_module fm = find_module(addr);
    assert_int_equal(gp_symbolizer_add_module(s, id, fm.path, fm.build_id, fm.base, 0), 0);
    return (uint64_t)((uintptr_t)addr - fm.base);
}

static void check_function_entry(gp_symbolizer *s, uint32_t id, uint64_t offset, const char *name,
                                 int decl_line)
{
    const gp_symbol *sym = gp_symbolize_pc(s, id, offset);
    assert_non_null(sym);
    assert_true(sym->resolved);
    assert_string_equal(sym->function, name);
    assert_null(sym->inlined_into);
    assert_non_null(sym->file);
    assert_true(ends_with(sym->file, "/test_symbolize.c"));
    /* The entry belongs to the signature line or, without a prologue, the first statement. */
    assert_in_range(sym->line, decl_line, decl_line + 2);
    assert_int_equal(sym->offset, offset);
}

static void test_own_functions(void **state)
{
    gp_symbolizer *s = *state;
    found_module fm = find_module((const void *)&static_fn);
    assert_true(fm.build_id[0] != '\0'); /* the toolchain links with --build-id */
    uint64_t off_static = add_module_of(s, 1, (const void *)&static_fn);
    uint64_t off_global = (uint64_t)((uintptr_t)&symbolize_global_fn - fm.base);
    check_function_entry(s, 1, off_static, "static_fn", static_fn_line);
    check_function_entry(s, 1, off_global, "symbolize_global_fn", global_fn_line);

    const gp_symbol *sym = gp_symbolize_pc(s, 1, off_static);
    assert_string_equal(sym->module, fm.path);

    const char *why = "unset";
    assert_int_equal(gp_symbolizer_module_quality(s, 1, &why), GP_SYM_FULL);
    assert_null(why);
}

static void test_return_address(void **state)
{
    gp_symbolizer *s = *state;
    captured_ra = NULL;
    int r = return_address_caller();
    assert_int_equal(r, test_sink + 1);
    assert_non_null(captured_ra);
    uint64_t off = add_module_of(s, 1, captured_ra);
    const gp_symbol *sym = gp_symbolize(s, 1, off);
    assert_non_null(sym);
    assert_true(sym->resolved);
    assert_string_equal(sym->function, "return_address_caller");
    assert_non_null(sym->file);
    assert_true(ends_with(sym->file, "/test_symbolize.c"));
    assert_int_equal(sym->line, captured_line);
    assert_int_equal(sym->offset, off); /* the offset asked for, not offset - 1 */
}

static void test_inlined_function(void **state)
{
    gp_symbolizer *s = *state;
    captured_ra = NULL;
    (void)outer_with_inline();
    assert_non_null(captured_ra);
    uint64_t off = add_module_of(s, 1, captured_ra);
    const gp_symbol *sym = gp_symbolize(s, 1, off);
    assert_non_null(sym);
    assert_true(sym->resolved);
    assert_string_equal(sym->function, "inlined_helper");
    assert_non_null(sym->inlined_into);
    assert_string_equal(sym->inlined_into, "outer_with_inline");
    assert_int_equal(sym->line, captured_line);
}

static void test_demangle(void **state)
{
    (void)state;
    char *d = gp__sym_demangle("_ZN2ns3fooEi");
    assert_non_null(d);
    assert_string_equal(d, "ns::foo(int)");
    free(d);
    d = gp__sym_demangle("_ZNSt6vectorIiSaIiEE9push_backERKi");
    assert_non_null(d);
    assert_string_equal(d, "std::vector<int, std::allocator<int> >::push_back(int const&)");
    free(d);
    assert_null(gp__sym_demangle("malloc"));
    assert_null(gp__sym_demangle("_Z"));
    assert_null(gp__sym_demangle("_Zgarbage!"));
    assert_null(gp__sym_demangle(NULL));
}

/* Names as tables show them: what a person reads in a C++ name, each case a form the demangler
 * writes. */
static void test_short_name(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"at::native::empty_cpu(c10::ArrayRef<long>, c10::optional<c10::ScalarType>)",
         "at::native::empty_cpu"},
        {"std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> "
         ">::_M_replace("
         "unsigned long, unsigned long, char const*, unsigned long)",
         "std::__cxx11::basic_string::_M_replace"},
        {"c10::DefaultCPUAllocator::allocate(unsigned long) const",
         "c10::DefaultCPUAllocator::allocate"},
        {"void at::native::(anonymous namespace)::cpu_kernel<float>(at::TensorIteratorBase&, "
         "float)",
         "at::native::(anonymous namespace)::cpu_kernel"},
        {"unsigned long ns::count<int>(int) &&", "ns::count"},
        {"ns::Functor::operator()(int) const", "ns::Functor::operator()"},
        {"std::ostream& std::operator<< <std::char_traits<char> >(std::ostream&, char const*)",
         "std::operator<<"},
        {"ns::Cmp::operator<(ns::Cmp const&) const", "ns::Cmp::operator<"},
        {"operator new(unsigned long)", "operator new"},
        {"operator delete[](void*, unsigned long)", "operator delete[]"},
        {"ns::Str::operator std::basic_string<char>() const",
         "ns::Str::operator std::basic_string<char>"},
        {"at::foo(int)::{lambda(int)#1}::operator()(int) const", "at::foo::{lambda#1}::operator()"},
        {"std::function<void (int)>::operator()(int) const", "std::function::operator()"},
        {"ns::f[abi:cxx11](int)", "ns::f"},
        {"ns::g(int (&) [3]) [clone .isra.0]", "ns::g"},
        {"std::vector<int, std::allocator<int> >::push_back(int const&)", "std::vector::push_back"},
    };
    char buf[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *got = gp_function_short_name(cases[i][0], buf, sizeof buf);
        if (strcmp(got, cases[i][1]) != 0)
            fail_msg("'%s' -> '%s', expected '%s'", cases[i][0], got, cases[i][1]);
    }
    /* Nothing to drop, or not a name it reads: the name itself, not a copy. */
    static const char *const kept[] = {
        "malloc",    "libtorch_cpu.so.1.13+0x1e04278", "ns::h(int", "ns::h)(", "a>b", "operator",
        "void (int)"};
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        assert_ptr_equal(gp_function_short_name(kept[i], buf, sizeof buf), kept[i]);
    /* Too long for the buffer: the whole name. */
    const char *name = "ns::long_function_name(int)";
    assert_ptr_equal(gp_function_short_name(name, buf, 8), name);

    /* Signatures: the short name with its parameters and qualifiers, template arguments out. */
    static const char *const signatures[][2] = {
        {"c10::intrusive_ptr<c10::TensorImpl, c10::detail::intrusive_target_default_null_type<"
         "c10::TensorImpl> > c10::TensorImpl::shallow_copy_and_detach_core<c10::VariableVersion "
         "const&>(c10::VariableVersion const&, bool) const",
         "c10::TensorImpl::shallow_copy_and_detach_core(c10::VariableVersion const&, bool) const"},
        {"std::vector<int, std::allocator<int> >::push_back(int const&)",
         "std::vector::push_back(int const&)"},
        {"void ns::f<int>(std::vector<at::Tensor, std::allocator<at::Tensor> > const&, bool) &&",
         "ns::f(std::vector const&, bool) &&"},
        {"ns::Functor::operator()(int) const", "ns::Functor::operator()(int) const"},
        {"std::ostream& std::operator<< <std::char_traits<char> >(std::ostream&, char const*)",
         "std::operator<<(std::ostream&, char const*)"},
        {"at::foo(int)::{lambda(int)#1}::operator()(int) const",
         "at::foo::{lambda#1}::operator()(int) const"},
        {"ns::g(int (&) [3]) [clone .isra.0]", "ns::g(int (&) [3])"},
        {"at::empty(long)", "at::empty(long)"},
    };
    for (size_t i = 0; i < sizeof signatures / sizeof *signatures; i++) {
        const char *got = gp_function_signature(signatures[i][0], buf, sizeof buf);
        if (strcmp(got, signatures[i][1]) != 0)
            fail_msg("'%s' -> '%s', expected '%s'", signatures[i][0], got, signatures[i][1]);
    }
    /* no parameter list: the short name; nothing it reads: the name itself */
    assert_string_equal(gp_function_signature("ns::Table<int>::size", buf, sizeof buf),
                        "ns::Table::size");
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        assert_ptr_equal(gp_function_signature(kept[i], buf, sizeof buf), kept[i]);
    assert_ptr_equal(gp_function_signature(name, buf, 12), name);
}

static void test_mangled_symbol(void **state)
{
    gp_symbolizer *s = *state;
    uint64_t off = add_module_of(s, 1, (const void *)&mangled_fn);
    const gp_symbol *sym = gp_symbolize_pc(s, 1, off);
    assert_true(sym->resolved);
    assert_string_equal(sym->function, "ns::foo(int)");
    /* A return address just past the function's first byte resolves to it too. */
    assert_string_equal(gp_symbolize(s, 1, off + 1)->function, "ns::foo(int)");
}

static void test_libc_malloc(void **state)
{
    gp_symbolizer *s = *state;
    void *(*volatile fn)(size_t) = malloc; /* under ASan this is the interceptor's module */
    uint64_t off = add_module_of(s, 2, (const void *)fn);
    const gp_symbol *sym = gp_symbolize_pc(s, 2, off);
    assert_true(sym->resolved);
    assert_non_null(strstr(sym->function, "malloc"));
    const char *why = NULL;
    gp_sym_quality q = gp_symbolizer_module_quality(s, 2, &why);
    assert_true(q == GP_SYM_FULL || q == GP_SYM_NAMES);
    if (q == GP_SYM_NAMES) {
        assert_non_null(why);
        assert_non_null(strstr(why, "no DWARF"));
    }
}

static void test_missing_file(void **state)
{
    gp_symbolizer *s = *state;
    assert_int_equal(gp_symbolizer_add_module(s, 3, "/nonexistent/dir/libgone.so", "", 0, 0), 0);
    const gp_symbol *sym = gp_symbolize(s, 3, 0x1234);
    assert_non_null(sym);
    assert_false(sym->resolved);
    assert_string_equal(sym->function, "libgone.so+0x1234");
    assert_null(sym->file);
    assert_int_equal(sym->line, 0);
    assert_string_equal(sym->module, "/nonexistent/dir/libgone.so");
    const char *why = NULL;
    assert_int_equal(gp_symbolizer_module_quality(s, 3, &why), GP_SYM_NONE);
    assert_non_null(why);
    assert_non_null(strstr(why, "/nonexistent/dir/libgone.so: cannot open"));
    assert_non_null(strstr(why, strerror(ENOENT)));
}

static void test_not_elf_and_not_file(void **state)
{
    gp_symbolizer *s = *state;
    char tmpl[] = "/tmp/gp_sym_notelf_XXXXXX";
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "this is not an ELF file\n", 24), 24);
    close(fd);
    const char *why = NULL;

    assert_int_equal(gp_symbolizer_add_module(s, 4, tmpl, NULL, 0, 0), 0);
    const gp_symbol *sym = gp_symbolize(s, 4, 0x10);
    assert_false(sym->resolved);
    assert_non_null(strstr(sym->function, "gp_sym_notelf_"));
    assert_true(ends_with(sym->function, "+0x10"));
    assert_int_equal(gp_symbolizer_module_quality(s, 4, &why), GP_SYM_NONE);
    assert_non_null(strstr(why, "not a usable ELF file"));
    unlink(tmpl);

    assert_int_equal(gp_symbolizer_add_module(s, 5, "/tmp", NULL, 0, 0), 0);
    assert_string_equal(gp_symbolize(s, 5, 0x20)->function, "tmp+0x20");
    assert_int_equal(gp_symbolizer_module_quality(s, 5, &why), GP_SYM_NONE);
    assert_string_equal(why, "/tmp: not a regular file");

    assert_int_equal(gp_symbolizer_add_module(s, 6, "", NULL, 0, 0), 0);
    assert_string_equal(gp_symbolize(s, 6, 0x30)->function, "[module 6]+0x30");
    assert_int_equal(gp_symbolizer_module_quality(s, 6, &why), GP_SYM_NONE);
    assert_string_equal(why, "module 6: no file path recorded");
}

static void test_outside_any_symbol(void **state)
{
    gp_symbolizer *s = *state;
    found_module fm = find_module((const void *)&static_fn);
    const char *base = strrchr(fm.path, '/') + 1;
    char want[4200];

    /* Read-only data: an object symbol, not a function. */
    uint64_t off = add_module_of(s, 1, rodata_object);
    const gp_symbol *sym = gp_symbolize_pc(s, 1, off);
    assert_false(sym->resolved);
    snprintf(want, sizeof want, "%s+0x%jx", base, (uintmax_t)off);
    assert_string_equal(sym->function, want);

    /* Far past the end of the module. */
    uint64_t far = 0x7fff00000000ull;
    sym = gp_symbolize(s, 1, far);
    assert_false(sym->resolved);
    snprintf(want, sizeof want, "%s+0x%jx", base, (uintmax_t)far);
    assert_string_equal(sym->function, want);
    assert_null(sym->file);

    /* The module is fine; only those addresses are not code. */
    assert_int_equal(gp_symbolizer_module_quality(s, 1, NULL), GP_SYM_FULL);
}

static void test_build_id_mismatch(void **state)
{
    gp_symbolizer *s = *state;
    found_module fm = find_module((const void *)&static_fn);
    uint64_t off = (uint64_t)((uintptr_t)&static_fn - fm.base);

    /* The recorded build-id in upper case still matches. */
    char upper[sizeof fm.build_id];
    for (size_t i = 0; i <= strlen(fm.build_id); i++)
        upper[i] =
            (char)((fm.build_id[i] >= 'a' && fm.build_id[i] <= 'f') ? fm.build_id[i] - 'a' + 'A'
                                                                    : fm.build_id[i]);
    assert_int_equal(gp_symbolizer_add_module(s, 7, fm.path, upper, fm.base, 0), 0);
    assert_string_equal(gp_symbolize_pc(s, 7, off)->function, "static_fn");

    assert_int_equal(gp_symbolizer_add_module(s, 8, fm.path, "deadbeef", fm.base, 0), 0);
    const gp_symbol *sym = gp_symbolize_pc(s, 8, off);
    assert_false(sym->resolved);
    assert_null(sym->file);
    const char *why = NULL;
    assert_int_equal(gp_symbolizer_module_quality(s, 8, &why), GP_SYM_NONE);
    assert_non_null(strstr(why, "build-id mismatch"));
    assert_non_null(strstr(why, "deadbeef"));
    assert_non_null(strstr(why, fm.build_id));
}

static void test_cache(void **state)
{
    gp_symbolizer *s = *state;
    uint64_t off = add_module_of(s, 1, (const void *)&static_fn);
    gp_sym_stats st0 = gp_symbolizer_stats(s);
    assert_int_equal(st0.queries, 0);
    assert_int_equal(st0.lookups, 0);

    const gp_symbol *a = gp_symbolize_pc(s, 1, off);
    const gp_symbol *b = gp_symbolize_pc(s, 1, off);
    assert_ptr_equal(a, b);
    gp_sym_stats st = gp_symbolizer_stats(s);
    assert_int_equal(st.queries, 2);
    assert_int_equal(st.lookups, 1);
    assert_int_equal(st.modules_opened, 1);

    /* A return-address lookup of the same offset is a different question. */
    const gp_symbol *c = gp_symbolize(s, 1, off);
    assert_ptr_not_equal(a, c);
    assert_int_equal(gp_symbolizer_stats(s).lookups, 2);

    /* Many distinct addresses (forcing the table to grow) are each resolved once. */
    const gp_symbol *first = gp_symbolize_pc(s, 1, off);
    for (uint64_t i = 0; i < 5000; i++)
        assert_non_null(gp_symbolize_pc(s, 1, off + 0x100000 + i));
    for (uint64_t i = 0; i < 5000; i++)
        assert_non_null(gp_symbolize_pc(s, 1, off + 0x100000 + i));
    st = gp_symbolizer_stats(s);
    assert_int_equal(st.lookups, 2 + 5000);
    assert_int_equal(st.queries, 4 + 10000);
    assert_int_equal(st.modules_opened, 1);
    assert_ptr_equal(gp_symbolize_pc(s, 1, off), first);
    assert_string_equal(first->function, "static_fn");
}

static void test_unknown_modules(void **state)
{
    gp_symbolizer *s = *state;
    const gp_symbol *sym = gp_symbolize(s, 0, 0x7f0012345678ull);
    assert_false(sym->resolved);
    assert_string_equal(sym->function, "0x7f0012345678");
    assert_string_equal(sym->module, "");
    sym = gp_symbolize(s, 99, 0x10);
    assert_false(sym->resolved);
    assert_string_equal(sym->function, "[module 99]+0x10");
    const char *why = NULL;
    assert_int_equal(gp_symbolizer_module_quality(s, 99, &why), GP_SYM_NONE);
    assert_non_null(why);
    assert_int_equal(gp_symbolizer_stats(s).modules_opened, 0);
}

/* "py:<file>:<qualname>" modules are Python functions: resolved from the path, the offset is the
 * line (for return addresses too: no - 1), no file is opened, the quality is full. */
static void test_python_modules(void **state)
{
    gp_symbolizer *s = *state;
    assert_int_equal(gp_symbolizer_add_module(s, 7, "py:/srv/app/eval.py:Model.forward", "", 0, 0),
                     0);
    assert_int_equal(
        gp_symbolizer_add_module(s, 8, "py:<frozen importlib._bootstrap>:_load", "", 0, 0), 0);
    assert_int_equal(gp_symbolizer_add_module(s, 9, "py:c:/odd:name.py:<lambda>", "", 0, 0), 0);
    assert_int_equal(gp_symbolizer_add_module(s, 10, "py:x.py:", "", 0, 0), 0);
    const gp_symbol *sym = gp_symbolize(s, 7, 36);
    assert_true(sym->resolved);
    assert_string_equal(sym->function, "Model.forward");
    assert_string_equal(sym->file, "/srv/app/eval.py");
    assert_int_equal(sym->line, 36);
    assert_null(sym->inlined_into);
    assert_string_equal(sym->module, "py:/srv/app/eval.py:Model.forward");
    assert_int_equal(gp_symbolize_pc(s, 7, 36)->line, 36);
    sym = gp_symbolize(s, 8, 1);
    assert_string_equal(sym->function, "_load");
    assert_string_equal(sym->file, "<frozen importlib._bootstrap>");
    sym = gp_symbolize(s, 9, 5); /* the file may hold ':'; the name never does */
    assert_string_equal(sym->function, "<lambda>");
    assert_string_equal(sym->file, "c:/odd:name.py");
    sym = gp_symbolize(s, 10, 2);
    assert_string_equal(sym->function, "?");
    const char *why = "x";
    assert_int_equal(gp_symbolizer_module_quality(s, 7, &why), GP_SYM_FULL);
    assert_null(why);
}

static void test_api_errors(void **state)
{
    gp_symbolizer *s = *state;
    assert_int_equal(gp_symbolizer_add_module(NULL, 1, "/x", NULL, 0, 0), -EINVAL);
    assert_int_equal(gp_symbolizer_add_module(s, 0, "/x", NULL, 0, 0), -EINVAL);
    assert_int_equal(gp_symbolizer_add_module(s, 1, NULL, NULL, 0, 0), -EINVAL);
    assert_int_equal(gp_symbolizer_add_module(s, 3, "/x", NULL, 0, 0), 0);
    assert_int_equal(gp_symbolizer_add_module(s, 3, "/y", NULL, 0, 0), -EEXIST);
    /* Ids out of order are found. */
    assert_int_equal(gp_symbolizer_add_module(s, 1, "/one/a.so", NULL, 0, 0), 0);
    assert_int_equal(gp_symbolizer_add_module(s, 2, "/two/b.so", NULL, 0, 0), 0);
    assert_string_equal(gp_symbolize(s, 1, 1)->function, "a.so+0x1");
    assert_string_equal(gp_symbolize(s, 2, 2)->function, "b.so+0x2");
    assert_string_equal(gp_symbolize(s, 3, 3)->function, "x+0x3");
    assert_null(gp_symbolize(NULL, 1, 0));
    assert_null(gp_symbolize_pc(NULL, 1, 0));
    assert_int_equal(gp_symbolizer_module_quality(NULL, 1, NULL), GP_SYM_NONE);
    assert_int_equal(gp_symbolizer_stats(NULL).queries, 0);
    gp_symbolizer_free(NULL);
}

/* ---- the non-PIE helper program and its stripped, split-debug and no-aranges copies ---------- */

typedef struct target_line {
    char kind[8];
    char function[64];
    uint64_t offset;
    int line;
} target_line;

static int run_target(target_line *lines, int max)
{
    FILE *p = popen(SYMBOLIZE_TARGET_PATH, "r");
    assert_non_null(p);
    int n = 0;
    char buf[256];
    while (n < max && fgets(buf, sizeof buf, p)) {
        target_line *t = &lines[n];
        unsigned long long off;
        assert_int_equal(sscanf(buf, "%7s %63s %llx %d", t->kind, t->function, &off, &t->line), 4);
        t->offset = off;
        n++;
    }
    assert_int_equal(pclose(p), 0);
    return n;
}

static void test_non_pie_target(void **state)
{
    gp_symbolizer *s = *state;
    target_line lines[8];
    int n = run_target(lines, 8);
    assert_int_equal(n, 4);
    assert_int_equal(gp_symbolizer_add_module(s, 1, SYMBOLIZE_TARGET_PATH, NULL, 0, 0), 0);
    assert_int_equal(gp_symbolizer_add_module(s, 2, SYMBOLIZE_TARGET_PATH ".debuglink", NULL, 0, 0),
                     0);
    assert_int_equal(gp_symbolizer_add_module(s, 3, SYMBOLIZE_TARGET_PATH ".stripped", NULL, 0, 0),
                     0);
    assert_int_equal(gp_symbolizer_add_module(s, 4, SYMBOLIZE_TARGET_PATH ".noaranges", NULL, 0, 0),
                     0);
    for (int i = 0; i < n; i++) {
        target_line *t = &lines[i];
        int is_ret = strcmp(t->kind, "ret") == 0;
        assert_true(t->offset >= 0x400000); /* non-PIE: the offset is the absolute address */
        for (uint32_t id = 1; id <= 4; id++) {
            if (id == 3)
                continue; /* the stripped copy, below */
            const gp_symbol *sym =
                is_ret ? gp_symbolize(s, id, t->offset) : gp_symbolize_pc(s, id, t->offset);
            assert_true(sym->resolved);
            assert_string_equal(sym->function, t->function);
            assert_non_null(sym->file);
            assert_true(ends_with(sym->file, "/symbolize_target.c"));
            if (is_ret)
                assert_int_equal(sym->line, t->line);
            else
                assert_in_range(sym->line, t->line, t->line + 2);
        }
        /* The stripped copy has neither symbols nor debug info. */
        const gp_symbol *sym = gp_symbolize_pc(s, 3, t->offset);
        assert_false(sym->resolved);
        char want[128];
        snprintf(want, sizeof want, "symbolize_target.stripped+0x%jx", (uintmax_t)t->offset);
        assert_string_equal(sym->function, want);
    }
    const char *why = NULL;
    assert_int_equal(gp_symbolizer_module_quality(s, 1, &why), GP_SYM_FULL);
    assert_int_equal(gp_symbolizer_module_quality(s, 2, &why), GP_SYM_FULL);
    assert_int_equal(gp_symbolizer_module_quality(s, 4, &why), GP_SYM_FULL);
    assert_null(why);
    assert_int_equal(gp_symbolizer_module_quality(s, 3, &why), GP_SYM_NONE);
    assert_non_null(strstr(why, "symbolize_target.stripped: no symbol table and no debug info"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_own_functions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_return_address, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inlined_function, setup, teardown),
        cmocka_unit_test_setup_teardown(test_demangle, setup, teardown),
        cmocka_unit_test(test_short_name),
        cmocka_unit_test_setup_teardown(test_mangled_symbol, setup, teardown),
        cmocka_unit_test_setup_teardown(test_libc_malloc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_elf_and_not_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outside_any_symbol, setup, teardown),
        cmocka_unit_test_setup_teardown(test_build_id_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_modules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_api_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_python_modules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_non_pie_target, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
