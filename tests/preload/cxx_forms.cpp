// Every form of operator new and delete (cxx_forms.h), called explicitly so that each one is
// exercised whatever the compiler would choose, plus new-expressions, a growing std::vector, the
// C functions, and std::bad_alloc thrown and caught (also through a new_handler). Knows nothing of
// gradprof.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "cxx_forms.h"

namespace
{

int failures = 0;

void use(void *p, std::size_t n)
{
    if (p == nullptr) {
        failures++;
        return;
    }
    std::memset(p, 0x5A, n < 64 ? n : 64);
    __asm__ volatile("" : : "r"(p) : "memory");
}

const std::align_val_t al{CF_ALIGN};

void *new_plain(std::size_t n) { return ::operator new(n); }
void *new_nothrow(std::size_t n) { return ::operator new(n, std::nothrow); }
void *new_array(std::size_t n) { return ::operator new[](n); }
void *new_array_nothrow(std::size_t n) { return ::operator new[](n, std::nothrow); }
void *new_aligned(std::size_t n) { return ::operator new(n, al); }
void *new_aligned_nothrow(std::size_t n) { return ::operator new(n, al, std::nothrow); }
void *new_array_aligned(std::size_t n) { return ::operator new[](n, al); }
void *new_array_aligned_nothrow(std::size_t n) { return ::operator new[](n, al, std::nothrow); }

void delete_plain(void *p, std::size_t) { ::operator delete(p); }
void delete_sized(void *p, std::size_t n) { ::operator delete(p, n); }
void delete_nothrow(void *p, std::size_t) { ::operator delete(p, std::nothrow); }
void delete_array(void *p, std::size_t) { ::operator delete[](p); }
void delete_array_sized(void *p, std::size_t n) { ::operator delete[](p, n); }
void delete_array_nothrow(void *p, std::size_t) { ::operator delete[](p, std::nothrow); }
void delete_aligned(void *p, std::size_t) { ::operator delete(p, al); }
void delete_aligned_sized(void *p, std::size_t n) { ::operator delete(p, n, al); }
void delete_aligned_nothrow(void *p, std::size_t) { ::operator delete(p, al, std::nothrow); }
void delete_array_aligned(void *p, std::size_t) { ::operator delete[](p, al); }
void delete_array_aligned_sized(void *p, std::size_t n) { ::operator delete[](p, n, al); }
void delete_array_aligned_nothrow(void *p, std::size_t) { ::operator delete[](p, al, std::nothrow); }

struct Obj {
    char bytes[CF_EXPR_NEW_SIZE];
};
struct Elem {
    char bytes[CF_VECTOR_ELEM];
};

void *reserve = nullptr;
int handler_runs = 0;

void release_reserve()
{
    handler_runs++;
    std::free(reserve);
    reserve = nullptr;
    std::set_new_handler(nullptr); // the next failure throws
}

} // namespace

#define CF_ROW(size, n, d)                                                                         \
    {                                                                                              \
        void *p = n(size);                                                                         \
        use(p, size);                                                                              \
        if (reinterpret_cast<std::uintptr_t>(p) % (sizeof(void *)) != 0)                           \
            failures++;                                                                            \
        d(p, size);                                                                                \
    }

int main()
{
    CF_ROWS(CF_ROW)

    Obj *objs[CF_EXPR_COUNT];
    for (auto &o : objs) {
        o = new Obj;
        use(o, sizeof *o);
    }
    for (auto o : objs)
        delete o;
    {
        std::vector<Elem> v;
        for (int i = 0; i < 5; i++) {
            v.push_back(Elem());
            use(v.data(), sizeof(Elem));
        }
    }
    for (int i = 0; i < CF_MALLOC_COUNT; i++) {
        void *p = std::malloc(CF_MALLOC_SIZE);
        use(p, CF_MALLOC_SIZE);
        std::free(p);
    }
    void *c = std::calloc(CF_CALLOC_N, CF_CALLOC_SIZE);
    use(c, 1);
    std::free(c);
    void *r = std::malloc(CF_REALLOC_FIRST);
    use(r, 1);
    r = std::realloc(r, CF_REALLOC_GROW);
    use(r, 1);
    std::free(r);
    void *m = nullptr;
    if (posix_memalign(&m, 64, CF_MEMALIGN_SIZE) != 0)
        failures++;
    use(m, 1);
    std::free(m);
    void *a = aligned_alloc(CF_ALIGN, CF_ALIGNED_ALLOC_SIZE);
    use(a, 1);
    if (reinterpret_cast<std::uintptr_t>(a) % CF_ALIGN != 0)
        failures++;
    std::free(a);

    // Failures: exceptions must pass through whatever sits between the program and the allocator.
    volatile std::size_t huge = CF_HUGE;
    int caught = 0;
    try {
        void *p = ::operator new(huge);
        use(p, 1);
    } catch (const std::bad_alloc &) {
        caught++;
    }
    try {
        void *p = ::operator new[](huge, al);
        use(p, 1);
    } catch (const std::bad_alloc &) {
        caught++;
    }
    if (::operator new(huge, std::nothrow) != nullptr)
        failures++;
    if (::operator new[](huge, al, std::nothrow) != nullptr)
        failures++;
    reserve = std::malloc(CF_RESERVE_SIZE);
    use(reserve, 1);
    std::set_new_handler(release_reserve);
    try {
        void *p = ::operator new(huge);
        use(p, 1);
    } catch (const std::bad_alloc &) {
        caught++;
    }
    if (caught != 3 || handler_runs != 1)
        failures++;
    void *after = ::operator new(CF_AFTER_SIZE);
    use(after, CF_AFTER_SIZE);
    ::operator delete(after, CF_AFTER_SIZE);

    if (failures != 0) {
        std::printf("forms: %d failures\n", failures);
        return 1;
    }
    std::fputs(CF_STDOUT, stdout);
    return 0;
}
