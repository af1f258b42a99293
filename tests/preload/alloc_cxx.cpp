// Known C++ allocations (alloc_cxx.h): new/delete, new[]/delete[], aligned and nothrow new, and a
// std::vector growing by push_back. Proves that operator new/delete reach the interposed
// malloc/free (libstdc++ calls them through the PLT). Knows nothing of gradprof.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

#include "alloc_cxx.h"

namespace
{

struct Blob {
    char bytes[AX_NEW_SIZE];
};

struct alignas(AX_ALIGNED_ALIGN) Aligned {
    char bytes[AX_ALIGNED_SIZE];
};

struct Elem {
    char bytes[AX_ELEM_SIZE];
};

int failures = 0;

// Touches the block and hides it from the optimizer, so no allocation is elided.
void use(void *p, std::size_t n)
{
    if (p == nullptr) {
        failures++;
        return;
    }
    std::memset(p, 0x5A, n);
    __asm__ volatile("" : : "r"(p) : "memory");
}

} // namespace

int main()
{
    Blob *blobs[AX_NEW_COUNT];
    for (auto &b : blobs) {
        b = new Blob;
        use(b, sizeof *b);
    }
    char *arrays[AX_ARRAY_COUNT];
    for (auto &a : arrays) {
        a = new char[AX_ARRAY_SIZE];
        use(a, AX_ARRAY_SIZE);
    }
    Aligned *al = new Aligned;
    use(al, sizeof *al);
    if (reinterpret_cast<std::uintptr_t>(al) % AX_ALIGNED_ALIGN != 0)
        failures++;
    char *nt = new (std::nothrow) char[AX_NOTHROW_SIZE];
    use(nt, AX_NOTHROW_SIZE);
    {
        std::vector<Elem> v;
        for (int i = 0; i < AX_PUSHES; i++) {
            v.push_back(Elem());
            use(v.data(), v.size() * sizeof(Elem));
        }
    }
    delete[] nt;
    delete al;
    for (auto a : arrays)
        delete[] a;
    for (auto b : blobs)
        delete b;

    if (failures != 0) {
        std::printf("alloc_cxx: %d failures\n", failures);
        return 1;
    }
    std::fputs(AX_STDOUT, stdout);
    return 0;
}
