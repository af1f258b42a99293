/* A library that allocates at the bottom of a native call chain deeper than the recorder's
 * default depth: gp_deep_alloc(levels, size) recurses `levels` times through gp_deep_level, then
 * mallocs. tests/preload/py_deep.py calls it through ctypes. Built with -O0 -fno-inline
 * -fno-optimize-sibling-calls: every level is a frame. Knows nothing of gradprof. */
#include <stddef.h>
#include <stdlib.h>

void *gp_deep_level(int n, size_t size);
void *gp_deep_alloc(int levels, size_t size);
void gp_deep_free(void *p);

__attribute__((noinline)) void *gp_deep_level(int n, size_t size)
{
    void *p = n > 0 ? gp_deep_level(n - 1, size) : malloc(size);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

void *gp_deep_alloc(int levels, size_t size)
{
    return gp_deep_level(levels, size);
}

void gp_deep_free(void *p)
{
    free(p);
}
