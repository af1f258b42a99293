/*
 * The recorder's walk by call-frame information (libprof/cfi.c, compiled into this test): on
 * hand-built .eh_frame_hdr/.eh_frame data, the rules that frames give and a walk over a made-up
 * stack, every malformed or unsupported form refused (no rule, never a read out of bounds), a walk
 * that would leave the stack refused; and on this process's own objects, the walk from here
 * frame for frame the same as libunwind's.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "cfi.h"

/* ---- hand-built call-frame information ------------------------------------------------------- */

/* An object's CFI in a buffer: .eh_frame_hdr at the start, then the CIE and FDEs; once built, it
 * is moved to end where a page without access begins, so that a read past its end faults. The
 * functions it describes are addresses FN(o, i) beyond it (never read, only compared). */
enum { OBJ_BYTES = 4096, FN_SPAN = 0x100, FN_MAX = 8 };
typedef struct {
    uint8_t *mem; /* the bytes, in `region` */
    uintptr_t fn_base;
    size_t len, cie_at, nfde;
    size_t table_at, fde_at[FN_MAX];
    lp__cfi_object obj;
} cfi_obj;

static uint8_t *region; /* OBJ_BYTES read-write, then OBJ_BYTES without access */

#define FN(o, i) ((o)->fn_base + (uintptr_t)(i) * FN_SPAN)

static int map_region(void **state)
{
    (void)state;
    void *p = mmap(NULL, 2 * OBJ_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || mprotect((uint8_t *)p + OBJ_BYTES, OBJ_BYTES, PROT_NONE) != 0)
        return -1;
    region = p;
    return 0;
}

static int unmap_region(void **state)
{
    (void)state;
    return munmap(region, 2 * OBJ_BYTES);
}

static void put(cfi_obj *o, const void *p, size_t n)
{
    assert_true(o->len + n <= OBJ_BYTES);
    memcpy(o->mem + o->len, p, n);
    o->len += n;
}

static void put_u8(cfi_obj *o, uint8_t v) { put(o, &v, 1); }

static void put_u32(cfi_obj *o, uint32_t v) { put(o, &v, 4); }

static void set_u32(cfi_obj *o, size_t at, uint32_t v) { memcpy(o->mem + at, &v, 4); }

/* Starts an object whose header has room for `nfde` table entries and whose CIE has the
 * augmentation `aug` ("zR", "zRS": its data is the FDE pointer encoding, pcrel|sdata4) and the
 * initial instructions CFA = rsp + 8, RA at CFA - 8. */
static void obj_begin(cfi_obj *o, size_t nfde, const char *aug)
{
    memset(o, 0, sizeof *o);
    memset(region, 0, OBJ_BYTES);
    o->mem = region;
    o->fn_base = (uintptr_t)region + 0x10000;
    put_u8(o, 1);    /* version */
    put_u8(o, 0x1b); /* eh_frame_ptr: pcrel sdata4 */
    put_u8(o, 0x03); /* fde_count: udata4 */
    put_u8(o, 0x3b); /* table: datarel sdata4 */
    put_u32(o, 0);   /* eh_frame_ptr, set below */
    put_u32(o, (uint32_t)nfde);
    o->table_at = o->len;
    o->len += 8 * nfde;
    while (o->len % 8)
        put_u8(o, 0);
    o->cie_at = o->len;
    set_u32(o, 4, (uint32_t)(o->cie_at - 4));
    put_u32(o, 0); /* length, set at the end */
    put_u32(o, 0); /* CIE id */
    put_u8(o, 1);  /* version */
    put(o, aug, strlen(aug) + 1);
    put_u8(o, 1);    /* code alignment */
    put_u8(o, 0x78); /* data alignment -8 */
    put_u8(o, 16);   /* return address register */
    put_u8(o, 1); /* augmentation data length */
    put_u8(o, 0x1b);
    const uint8_t insns[] = {0x0c, 7, 8, 0x90, 1}; /* def_cfa rsp 8; offset r16 at cfa-8 */
    put(o, insns, sizeof insns);
    while ((o->len - o->cie_at) % 8)
        put_u8(o, 0); /* DW_CFA_nop */
    set_u32(o, o->cie_at, (uint32_t)(o->len - o->cie_at - 4));
}

/* Adds the FDE of function i (FN_SPAN bytes) with instructions insns, unpadded (the last one
 * ends where the object does). */
static void obj_fde(cfi_obj *o, int i, const uint8_t *insns, size_t n)
{
    size_t at = o->len;
    o->fde_at[o->nfde++] = at;
    put_u32(o, 0);
    put_u32(o, (uint32_t)(o->len - o->cie_at));
    put_u32(o, (uint32_t)(FN(o, i) - (uintptr_t)(o->mem + o->len))); /* pc_begin, pcrel */
    put_u32(o, FN_SPAN);
    put_u8(o, 0); /* augmentation data length */
    put(o, insns, n);
    set_u32(o, at, (uint32_t)(o->len - at - 4));
}

/* Moves the object to the end of the region's accessible page (every encoding in it is relative:
 * the functions move with it) and writes the search table (the FDEs were added in address
 * order). */
static void obj_end(cfi_obj *o)
{
    uint8_t *to = region + OBJ_BYTES - o->len;
    memmove(to, o->mem, o->len);
    o->fn_base += (uintptr_t)(to - o->mem);
    o->mem = to;
    for (size_t k = 0; k < o->nfde; k++) {
        uint32_t start;
        memcpy(&start, o->mem + o->fde_at[k] + 8, 4);
        uintptr_t pc = (uintptr_t)(o->mem + o->fde_at[k] + 8) + (uintptr_t)(int64_t)(int32_t)start;
        set_u32(o, o->table_at + 8 * k, (uint32_t)(pc - (uintptr_t)o->mem));
        set_u32(o, o->table_at + 8 * k + 4, (uint32_t)o->fde_at[k]);
    }
    o->obj = (lp__cfi_object){o->mem, (uintptr_t)o->mem, (uintptr_t)o->mem + o->len};
}

/* Function 0: push rbp (at +1), mov rsp, rbp (at +4): a frame-pointer prologue. */
static const uint8_t FN_PROLOGUE[] = {0x41, 0x0e, 16, 0x86, 2, 0x43, 0x0d, 6};
/* Function 1: RA undefined: the outermost frame. */
static const uint8_t FN_OUTERMOST[] = {0x07, 16};
/* Function 2: GCC's stack realignment: CFA = *(rbp - 8), rbp saved at rbp + 0 (from +2). */
static const uint8_t FN_REALIGN[] = {0x42, 0x0f, 3, 0x76, 0x78, 0x06, 0x10, 6, 2, 0x76, 0};
/* Function 3: CFA = rsp + 24, no frame pointer (from +1). */
static const uint8_t FN_FRAMELESS[] = {0x41, 0x0e, 24};

static void build_good(cfi_obj *o)
{
    obj_begin(o, 4, "zR");
    obj_fde(o, 0, FN_PROLOGUE, sizeof FN_PROLOGUE);
    obj_fde(o, 1, FN_OUTERMOST, sizeof FN_OUTERMOST);
    obj_fde(o, 2, FN_REALIGN, sizeof FN_REALIGN);
    obj_fde(o, 3, FN_FRAMELESS, sizeof FN_FRAMELESS);
    obj_end(o);
}

static const lp__cfi_object *find_obj(uintptr_t ra, void *user)
{
    cfi_obj *o = user;
    return ra >= FN(o, 0) && ra < FN(o, FN_MAX) ? &o->obj : NULL;
}

static int kind(lp__cfi_rule r) { return (int)(r & 3); }

/* Each row of the functions above gives a rule; addresses outside every FDE give none. */
static void test_rules_of_rows(void **state)
{
    (void)state;
    cfi_obj o;
    build_good(&o);
    for (int i = 0; i < 4; i++)
        for (uintptr_t off = 1; off <= FN_SPAN; off++)
            assert_int_equal(kind(lp__cfi_rule_at(&o.obj, FN(&o, i) + off)),
                             i == 1 ? LP__CFI_LAST : LP__CFI_STEP);
    assert_int_equal(lp__cfi_rule_at(&o.obj, FN(&o, 0)), LP__CFI_NONE); /* before the first */
    assert_int_equal(lp__cfi_rule_at(&o.obj, FN(&o, 4) + 1), LP__CFI_NONE); /* after the last */
    assert_int_equal(lp__cfi_rule_at(&o.obj, 0), LP__CFI_NONE);
    /* The rows differ where the prologue says: one rule at +1 (the call ends at +0), another
     * after push rbp, another after mov rsp, rbp. */
    lp__cfi_rule r0 = lp__cfi_rule_at(&o.obj, FN(&o, 0) + 1),
                 r1 = lp__cfi_rule_at(&o.obj, FN(&o, 0) + 2),
                 r4 = lp__cfi_rule_at(&o.obj, FN(&o, 0) + 5);
    assert_true(r0 != r1 && r1 != r4 && r0 != r4);
    assert_int_equal(lp__cfi_rule_at(&o.obj, FN(&o, 0) + 4), r1);
    assert_int_equal(lp__cfi_rule_at(&o.obj, FN(&o, 0) + FN_SPAN), r4);
}

/* A walk over a made-up stack through all four kinds of frame, to the outermost one. */
static void test_walk_made_up_stack(void **state)
{
    (void)state;
    cfi_obj o;
    build_good(&o);
    uintptr_t st[32] = {0};
    uintptr_t *s = st;
    /* Frame 0, in function 0 after its prologue: CFA = rbp + 16, rbp at CFA - 16. */
    s[0] = 0xdead;                      /* the callee's locals */
    uintptr_t fp0 = (uintptr_t)&s[2];
    s[2] = (uintptr_t)&s[10];           /* the caller's rbp */
    s[3] = FN(&o, 3) + 9;               /* into function 3: CFA = rsp + 24 */
    /* Frame 1 (function 3): rsp = &s[4], CFA = &s[7], RA at s[6]. rbp unchanged. */
    s[6] = FN(&o, 2) + 7;               /* into function 2: CFA = *(rbp - 8), rbp at *rbp */
    /* Frame 2 (function 2): rbp = &s[10]: CFA = s[9]; the caller's rbp = s[10]. */
    s[9] = (uintptr_t)&s[14];
    s[10] = (uintptr_t)&s[20];
    s[13] = FN(&o, 0) + 1;              /* RA at CFA - 8: into function 0 at its first row */
    /* Frame 3 (function 0, first row): rsp = &s[14], CFA = rsp + 8, RA at s[14]. */
    s[14] = FN(&o, 1) + 3;              /* the outermost */
    lp__cfi_cache cache;
    memset(&cache, 0, sizeof cache);
    uintptr_t ips[8];
    for (int round = 0; round < 2; round++) { /* the second from the cache */
        int n = lp__cfi_walk(&cache, find_obj, &o, FN(&o, 0) + 40, (uintptr_t)&s[1], fp0,
                             (uintptr_t)&st[32], ips, 8);
        assert_int_equal(n, 5);
        assert_int_equal(ips[0], FN(&o, 0) + 40);
        assert_int_equal(ips[1], FN(&o, 3) + 9);
        assert_int_equal(ips[2], FN(&o, 2) + 7);
        assert_int_equal(ips[3], FN(&o, 0) + 1);
        assert_int_equal(ips[4], FN(&o, 1) + 3);
    }
    /* At most max frames. */
    assert_int_equal(lp__cfi_walk(&cache, find_obj, &o, FN(&o, 0) + 40, (uintptr_t)&s[1], fp0,
                                  (uintptr_t)&st[32], ips, 2),
                     2);
    /* The stack ends before the realigned frame's return address (s[13]): refused, not read. */
    assert_int_equal(lp__cfi_walk(&cache, find_obj, &o, FN(&o, 0) + 40, (uintptr_t)&s[1], fp0,
                                  (uintptr_t)&s[12], ips, 8),
                     -1);
    /* A frame pointer that points below the stack pointer: refused. */
    assert_int_equal(lp__cfi_walk(&cache, find_obj, &o, FN(&o, 0) + 40, (uintptr_t)&s[4],
                                  (uintptr_t)&s[2], (uintptr_t)&st[32], ips, 8),
                     -1);
    /* A return address no object holds: refused (the caller asks libunwind). */
    s[14] = 0x123456;
    assert_int_equal(lp__cfi_walk(&cache, find_obj, &o, FN(&o, 0) + 40, (uintptr_t)&s[1], fp0,
                                  (uintptr_t)&st[32], ips, 8),
                     -1);
    /* Zero return address: the end of the chain, as libunwind stops. */
    s[14] = 0;
    assert_int_equal(lp__cfi_walk(&cache, find_obj, &o, FN(&o, 0) + 40, (uintptr_t)&s[1], fp0,
                                  (uintptr_t)&st[32], ips, 8),
                     4);
    lp__cfi_cache_clear(&cache);
}

/* Malformed or unsupported CFI gives no rule: every case, at every address of function 0. */
static void check_refused(const cfi_obj *o, const char *what)
{
    for (uintptr_t off = 0; off <= FN_SPAN; off++)
        if (lp__cfi_rule_at(&o->obj, FN(o, 0) + off) != LP__CFI_NONE)
            fail_msg("%s: a rule at +%lu", what, (unsigned long)off);
}

static void test_bad_cfi_refused(void **state)
{
    (void)state;
    cfi_obj o;
    build_good(&o);
    o.mem[0] = 2;
    check_refused(&o, "header version 2");
    build_good(&o);
    o.mem[3] = 0x1b;
    check_refused(&o, "table encoding other than datarel sdata4");
    build_good(&o);
    set_u32(&o, 8, 0x10000000);
    check_refused(&o, "more table entries than the object holds");
    build_good(&o);
    set_u32(&o, o.table_at + 4, (uint32_t)OBJ_BYTES * 4);
    check_refused(&o, "an FDE outside the object");
    build_good(&o);
    set_u32(&o, o.fde_at[0], 0x7ffffff0);
    check_refused(&o, "an FDE longer than the object");
    build_good(&o);
    set_u32(&o, o.cie_at, 3);
    check_refused(&o, "a CIE cut short");
    build_good(&o);
    set_u32(&o, o.fde_at[0] + 4, (uint32_t)(o.fde_at[0] + 4 + 64));
    check_refused(&o, "a CIE pointer before the object");
    build_good(&o);
    o.mem[o.cie_at + 8] = 2;
    check_refused(&o, "CIE version 2");
    build_good(&o);
    o.mem[o.cie_at + 14] = 15; /* the return address register (after "zR\0", 1, 0x78) */
    check_refused(&o, "return address in another register");

    obj_begin(&o, 1, "zRS");
    obj_fde(&o, 0, FN_PROLOGUE, sizeof FN_PROLOGUE);
    obj_end(&o);
    check_refused(&o, "a signal frame ('S')");

    struct {
        const char *what;
        uint8_t insns[12];
        size_t n;
    } bad[] = {
        {"an unknown instruction", {0x3f}, 1},
        {"restore_state without remember_state", {0x0b}, 1},
        {"a CFA expression other than the realignment form", {0x0f, 2, 0x77, 0x06}, 4},
        {"a CFA expression longer than the FDE", {0x0f, 60, 0x76, 0x78}, 4},
        {"a CFA in another register", {0x0c, 3, 8}, 3},
        {"the return address elsewhere than CFA - 8", {0x90, 2}, 2},
        {"rbp kept in another register", {0x09, 6, 3}, 3},
        {"an instruction cut by the end of the object", {0x0e, 0x80}, 2},
        {"an advance cut by the end of the object", {0x04, 1, 0}, 3},
        {"a uleb128 that never ends", {0x0e, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                      0x80, 0x80}, 12},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        obj_begin(&o, 1, "zR");
        obj_fde(&o, 0, bad[k].insns, bad[k].n);
        obj_end(&o);
        check_refused(&o, bad[k].what);
    }
    obj_begin(&o, 1, "zR"); /* the control: the same object with good instructions has rules */
    obj_fde(&o, 0, FN_PROLOGUE, sizeof FN_PROLOGUE);
    obj_end(&o);
    assert_int_equal(kind(lp__cfi_rule_at(&o.obj, FN(&o, 0) + 9)), LP__CFI_STEP);
    uint8_t deep[40];
    memset(deep, 0x0a, sizeof deep); /* remember_state 40 times */
    obj_begin(&o, 1, "zR");
    obj_fde(&o, 0, deep, sizeof deep);
    obj_end(&o);
    check_refused(&o, "remember_state nested too deep");

    lp__cfi_object none;
    lp__cfi_object_init(&none, 0, NULL, 0);
    assert_null(none.hdr);
    assert_int_equal(lp__cfi_rule_at(&none, 0x401000), LP__CFI_NONE);
}

/* ---- this process's own objects, against libunwind --------------------------------------------- */

typedef struct {
    uintptr_t ra;
    lp__cfi_object obj;
} find_real;

static int find_real_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    find_real *f = data;
    const ElfW(Phdr) *ph = info->dlpi_phdr;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        uintptr_t lo = info->dlpi_addr + ph[i].p_vaddr;
        if (ph[i].p_type == PT_LOAD && f->ra >= lo && f->ra < lo + ph[i].p_memsz) {
            lp__cfi_object_init(&f->obj, info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum);
            return 1;
        }
    }
    return 0;
}

static const lp__cfi_object *find_process_obj(uintptr_t ra, void *user)
{
    find_real *f = user;
    f->ra = ra;
    f->obj = (lp__cfi_object){0};
    return dl_iterate_phdr(find_real_cb, f) ? &f->obj : NULL;
}

static uintptr_t stack_top(void)
{
    pthread_attr_t attr;
    void *addr = NULL;
    size_t size = 0;
    assert_int_equal(pthread_getattr_np(pthread_self(), &attr), 0);
    assert_int_equal(pthread_attr_getstack(&attr, &addr, &size), 0);
    pthread_attr_destroy(&attr);
    return (uintptr_t)addr + size;
}

/* Compares the two walks from the caller of this function (which keeps rbp: it asks for its
 * frame address), then returns the frame count. */
__attribute__((noinline)) static int compare_walks(void)
{
    void *unw[64];
    int nu = unw_backtrace(unw, 64);
    const uintptr_t *frame = __builtin_frame_address(0);
    static lp__cfi_cache cache;
    find_real f;
    uintptr_t ips[64];
    int nc = lp__cfi_walk(&cache, find_process_obj, &f, frame[1], (uintptr_t)(frame + 2),
                          frame[0], stack_top(), ips, 63);
    assert_true(nc > 0);
    assert_true(nu >= 2);
    /* libunwind's first frame is this function; the rest are the same return addresses. */
    assert_int_equal(nc, nu - 1);
    for (int i = 0; i < nc; i++)
        assert_int_equal(ips[i], (uintptr_t)unw[i + 1]);
    return nc;
}

/* Frames of two sizes (in an optimized build without frame pointers: rsp-based rules), through
 * cmocka's and, below, libc's qsort's frames. */
static int depth_b(int d);
__attribute__((noinline)) static int depth_a(int d)
{
    volatile int pad[5] = {d};
    int n = d ? depth_b(d - 1) : compare_walks();
    return n + pad[0] - d;
}

__attribute__((noinline)) static int depth_b(int d)
{
    volatile char pad[37] = {(char)d};
    int n = d ? depth_a(d - 1) : compare_walks();
    return n + pad[0] - (char)d;
}

static int walked_in_qsort;

static int cmp_and_walk(const void *a, const void *b)
{
    if (!walked_in_qsort++)
        assert_true(depth_a(3) > 6);
    return *(const int *)a - *(const int *)b;
}

static void test_own_stack_as_libunwind(void **state)
{
    (void)state;
    for (int d = 0; d < 8; d++)
        assert_true(depth_a(d) >= d + 3);
    int v[16] = {5, 3, 9, 1, 7, 2, 8, 4, 6, 0, 15, 11, 13, 10, 12, 14};
    qsort(v, 16, sizeof *v, cmp_and_walk);
    assert_int_equal(walked_in_qsort > 0, 1);
    assert_int_equal(v[0], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules_of_rows),
        cmocka_unit_test(test_walk_made_up_stack),
        cmocka_unit_test(test_bad_cfi_refused),
        cmocka_unit_test(test_own_stack_as_libunwind),
    };
    return cmocka_run_group_tests(tests, map_region, unmap_region);
}
