/*
 * symbolize_target — a helper program for test_symbolize: built as a non-PIE executable (and, by
 * POST_BUILD steps, as a stripped copy and a copy with a separate debug file). Run, it prints one
 * line per known code address, computed as the recorder computes frames (offset = address -
 * dl_iterate_phdr's dlpi_addr of the main program, which is 0 for a non-PIE executable):
 *     <pc|ret> <expected function> <offset in hex> <expected line>
 * "pc" is a function's entry (an exact address), "ret" a return address inside the function.
 */
#define _GNU_SOURCE
#include <link.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__clang__)
#define TARGET_NOINLINE __attribute__((noinline))
#else
#define TARGET_NOINLINE __attribute__((noinline, noipa))
#endif

static uintptr_t main_base;
static int main_base_found;
static void *captured_ra;
static int call_line;
volatile int target_sink;

static int find_main_base(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    main_base = (uintptr_t)info->dlpi_addr; /* the first object is the main program */
    main_base_found = 1;
    return 1;
}

/* Records its return address and the line of the call (passed as __LINE__ by the caller). */
TARGET_NOINLINE static void capture_return_address(int line)
{
    captured_ra = __builtin_return_address(0);
    call_line = line;
    target_sink++;
}

static const int target_static_line = __LINE__ + 1;
TARGET_NOINLINE static int target_static(int x)
{
    return x * 3 + target_sink;
}

TARGET_NOINLINE int target_global(int x);
static const int target_global_line = __LINE__ + 1;
TARGET_NOINLINE int target_global(int x)
{
    return x + 7 + target_sink;
}

/* A C function under a C++ mangled name: the symbolizer must print it as "ns::foo(int)". */
int target_mangled(int x) __asm__("_ZN2ns3fooEi");
static const int target_mangled_line = __LINE__ + 1;
TARGET_NOINLINE int target_mangled(int x)
{
    return x - 1 + target_sink;
}

TARGET_NOINLINE static int target_caller(void)
{
    capture_return_address(__LINE__);
    return target_sink + 1;
}

int main(void)
{
    dl_iterate_phdr(find_main_base, NULL);
    if (!main_base_found)
        return 1;
    target_sink += target_static(1) + target_global(2) + target_mangled(3) + target_caller();
    printf("pc target_static %jx %d\n", (uintmax_t)((uintptr_t)&target_static - main_base),
           target_static_line);
    printf("pc target_global %jx %d\n", (uintmax_t)((uintptr_t)&target_global - main_base),
           target_global_line);
    printf("pc ns::foo(int) %jx %d\n", (uintmax_t)((uintptr_t)&target_mangled - main_base),
           target_mangled_line);
    printf("ret target_caller %jx %d\n", (uintmax_t)((uintptr_t)captured_ra - main_base),
           call_line);
    return 0;
}
