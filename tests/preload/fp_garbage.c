/* Code without frame pointers that keeps a pointer in %rbp (fp_garbage.h): a frame-pointer walk
 * from its allocations follows %rbp into a fake frame, the same one every time, and must be
 * refused once, not at each allocation. Knows nothing of gradprof. */
#include <stdio.h>
#include <stdlib.h>

#include "fp_garbage.h"

void *call_with_rbp(void *(*fn)(size_t), size_t n, void *rbp);

int main(void)
{
    /* What a frame-pointer walk reads at %rbp: the next frame (none) and a return address; on
     * the stack, as a local array that %rbp points at is. */
    void *volatile fake_frame[2] = {NULL, (void *)(unsigned long)main};
    for (int i = 0; i < FPG_COUNT; i++) {
        void *p = call_with_rbp(malloc, FPG_SIZE, (void *)fake_frame);
        if (!p)
            return 1;
        free(p);
    }
    fputs(FPG_STDOUT, stdout);
    return 0;
}
