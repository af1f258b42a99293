/*
 * Known CUDA allocations, for checking `gradprof run --cuda` (tests/gpu/run_gpu_checks.sh on a
 * GPU; tests/test_cupti.c runs it without one and expects exit status 3).
 *
 * On device 0:
 *   cudaMalloc       5 buffers of 1, 2, 3, 4, 5 MiB (15 MiB), made in alloc_sync_site, freed
 *   cudaMallocAsync  3 buffers of 7, 9, 11 MiB (27 MiB) on a stream, made in alloc_async_site,
 *                    freed with cudaFreeAsync
 *   cudaMallocHost   1 buffer of 1 MiB of pinned host memory, made in alloc_pinned_site, freed
 *   cudaMalloc       1 buffer of 6 MiB made in alloc_leaked_site and never freed (live at exit)
 * Prints the expected figures as one JSON line on stdout.
 * Exit status: 0 done; 3 no CUDA device or driver (nothing was allocated); 1 a CUDA call failed.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#define MiB (1024ull * 1024ull)
#define NOINLINE __attribute__((noinline))

static int check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    fprintf(stderr, "cuda_alloc_known: %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
}

NOINLINE static void *alloc_sync_site(size_t bytes)
{
    void *p = NULL;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
}

NOINLINE static void *alloc_async_site(size_t bytes, cudaStream_t s)
{
    void *p = NULL;
    check(cudaMallocAsync(&p, bytes, s), "cudaMallocAsync");
    return p;
}

NOINLINE static void *alloc_pinned_site(size_t bytes)
{
    void *p = NULL;
    check(cudaMallocHost(&p, bytes), "cudaMallocHost");
    return p;
}

NOINLINE static void *alloc_leaked_site(size_t bytes)
{
    return alloc_sync_site(bytes);
}

int main(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        fprintf(stderr, "cuda_alloc_known: no CUDA device: %s\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 3;
    }
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaFree(NULL), "cudaFree(NULL)"); /* creates the context; frees nothing */

    void *sync[5];
    for (int i = 0; i < 5; i++)
        sync[i] = alloc_sync_site((size_t)(i + 1) * MiB);
    for (int i = 0; i < 5; i++)
        check(cudaFree(sync[i]), "cudaFree");

    cudaStream_t s;
    check(cudaStreamCreate(&s), "cudaStreamCreate");
    void *async[3];
    const size_t async_mib[3] = {7, 9, 11};
    for (int i = 0; i < 3; i++)
        async[i] = alloc_async_site(async_mib[i] * MiB, s);
    for (int i = 0; i < 3; i++)
        check(cudaFreeAsync(async[i], s), "cudaFreeAsync");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    check(cudaStreamDestroy(s), "cudaStreamDestroy");

    void *pinned = alloc_pinned_site(1 * MiB);
    check(cudaFreeHost(pinned), "cudaFreeHost");

    void *leaked = alloc_leaked_site(6 * MiB);
    (void)leaked;
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

    printf("{\"cudaMalloc\": {\"count\": 6, \"bytes\": %llu}, "
           "\"cudaMallocAsync\": {\"count\": 3, \"bytes\": %llu}, "
           "\"cudaMallocHost\": {\"count\": 1, \"bytes\": %llu}, \"leaked_device_bytes\": %llu}\n",
           21 * MiB, 27 * MiB, 1 * MiB, 6 * MiB);
    return 0;
}
