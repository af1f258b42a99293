/*
 * Writes the deterministic fixture traces the CLI tests and golden files use:
 *   mlp_grad.gptrace        a 5-module MLP run 4 times inside "inference" with grad left on
 *   mlp_nograd.gptrace      the same under no_grad
 *   leak_accumulate.gptrace every iteration's graph kept alive (total += loss)
 *   leak_window.gptrace     the two iterations' graphs before each kept alive (a window)
 *   raw.gptrace             untagged mallocs from two threads: sites, temporaries, leaks, a device
 *   damaged.gptrace         mlp_grad.gptrace cut inside its last chunk
 *   detectors.gptrace       one positive and one negative case for the per-buffer detectors:
 *                           a graph node made inside no_grad (and one inside enable_grad within
 *                           it), a gradient made inside "inference" (and one inside "backward"
 *                           within it)
 *   make_traces OUTDIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trace_builder.h"

enum { EXE = 1, LIBTENSOR = 2, LIBC = 3 };
enum { B = 32, W = 256, OUT = 10 };
#define ACT ((uint64_t)B * W * 4)
#define NODE 512ull

static void modules(tb *b)
{
    tb_module(b, EXE, 0x400000, 0x100000, "/opt/gradprof-test/bin/infer", "");
    tb_module(b, LIBTENSOR, 0x7f0000000000, 0x200000, "/opt/gradprof-test/lib/libtensor.so", "");
    tb_module(b, LIBC, 0x7f1000000000, 0x200000, "/opt/gradprof-test/lib/libc.so.6", "");
}

/* The stack of a tensor op's buffer: malloc <- tn__alloc <- op <- main. */
static uint32_t op_stack(tb *b, uint64_t op_offset)
{
    const uint32_t m[4] = {LIBC, LIBTENSOR, LIBTENSOR, EXE};
    const uint64_t o[4] = {0x1100, 0x2200, op_offset, 0x1440};
    return tb_stack(b, 4, m, o);
}

/* A buffer the tensor library made: the raw allocation then its tag (as under the preload). */
static void buffer(tb *b, uint64_t addr, uint64_t size, lp_category cat, const char *op,
                   const char *module, const char *detail, bool grad, uint64_t op_offset)
{
    tb_alloc(b, addr, size, op_stack(b, op_offset));
    tb_tag(b, addr, size, cat, op, module, detail, grad, 0);
}

static uint64_t clock_ns;
static void tick(tb *b, uint64_t ns)
{
    clock_ns += ns;
    tb_at(b, clock_ns);
}

static const char *const linear_modules[3] = {"mlp.0", "mlp.2", "mlp.4"};
static const char *const relu_modules[2] = {"mlp.1", "mlp.3"};

static void parameters(tb *b)
{
    for (int l = 0; l < 3; l++) {
        uint64_t out = l == 2 ? OUT : W;
        buffer(b, 0x10000000 + (uint64_t)l * 0x100000, out * W * 4, LP_CAT_PARAMETER, "parameter",
               linear_modules[l], l == 2 ? "[10,256]" : "[256,256]", true, 0x3000);
        tick(b, 1000);
        buffer(b, 0x10080000 + (uint64_t)l * 0x100000, out * 4, LP_CAT_PARAMETER, "parameter",
               linear_modules[l], l == 2 ? "[10]" : "[256]", true, 0x3000);
        tick(b, 1000);
    }
    buffer(b, 0x20000000, ACT, LP_CAT_INPUT, "input", "", "[32,256]", true, 0x3100);
    tick(b, 1000);
}

/* One forward. With grad: a graph node per op and the ReLU outputs retagged SAVED. Returns with
 * the output (and, with grad, its graph) live; `base` spaces out the iteration's addresses. */
static void forward(tb *b, bool grad, uint64_t base)
{
    uint64_t a_prev = 0x20000000;
    for (int l = 0; l < 3; l++) {
        uint64_t h = base + (uint64_t)l * 0x40000, size = l == 2 ? (uint64_t)B * OUT * 4 : ACT;
        tb_region_push(b, linear_modules[l]);
        buffer(b, h, size, LP_CAT_ACTIVATION, "linear", linear_modules[l],
               l == 2 ? "[32,10]" : "[32,256]", grad, 0x4000);
        tick(b, 20000);
        if (grad)
            buffer(b, h + 0x30000, NODE, LP_CAT_AUTOGRAD, "linear", linear_modules[l], NULL, true,
                   0x4800);
        tick(b, 1000);
        if (l > 0 && !grad) /* no graph keeps the previous ReLU output */
            tb_free(b, a_prev);
        tb_region_pop(b);
        if (l == 2)
            break;
        tb_region_push(b, relu_modules[l]);
        uint64_t a = h + 0x10000;
        buffer(b, a, ACT, LP_CAT_ACTIVATION, "relu", relu_modules[l], "[32,256]", grad, 0x5000);
        tick(b, 5000);
        if (grad) {
            buffer(b, a + 0x28000, NODE, LP_CAT_AUTOGRAD, "relu", relu_modules[l], NULL, true,
                   0x5800);
            tb_tag(b, a, ACT, LP_CAT_SAVED, "relu", relu_modules[l], "[32,256]", true, 0);
        }
        tb_free(b, h); /* the linear output: relu saved its own output, not its input */
        tick(b, 1000);
        tb_region_pop(b);
        a_prev = a;
    }
}

/* Releases an iteration's output and, with grad, its graph (SAVED back to ACTIVATION first). */
static void release(tb *b, bool grad, uint64_t base)
{
    tb_free(b, base + 2 * 0x40000);
    if (!grad) {
        tick(b, 1000);
        return;
    }
    for (int l = 0; l < 3; l++)
        tb_free(b, base + (uint64_t)l * 0x40000 + 0x30000);
    for (int l = 0; l < 2; l++) {
        uint64_t a = base + (uint64_t)l * 0x40000 + 0x10000;
        tb_free(b, a + 0x28000);
        tb_tag(b, a, ACT, LP_CAT_ACTIVATION, "relu", relu_modules[l], "[32,256]", false, 0);
        tb_free(b, a);
    }
    tick(b, 1000);
}

/* The MLP run `iters` times; at the end of each iteration the outputs of the `window` before it
 * are alive with their graphs (0: each released at the end of its iteration; iters: all kept). */
static void mlp(const char *path, bool grad, int window, int iters)
{
    tb *b = tb_open(path, !grad             ? "infer --no-grad"
                          : window >= iters ? "infer --accumulate"
                          : window > 0      ? "infer --window"
                                            : "infer --grad");
    modules(b);
    clock_ns = 0;
    tb_thread(b, 1, "main");
    parameters(b);
    for (int it = 0; it < iters; it++) {
        char mark[16];
        snprintf(mark, sizeof mark, "iter %d", it);
        tb_mark(b, mark);
        tb_region_push(b, "inference");
        if (!grad) {
            tb_region_push(b, "no_grad");
            tb_grad_mode(b, false, false);
        }
        uint64_t base = 0x30000000 + (uint64_t)it * 0x1000000;
        forward(b, grad, base);
        if (!grad) {
            tb_grad_mode(b, true, false);
            tb_region_pop(b);
        }
        tb_region_pop(b);
        tick(b, 100000);
        if (it >= window)
            release(b, grad, 0x30000000 + (uint64_t)(it - window) * 0x1000000);
        tick(b, 1000000);
    }
    tb_end(b);
    tb_close(b);
}

static void raw(const char *path)
{
    tb *b = tb_open(path, "raw_program");
    modules(b);
    clock_ns = 0;
    const uint32_t m3[3] = {LIBC, EXE, EXE};
    const uint64_t hot[3] = {0x1100, 0x1800, 0x1440}, cold[3] = {0x1100, 0x1900, 0x1440};
    const uint64_t leaky[3] = {0x1100, 0x1a00, 0x1440};
    tb_thread(b, 1, "main");
    uint32_t s_hot = tb_stack(b, 3, m3, hot), s_leak = tb_stack(b, 3, m3, leaky);
    for (int i = 0; i < 100; i++) { /* temporaries: freed before the next allocation */
        tb_alloc(b, 0x50000000, 64, s_hot);
        tick(b, 100);
        tb_free(b, 0x50000000);
        tick(b, 100);
    }
    tb_alloc(b, 0x51000000, 4096, s_leak); /* never freed */
    tb_alloc(b, 0x51100000, 1000, s_leak);
    tick(b, 1000);
    tb_free(b, 0x5f000000); /* allocated before recording started */
    tb_alloc_dev(b, 0x700000000, 1 << 20, s_hot, 0); /* cuda:0 */
    tick(b, 1000);
    tb_thread(b, 2, "worker");
    uint32_t s_cold = tb_stack(b, 3, m3, cold);
    for (int i = 0; i < 10; i++) {
        tb_alloc(b, 0x52000000 + (uint64_t)i * 0x1000, 2048, s_cold);
        tick(b, 1000);
    }
    for (int i = 0; i < 10; i++) {
        tb_free(b, 0x52000000 + (uint64_t)i * 0x1000);
        tick(b, 1000);
    }
    tb_thread(b, 1, "main");
    tb_free_dev(b, 0x700000000, 0);
    tick(b, 1000);
    tb_end(b);
    tb_close(b);
}

static void detectors(const char *path)
{
    tb *b = tb_open(path, "detectors");
    modules(b);
    clock_ns = 0;
    tb_thread(b, 1, "main");
    tb_region_push(b, "no_grad");
    tb_grad_mode(b, false, false);
    buffer(b, 0x60000000, NODE, LP_CAT_AUTOGRAD, "custom_op", "block.0", NULL, false, 0x6000);
    tick(b, 1000);
    tb_region_push(b, "enable_grad"); /* deliberately enabled: not a finding */
    tb_grad_mode(b, true, false);
    buffer(b, 0x60001000, NODE, LP_CAT_AUTOGRAD, "other_op", "block.1", NULL, true, 0x6100);
    tick(b, 1000);
    tb_grad_mode(b, false, false);
    tb_region_pop(b);
    tb_grad_mode(b, true, false);
    tb_region_pop(b);
    tb_free(b, 0x60000000);
    tb_free(b, 0x60001000);
    tick(b, 1000);
    tb_region_push(b, "inference");
    buffer(b, 0x61000000, 4096, LP_CAT_GRADIENT, "accumulate_grad", "head", "[32,32]", false,
           0x6200);
    tick(b, 1000);
    tb_region_push(b, "backward"); /* a backward run on purpose: its gradients are expected */
    buffer(b, 0x61010000, 8192, LP_CAT_GRADIENT, "linear_backward", "head", "[64,32]", false,
           0x6300);
    tick(b, 1000);
    tb_region_pop(b);
    tb_free(b, 0x61010000);
    tb_free(b, 0x61000000);
    tb_region_pop(b);
    tick(b, 1000);
    tb_end(b);
    tb_close(b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_traces OUTDIR\n");
        return 2;
    }
    mkdir(argv[1], 0755);
    char path[4096], damaged[4096];
    snprintf(path, sizeof path, "%s/mlp_grad.gptrace", argv[1]);
    mlp(path, true, 0, 4);
    snprintf(damaged, sizeof damaged, "%s/damaged.gptrace", argv[1]);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, damaged);
    if (system(cmd) != 0)
        return 1;
    struct stat st;
    if (stat(damaged, &st) != 0 || truncate(damaged, st.st_size - 40) != 0)
        return 1;
    snprintf(path, sizeof path, "%s/mlp_nograd.gptrace", argv[1]);
    mlp(path, false, 0, 4);
    snprintf(path, sizeof path, "%s/leak_accumulate.gptrace", argv[1]);
    mlp(path, true, 6, 6);
    snprintf(path, sizeof path, "%s/leak_window.gptrace", argv[1]);
    mlp(path, true, 2, 6);
    snprintf(path, sizeof path, "%s/raw.gptrace", argv[1]);
    raw(path);
    snprintf(path, sizeof path, "%s/detectors.gptrace", argv[1]);
    detectors(path);
    return 0;
}
