/*
 * The recorder's own stack walk for code without frame pointers (cfi.c): x86-64 DWARF call-frame
 * information, the `.eh_frame` that compilers emit for exception handling and that nearly every
 * object of a Linux system carries. For each return address it derives, once, the rule that
 * finds the caller's frame (where the canonical frame address is, where the return address and
 * the caller's rbp were saved), found through the object's `.eh_frame_hdr` search table; the
 * rules are cached per thread, so a walk costs a table lookup and two loads a frame.
 *
 * What a rule cannot express (signal frames, CFA expressions other than the stack-realignment
 * one, a return address or rbp kept anywhere but on the stack, code without CFI) makes the walk
 * fail, and the recorder asks libunwind for that stack instead: the stacks are libunwind's, frame
 * for frame (tests/test_preload.c compares them), at a fraction of its cost (bench/NOTES.md).
 *
 * Never a read outside memory known to be mapped: CFI is read only inside the loaded segment that
 * holds the object's `.eh_frame_hdr`, the stack only between the walk's first stack pointer and
 * the end of the thread's stack. Not installed.
 */
#ifndef GRADPROF_LIBPROF_CFI_H
#define GRADPROF_LIBPROF_CFI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* Where an object's call-frame information lies in memory. */
typedef struct lp__cfi_object {
    const uint8_t *hdr; /* its .eh_frame_hdr (PT_GNU_EH_FRAME), NULL if it has none */
    uintptr_t lo, hi;   /* the loaded segment that holds hdr: every read of CFI stays inside */
} lp__cfi_object;

/* Finds the .eh_frame_hdr of a loaded object from its program headers (dl_iterate_phdr's
 * dlpi_addr, dlpi_phdr, dlpi_phnum). */
void lp__cfi_object_init(lp__cfi_object *o, uintptr_t load_bias, const void *phdr, int phnum);

/*
 * How to find the caller's frame from a return address, packed in 64 bits (0: no usable rule):
 *   bits 0-1   kind: LP__CFI_STEP, or LP__CFI_LAST (the outermost frame: its return address or
 *              its rbp is undefined, which ends the call chain, as libunwind has it)
 *   bit 2      the CFA is computed from rbp (else from rsp)
 *   bit 3      the CFA is loaded from that address (the stack-realignment form *(rbp + offset))
 *   bits 4-5   the caller's rbp: 0 the same as now, 1 saved at CFA + rbp offset, 2 saved at
 *              rbp + rbp offset (the realignment form)
 *   bits 16-31 the rbp offset (int16), bits 32-63 the CFA offset (int32)
 * The return address is always at CFA - 8 and the caller's rsp is the CFA.
 */
typedef uint64_t lp__cfi_rule;
enum { LP__CFI_NONE = 0, LP__CFI_STEP = 1, LP__CFI_LAST = 2 };

/* The rule for the frame that return address `ra` returns into, from o's CFI (the row that holds
 * ra - 1, the call instruction); 0 if there is none or it cannot be expressed. */
lp__cfi_rule lp__cfi_rule_at(const lp__cfi_object *o, uintptr_t ra);

/* A thread's rules by return address: a table in memory from mmap, and in front of it the rules
 * of the latest walks, direct-mapped (consecutive walks share most of their frames). Zeroed is
 * empty. */
typedef struct lp__cfi_slot {
    uintptr_t ra;
    lp__cfi_rule rule;
} lp__cfi_slot;

typedef struct lp__cfi_cache {
    lp__cfi_slot *slots;
    size_t cap, len;
    lp__cfi_slot recent[1024];
} lp__cfi_cache;

/* Forgets every rule (objects were unloaded: an address may now hold other code). */
void lp__cfi_cache_clear(lp__cfi_cache *c);

/* The object whose code holds `ra`, for a rule not cached yet; NULL if none is known. */
typedef const lp__cfi_object *(*lp__cfi_find_fn)(uintptr_t ra, void *user);

/*
 * Walks the stack from a caller's state at a return address: `ra` returns into it, `sp` is its
 * stack pointer once the callee returned, `fp` its rbp. Writes at most `max` return addresses,
 * `ra` first, into ips, and returns their count; -1 if a frame has no usable rule or leaves the
 * stack [sp, stack_hi), in which case the caller asks another unwinder. Stops, like libunwind's
 * unw_backtrace, after the outermost frame or at a return address below 0x4000.
 */
int lp__cfi_walk(lp__cfi_cache *c, lp__cfi_find_fn find, void *user, uintptr_t ra, uintptr_t sp,
                 uintptr_t fp, uintptr_t stack_hi, uintptr_t *ips, int max);

#pragma GCC visibility pop

#endif /* GRADPROF_LIBPROF_CFI_H */
