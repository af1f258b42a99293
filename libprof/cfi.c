/*
 * x86-64 DWARF call-frame information and the stack walk that uses it (cfi.h).
 *
 * References: the System V x86-64 psABI (register numbers, .eh_frame_hdr), the DWARF 4 standard
 * section 6.4 (call frame instructions), the Linux Standard Base's .eh_frame description (the
 * 'z', 'R', 'P', 'L', 'S' augmentations and the DW_EH_PE_* pointer encodings). The rules a walk
 * can apply are those of libunwind's fast trace (src/x86_64/Gtrace.c): a CFA at rsp or rbp plus
 * an offset (or loaded from rbp plus an offset, GCC's stack realignment), the return address at
 * CFA - 8, rbp unchanged or saved on the stack; so where both apply they give the same stacks.
 */
#define _GNU_SOURCE
#include "cfi.h"

#include <elf.h>
#include <errno.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>

/* Pointer encodings (DW_EH_PE_*): the format in the low nibble, how it applies in bits 4-6. */
enum {
    PE_ABSPTR = 0x00, PE_ULEB128 = 0x01, PE_UDATA2 = 0x02, PE_UDATA4 = 0x03, PE_UDATA8 = 0x04,
    PE_SLEB128 = 0x09, PE_SDATA2 = 0x0a, PE_SDATA4 = 0x0b, PE_SDATA8 = 0x0c,
    PE_PCREL = 0x10, PE_DATAREL = 0x30, PE_INDIRECT = 0x80, PE_OMIT = 0xff,
};

/* DWARF register numbers (psABI figure 3.36) and the expression operators used here. */
enum { REG_RBP = 6, REG_RSP = 7, REG_RA = 16 };
enum { OP_DEREF = 0x06, OP_BREG6 = 0x76 };

/* ---- bounded reads -------------------------------------------------------------------------- */

/* A cursor over [p, end); any read past end sets bad and reads 0. */
typedef struct cfi_in {
    const uint8_t *p, *end;
    bool bad;
} cfi_in;

static uint64_t in_fixed(cfi_in *in, size_t n)
{
    uint64_t v = 0;
    if (in->bad || (size_t)(in->end - in->p) < n) {
        in->bad = true;
        return 0;
    }
    memcpy(&v, in->p, n); /* little-endian host */
    in->p += n;
    return v;
}

static uint8_t in_u8(cfi_in *in) { return (uint8_t)in_fixed(in, 1); }

static uint64_t in_uleb(cfi_in *in)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        uint8_t b = in_u8(in);
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    in->bad = true;
    return 0;
}

static int64_t in_sleb(cfi_in *in)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        uint8_t b = in_u8(in);
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (shift + 7 < 64 && (b & 0x40))
                v |= ~0ull << (shift + 7);
            return (int64_t)v;
        }
    }
    in->bad = true;
    return 0;
}

/* A pointer in encoding enc: pcrel is relative to the field's own address, datarel to `data`
 * (the .eh_frame_hdr). The indirect, textrel, funcrel and aligned forms are refused (false). */
static bool in_ptr(cfi_in *in, uint8_t enc, uintptr_t data, uintptr_t *out)
{
    if (enc == PE_OMIT || (enc & PE_INDIRECT))
        return false;
    uintptr_t at = (uintptr_t)in->p;
    uint64_t v;
    switch (enc & 0x0f) {
    case PE_ABSPTR: v = in_fixed(in, 8); break;
    case PE_ULEB128: v = in_uleb(in); break;
    case PE_UDATA2: v = in_fixed(in, 2); break;
    case PE_UDATA4: v = in_fixed(in, 4); break;
    case PE_UDATA8: v = in_fixed(in, 8); break;
    case PE_SLEB128: v = (uint64_t)in_sleb(in); break;
    case PE_SDATA2: v = (uint64_t)(int64_t)(int16_t)in_fixed(in, 2); break;
    case PE_SDATA4: v = (uint64_t)(int64_t)(int32_t)in_fixed(in, 4); break;
    case PE_SDATA8: v = in_fixed(in, 8); break;
    default: return false;
    }
    switch (enc & 0x70) {
    case 0: break;
    case PE_PCREL: v += at; break;
    case PE_DATAREL: v += data; break;
    default: return false;
    }
    *out = (uintptr_t)v;
    return !in->bad;
}

/* A block of a uleb128 length and that many bytes: *block covers them, in moves past; false if
 * the length is malformed or runs past the end. */
static bool in_block(cfi_in *in, cfi_in *block)
{
    uint64_t n = in_uleb(in);
    if (in->bad || n > (uint64_t)(in->end - in->p))
        return false;
    *block = (cfi_in){in->p, in->p + n, false};
    in->p += n;
    return true;
}

/* An .eh_frame entry (CIE or FDE): its 32-bit length read, in narrowed to its body; false for
 * the terminator, the 64-bit form or a length past the end. */
static bool in_entry(cfi_in *in)
{
    uint64_t len = in_fixed(in, 4);
    if (len == 0 || len == 0xffffffff || len > (uint64_t)(in->end - in->p))
        return false;
    in->end = in->p + len;
    return true;
}

/* ---- objects -------------------------------------------------------------------------------- */

void lp__cfi_object_init(lp__cfi_object *o, uintptr_t load_bias, const void *phdr, int phnum)
{
    const ElfW(Phdr) *ph = phdr;
    *o = (lp__cfi_object){0};
    uintptr_t hdr = 0;
    for (int i = 0; i < phnum; i++)
        if (ph[i].p_type == PT_GNU_EH_FRAME)
            hdr = load_bias + ph[i].p_vaddr;
    if (!hdr)
        return;
    for (int i = 0; i < phnum; i++) {
        uintptr_t lo = load_bias + ph[i].p_vaddr, hi = lo + ph[i].p_memsz;
        if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_R) && hdr >= lo && hdr < hi) {
            *o = (lp__cfi_object){(const uint8_t *)hdr, lo, hi};
            return;
        }
    }
}

/* ---- rules ---------------------------------------------------------------------------------- */

/* What a CIE says about the FDEs that use it. */
typedef struct cfi_cie {
    uint64_t code_align;
    int64_t data_align;
    uint8_t fde_enc;
    bool has_aug_data; /* 'z': FDEs carry an augmentation length */
    cfi_in insns;      /* the initial instructions */
} cfi_cie;

/* How a register was saved, as far as a walk cares. */
enum { RULE_UNSPEC, RULE_UNDEF, RULE_SAME, RULE_AT_CFA, RULE_AT_RBP, RULE_OTHER };
enum { CFA_REG, CFA_DEREF, CFA_OTHER };

typedef struct cfi_reg {
    uint8_t how;
    int64_t off;
} cfi_reg;

/* A row of the CFA table, reduced to the columns a walk reads. */
typedef struct cfi_row {
    uint8_t cfa_how;
    uint64_t cfa_reg;
    int64_t cfa_off;
    cfi_reg rbp, rsp, ra;
} cfi_row;

static bool cie_parse(const lp__cfi_object *o, const uint8_t *at, cfi_cie *cie)
{
    if ((uintptr_t)at < o->lo || (uintptr_t)at >= o->hi)
        return false;
    cfi_in in = {at, (const uint8_t *)o->hi, false};
    if (!in_entry(&in))
        return false;
    uint8_t version;
    if (in_fixed(&in, 4) != 0 || ((version = in_u8(&in)) != 1 && version != 3 && version != 4))
        return false;
    const char *aug = (const char *)in.p;
    size_t aug_len = strnlen(aug, (size_t)(in.end - in.p));
    if (aug_len == (size_t)(in.end - in.p) || strstr(aug, "eh"))
        return false;
    in.p += aug_len + 1;
    if (version == 4)
        in_fixed(&in, 2); /* address and segment selector sizes */
    *cie = (cfi_cie){.fde_enc = PE_ABSPTR};
    cie->code_align = in_uleb(&in);
    cie->data_align = in_sleb(&in);
    uint64_t ra = version == 1 ? in_u8(&in) : in_uleb(&in);
    if (ra != REG_RA)
        return false;
    if (aug[0] == 'z') {
        cie->has_aug_data = true;
        cfi_in data;
        if (!in_block(&in, &data))
            return false;
        for (const char *a = aug + 1; *a; a++) {
            uintptr_t ignored;
            if (*a == 'R')
                cie->fde_enc = in_u8(&data);
            else if (*a == 'P') { /* the personality routine: only skipped */
                uint8_t enc = in_u8(&data);
                if ((enc & 0x70) == 0x50 || !in_ptr(&data, enc & 0x0f, 0, &ignored))
                    return false;
            } else if (*a == 'L')
                in_u8(&data); /* the LSDA's encoding */
            else if (*a == 'S')
                return false; /* a signal frame: not a walk's to handle */
            else if (*a != 'B')
                break;        /* unknown: the rest of the data is skipped by length */
        }
        if (data.bad)
            return false;
    } else if (aug[0] != '\0') {
        return false; /* an augmentation without a length cannot be skipped */
    }
    cie->insns = in;
    return !in.bad;
}

static void reg_set(cfi_row *r, uint64_t reg, uint8_t how, int64_t off)
{
    cfi_reg *x = reg == REG_RBP  ? &r->rbp
                 : reg == REG_RSP ? &r->rsp
                 : reg == REG_RA  ? &r->ra
                                  : NULL;
    if (x)
        *x = (cfi_reg){how, off};
}

static void reg_restore(cfi_row *r, uint64_t reg, const cfi_row *initial)
{
    if (reg == REG_RBP)
        r->rbp = initial->rbp;
    else if (reg == REG_RSP)
        r->rsp = initial->rsp;
    else if (reg == REG_RA)
        r->ra = initial->ra;
}

/* The register rule of a DW_CFA_expression block: only [DW_OP_breg6 k] (saved at rbp + k), the
 * one GCC's stack realignment writes for rbp. */
static cfi_reg expr_reg(cfi_in block)
{
    if (in_u8(&block) != OP_BREG6)
        return (cfi_reg){RULE_OTHER, 0};
    int64_t k = in_sleb(&block);
    return block.bad || block.p != block.end ? (cfi_reg){RULE_OTHER, 0}
                                              : (cfi_reg){RULE_AT_RBP, k};
}

/*
 * Runs the call frame instructions of `in` on row r, the current location starting at `loc`,
 * until the row that holds `target` is complete (the next advance would pass it) or the
 * instructions end. `initial` is the row after the CIE's instructions (DW_CFA_restore). Returns
 * false for an instruction that is malformed or unknown.
 */
static bool cfi_run(const cfi_cie *cie, cfi_in in, uintptr_t loc, uintptr_t target, cfi_row *r,
                    const cfi_row *initial, uintptr_t hdr)
{
    enum { STATE_MAX = 16 };
    cfi_row saved[STATE_MAX];
    int depth = 0;
    while (in.p < in.end) {
        uint8_t op = in_u8(&in);
        uint64_t reg, delta = 0;
        int64_t off;
        bool advance = false;
        switch (op & 0xc0) {
        case 0x40: /* DW_CFA_advance_loc */
            delta = op & 0x3f;
            advance = true;
            break;
        case 0x80: /* DW_CFA_offset */
            off = (int64_t)in_uleb(&in) * cie->data_align;
            reg_set(r, op & 0x3f, RULE_AT_CFA, off);
            break;
        case 0xc0: /* DW_CFA_restore */
            reg_restore(r, op & 0x3f, initial);
            break;
        default:
            switch (op) {
            case 0x00: break; /* DW_CFA_nop */
            case 0x01: {      /* DW_CFA_set_loc */
                uintptr_t to;
                if (!in_ptr(&in, cie->fde_enc, hdr, &to))
                    return false;
                if (to > target)
                    return true;
                loc = to;
                break;
            }
            case 0x02: delta = in_fixed(&in, 1), advance = true; break; /* advance_loc1 */
            case 0x03: delta = in_fixed(&in, 2), advance = true; break; /* advance_loc2 */
            case 0x04: delta = in_fixed(&in, 4), advance = true; break; /* advance_loc4 */
            case 0x05: /* DW_CFA_offset_extended */
                reg = in_uleb(&in);
                reg_set(r, reg, RULE_AT_CFA, (int64_t)in_uleb(&in) * cie->data_align);
                break;
            case 0x06: reg_restore(r, in_uleb(&in), initial); break; /* restore_extended */
            case 0x07: reg_set(r, in_uleb(&in), RULE_UNDEF, 0); break; /* undefined */
            case 0x08: reg_set(r, in_uleb(&in), RULE_SAME, 0); break;  /* same_value */
            case 0x09: /* DW_CFA_register: kept in another register */
                reg = in_uleb(&in);
                in_uleb(&in);
                reg_set(r, reg, RULE_OTHER, 0);
                break;
            case 0x0a: /* DW_CFA_remember_state: the whole row, CFA included (as GCC expects) */
                if (depth == STATE_MAX)
                    return false;
                saved[depth++] = *r;
                break;
            case 0x0b: /* DW_CFA_restore_state */
                if (depth == 0)
                    return false;
                *r = saved[--depth];
                break;
            case 0x0c: /* DW_CFA_def_cfa */
                r->cfa_how = CFA_REG;
                r->cfa_reg = in_uleb(&in);
                r->cfa_off = (int64_t)in_uleb(&in);
                break;
            case 0x0d: /* DW_CFA_def_cfa_register */
                r->cfa_reg = in_uleb(&in);
                if (r->cfa_how != CFA_REG)
                    r->cfa_how = CFA_OTHER;
                break;
            case 0x0e: /* DW_CFA_def_cfa_offset */
                r->cfa_off = (int64_t)in_uleb(&in);
                if (r->cfa_how != CFA_REG)
                    r->cfa_how = CFA_OTHER;
                break;
            case 0x0f: { /* DW_CFA_def_cfa_expression: only [DW_OP_breg6 k; DW_OP_deref] */
                cfi_in block;
                if (!in_block(&in, &block))
                    return false;
                r->cfa_how = CFA_OTHER;
                if (in_u8(&block) == OP_BREG6) {
                    off = in_sleb(&block);
                    if (in_u8(&block) == OP_DEREF && !block.bad && block.p == block.end)
                        *r = (cfi_row){CFA_DEREF, REG_RBP, off, r->rbp, r->rsp, r->ra};
                }
                break;
            }
            case 0x10: { /* DW_CFA_expression */
                reg = in_uleb(&in);
                cfi_in block;
                if (!in_block(&in, &block))
                    return false;
                cfi_reg rule = expr_reg(block);
                reg_set(r, reg, rule.how, rule.off);
                break;
            }
            case 0x11: /* DW_CFA_offset_extended_sf */
                reg = in_uleb(&in);
                reg_set(r, reg, RULE_AT_CFA, in_sleb(&in) * cie->data_align);
                break;
            case 0x12: /* DW_CFA_def_cfa_sf */
                r->cfa_how = CFA_REG;
                r->cfa_reg = in_uleb(&in);
                r->cfa_off = in_sleb(&in) * cie->data_align;
                break;
            case 0x13: /* DW_CFA_def_cfa_offset_sf */
                r->cfa_off = in_sleb(&in) * cie->data_align;
                if (r->cfa_how != CFA_REG)
                    r->cfa_how = CFA_OTHER;
                break;
            case 0x14: /* DW_CFA_val_offset */
            case 0x15: /* DW_CFA_val_offset_sf */
                reg = in_uleb(&in);
                if (op == 0x14)
                    in_uleb(&in);
                else
                    in_sleb(&in);
                reg_set(r, reg, RULE_OTHER, 0);
                break;
            case 0x16: { /* DW_CFA_val_expression */
                reg = in_uleb(&in);
                cfi_in block;
                if (!in_block(&in, &block))
                    return false;
                reg_set(r, reg, RULE_OTHER, 0);
                break;
            }
            case 0x2e: in_uleb(&in); break; /* DW_CFA_GNU_args_size: no effect on the CFA */
            case 0x2f: /* DW_CFA_GNU_negative_offset_extended */
                reg = in_uleb(&in);
                reg_set(r, reg, RULE_AT_CFA, -(int64_t)in_uleb(&in) * cie->data_align);
                break;
            default: return false;
            }
        }
        if (in.bad)
            return false;
        uint64_t step;
        if (advance) {
            if (__builtin_mul_overflow(delta, cie->code_align, &step) || step > target - loc)
                return true; /* the next row starts after target */
            loc += step;
        }
    }
    return true;
}

/* The row reduced to a rule, or 0 where it has no form a walk applies (libunwind's limits). */
static lp__cfi_rule rule_of_row(const cfi_row *r)
{
    if (r->ra.how == RULE_UNDEF || r->rbp.how == RULE_UNDEF)
        return LP__CFI_LAST;
    if (r->ra.how != RULE_AT_CFA || r->ra.off != -8)
        return LP__CFI_NONE;
    if (r->rsp.how != RULE_UNSPEC && r->rsp.how != RULE_SAME && r->rsp.how != RULE_AT_CFA)
        return LP__CFI_NONE;
    lp__cfi_rule rule = LP__CFI_STEP;
    if (r->cfa_how == CFA_REG && (r->cfa_reg == REG_RSP || r->cfa_reg == REG_RBP) &&
        r->cfa_off > -(1 << 28) && r->cfa_off < (1 << 28)) {
        if (r->cfa_reg == REG_RBP)
            rule |= 1u << 2;
    } else if (r->cfa_how == CFA_DEREF && r->rbp.how == RULE_AT_RBP &&
               r->cfa_off > -(1 << 28) && r->cfa_off < (1 << 28)) {
        rule |= 1u << 2 | 1u << 3;
    } else {
        return LP__CFI_NONE;
    }
    if (r->rbp.how == RULE_AT_CFA || r->rbp.how == RULE_AT_RBP) {
        if (r->rbp.off <= -(1 << 14) || r->rbp.off >= (1 << 14))
            return LP__CFI_NONE;
        rule |= (uint64_t)(r->rbp.how == RULE_AT_CFA ? 1 : 2) << 4;
        rule |= (uint64_t)(uint16_t)(int16_t)r->rbp.off << 16;
    } else if (r->rbp.how != RULE_UNSPEC && r->rbp.how != RULE_SAME) {
        return LP__CFI_NONE;
    }
    return rule | (uint64_t)(uint32_t)(int32_t)r->cfa_off << 32;
}

lp__cfi_rule lp__cfi_rule_at(const lp__cfi_object *o, uintptr_t ra)
{
    if (!o->hdr || ra == 0)
        return LP__CFI_NONE;
    uintptr_t hdr = (uintptr_t)o->hdr, target = ra - 1;
    cfi_in in = {o->hdr, (const uint8_t *)o->hi, false};
    uint8_t version = in_u8(&in), frame_enc = in_u8(&in), count_enc = in_u8(&in),
            table_enc = in_u8(&in);
    uintptr_t eh_frame, count;
    if (version != 1 || table_enc != (PE_DATAREL | PE_SDATA4) ||
        !in_ptr(&in, frame_enc, hdr, &eh_frame) || !in_ptr(&in, count_enc, hdr, &count) ||
        count == 0 || count > (uintptr_t)(in.end - in.p) / 8)
        return LP__CFI_NONE;
    /* The table: (initial location, FDE address) pairs relative to hdr, sorted by location; the
     * FDE that may hold target is the last one that starts at or before it. */
    const uint8_t *table = in.p;
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int32_t start;
        memcpy(&start, table + 8 * mid, 4);
        if (hdr + (intptr_t)start <= target)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return LP__CFI_NONE;
    int32_t fde_rel;
    memcpy(&fde_rel, table + 8 * (lo - 1) + 4, 4);
    uintptr_t fde = hdr + (intptr_t)fde_rel;
    if (fde < o->lo || fde >= o->hi)
        return LP__CFI_NONE;

    cfi_in f = {(const uint8_t *)fde, (const uint8_t *)o->hi, false};
    if (!in_entry(&f))
        return LP__CFI_NONE;
    const uint8_t *id_at = f.p;
    uint32_t cie_off = (uint32_t)in_fixed(&f, 4);
    cfi_cie cie;
    uintptr_t start, range;
    if (f.bad || cie_off == 0 || cie_off > (uintptr_t)id_at ||
        !cie_parse(o, id_at - cie_off, &cie) || !in_ptr(&f, cie.fde_enc, hdr, &start) ||
        !in_ptr(&f, cie.fde_enc & 0x0f, 0, &range) || target < start || target - start >= range)
        return LP__CFI_NONE;
    cfi_in aug_data;
    if (cie.has_aug_data && !in_block(&f, &aug_data))
        return LP__CFI_NONE;
    cfi_row row = {.cfa_how = CFA_OTHER}, initial;
    if (!cfi_run(&cie, cie.insns, start, UINTPTR_MAX, &row, &row, hdr))
        return LP__CFI_NONE;
    initial = row;
    if (!cfi_run(&cie, f, start, target, &row, &initial, hdr))
        return LP__CFI_NONE;
    return rule_of_row(&row);
}

/* ---- the per-thread cache and the walk ------------------------------------------------------- */

/* Where ra is probed first in a table of cap slots (a power of two). */
static size_t slot_at(uintptr_t ra, size_t cap)
{
    uint64_t h = (uint64_t)ra * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (cap - 1);
}

static size_t recent_at(uintptr_t ra) { return (size_t)(ra ^ ra >> 10) & 1023; }

/* Keeps rule for ra; false when no memory could be had (the rule is then asked for again). */
static bool cache_put(lp__cfi_cache *c, uintptr_t ra, lp__cfi_rule rule)
{
    if ((c->len + 1) * 2 > c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 4096;
        int saved_errno = errno;
        void *mem = mmap(NULL, cap * sizeof *c->slots, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        errno = saved_errno;
        if (mem == MAP_FAILED)
            return false;
        lp__cfi_slot *slots = mem;
        for (size_t i = 0; i < c->cap; i++) {
            if (!c->slots[i].ra)
                continue;
            size_t j = slot_at(c->slots[i].ra, cap);
            while (slots[j].ra)
                j = (j + 1) & (cap - 1);
            slots[j] = c->slots[i];
        }
        if (c->slots)
            munmap(c->slots, c->cap * sizeof *c->slots);
        c->slots = slots;
        c->cap = cap;
    }
    size_t i = slot_at(ra, c->cap);
    while (c->slots[i].ra)
        i = (i + 1) & (c->cap - 1);
    c->slots[i] = (lp__cfi_slot){ra, rule};
    c->len++;
    return true;
}

void lp__cfi_cache_clear(lp__cfi_cache *c)
{
    if (c->slots)
        munmap(c->slots, c->cap * sizeof *c->slots);
    c->slots = NULL;
    c->cap = c->len = 0;
    memset(c->recent, 0, sizeof c->recent);
}

/* ra's rule: from the cache, else from its object's CFI (and kept). */
static inline lp__cfi_rule rule_for(lp__cfi_cache *c, lp__cfi_find_fn find, void *user,
                                    uintptr_t ra)
{
    lp__cfi_slot *recent = &c->recent[recent_at(ra)];
    if (recent->ra == ra)
        return recent->rule;
    lp__cfi_rule rule = LP__CFI_NONE;
    bool cached = false;
    for (size_t i = c->cap ? slot_at(ra, c->cap) : 0; c->cap; i = (i + 1) & (c->cap - 1)) {
        if (c->slots[i].ra == ra) {
            rule = c->slots[i].rule;
            cached = true;
            break;
        }
        if (!c->slots[i].ra)
            break;
    }
    if (!cached) {
        const lp__cfi_object *o = find(ra, user);
        rule = o ? lp__cfi_rule_at(o, ra) : LP__CFI_NONE;
        cache_put(c, ra, rule);
    }
    *recent = (lp__cfi_slot){ra, rule};
    return rule;
}

/* The word at address a, if [a, a + 8) lies in [lo, hi) and is aligned. */
static inline bool stack_word(uintptr_t a, uintptr_t lo, uintptr_t hi, uintptr_t *out)
{
    if (a < lo || a > hi - 8 || (a & 7))
        return false;
    *out = *(const uintptr_t *)a;
    return true;
}

int lp__cfi_walk(lp__cfi_cache *c, lp__cfi_find_fn find, void *user, uintptr_t ra, uintptr_t sp,
                 uintptr_t fp, uintptr_t stack_hi, uintptr_t *ips, int max)
{
    const uintptr_t lo = sp;
    if (stack_hi < 16 || sp >= stack_hi)
        return -1;
    int n = 0;
    while (n < max && ra >= 0x4000) {
        ips[n++] = ra;
        lp__cfi_rule rule = rule_for(c, find, user, ra);
        int kind = (int)(rule & 3);
        if (kind == LP__CFI_LAST)
            break;
        if (kind != LP__CFI_STEP)
            return -1;
        uintptr_t cfa = ((rule & 4) ? fp : sp) + (intptr_t)(int32_t)(rule >> 32);
        if ((rule & 8) && !stack_word(cfa, lo, stack_hi, &cfa))
            return -1;
        uintptr_t next_ra, next_fp = fp;
        if (cfa <= sp || !stack_word(cfa - 8, lo, stack_hi, &next_ra))
            return -1;
        intptr_t fp_off = (int16_t)(uint16_t)(rule >> 16);
        switch ((rule >> 4) & 3) {
        case 1:
            if (!stack_word(cfa + fp_off, lo, stack_hi, &next_fp))
                return -1;
            break;
        case 2:
            if (!stack_word(fp + fp_off, lo, stack_hi, &next_fp))
                return -1;
            break;
        }
        sp = cfa;
        fp = next_fp;
        ra = next_ra;
    }
    return n;
}
