/*
 * tensor_bench — one timing run of the tensor library on one model and one grad mode, for
 * bench/run.sh (section 3 and 4 of bench/RESULTS.md). bench/torch_bench.py is its PyTorch twin
 * (same shapes, same modules, same output format).
 *
 *   tensor_bench MODEL MODE [ITERS]
 *     MODEL  mlp  | 8 Linear(1024,1024)+ReLU (last without ReLU), input [64, 1024]
 *            cnn  | 2 x (Conv3x3 + BatchNorm2d + ReLU + MaxPool2) 3->32->64, Linear(64*8*8, 10),
 *                 | input [32, 3, 32, 32]
 *            transformer | TransformerEncoderLayer(D=256, H=4, F=1024, relu, post-norm), eval,
 *                 | input [8, 64, 256]
 *     MODE   grad | no_grad | inference_mode | train (train: one SGD step, MSE loss, grad on)
 *
 * After 3 warm-up iterations it runs ITERS (default 20) forwards (or training steps), keeping the
 * previous output alive until the next one is made (as an evaluation loop does), and prints one
 * line of key=value pairs:
 *   ms      median milliseconds per forward (or step)
 *   peak    libprof's peak_total over the timed loop minus the bytes live before it (parameters
 *           and input excluded): the memory the forward itself needs, including a graph when one
 *           is built
 *   hwm     VmHWM (peak resident set) growth over the first two forwards (the second made while
 *           the first output is still held), measured from right after setup, from
 *           /proc/self/status, in bytes — the same measure bench/torch_bench.py reports (VmHWM
 *           only grows, so it is taken before the warm-up)
 *   rss     VmHWM growth over the whole run (warm-up and timed loop), from right after setup:
 *           what the loop holds resident at its worst, including what the heap keeps or wastes
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gradprof/libprof.h"
#include "gradprof/tensor.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long long vm_hwm(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = atoll(line + 6);
    fclose(f);
    return kb * 1024;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what)
{
    fprintf(stderr, "tensor_bench: %s: %s\n", what, tn_last_error_message());
    exit(1);
}

static tn_module *must(tn_module *m)
{
    if (!m)
        die("module");
    return m;
}

enum { MLP, CNN, TRANSFORMER };

typedef struct model {
    int kind;
    tn_module *net;      /* mlp: Sequential; cnn: features; transformer: the layer */
    tn_module *head;     /* cnn: the classifier */
    tn_tensor *x;
    tn_tensor *target;   /* training target */
} model;

static void build(model *m, int kind)
{
    m->kind = kind;
    if (kind == MLP) {
        m->net = must(tn_sequential_new());
        for (int i = 0; i < 8; i++) {
            tn_sequential_append(m->net, must(tn_linear_new(1024, 1024, true)));
            if (i < 7)
                tn_sequential_append(m->net, must(tn_relu_new()));
        }
        m->x = tn_randn(2, (const int64_t[]){64, 1024}, LP_CAT_INPUT);
        m->target = tn_randn(2, (const int64_t[]){64, 1024}, LP_CAT_INPUT);
    } else if (kind == CNN) {
        m->net = must(tn_sequential_new());
        int64_t in = 3;
        for (int b = 0; b < 2; b++) {
            int64_t out = b == 0 ? 32 : 64;
            tn_sequential_append(m->net, must(tn_conv2d_new(in, out, 3, 1, 1, true)));
            tn_sequential_append(m->net, must(tn_batch_norm2d_new(out)));
            tn_sequential_append(m->net, must(tn_relu_new()));
            in = out;
        }
        m->head = must(tn_linear_new(64 * 8 * 8, 10, true));
        m->x = tn_randn(4, (const int64_t[]){32, 3, 32, 32}, LP_CAT_INPUT);
        m->target = tn_randn(2, (const int64_t[]){32, 10}, LP_CAT_INPUT);
    } else {
        m->net = must(tn_transformer_encoder_layer_new(256, 4, 1024, 0.1f, false));
        m->x = tn_randn(3, (const int64_t[]){8, 64, 256}, LP_CAT_INPUT);
        m->target = tn_randn(3, (const int64_t[]){8, 64, 256}, LP_CAT_INPUT);
    }
    if (!m->x || !m->target)
        die("input");
}

/* CNN forward: the pools run between the conv blocks (the Sequential holds conv, bn, relu x 2). */
static tn_tensor *cnn_forward(model *m)
{
    tn_tensor *h = tn_retain(m->x);
    for (int b = 0; b < 2; b++) {
        tn_tensor *t = h;
        for (int j = 0; j < 3; j++) {
            tn_tensor *u = tn_module_forward(tn_module_child(m->net, b * 3 + j), t);
            tn_release(t);
            if (!u)
                return NULL;
            t = u;
        }
        h = tn_max_pool2d(t, 2, 2, 0);
        tn_release(t);
        if (!h)
            return NULL;
    }
    tn_tensor *flat = tn_reshape(h, 2, (const int64_t[]){tn_size(h, 0), 64 * 8 * 8});
    tn_release(h);
    if (!flat)
        return NULL;
    tn_tensor *y = tn_module_forward(m->head, flat);
    tn_release(flat);
    return y;
}

static tn_tensor *forward(model *m)
{
    return m->kind == CNN ? cnn_forward(m) : tn_module_forward(m->net, m->x);
}

static void set_train(model *m, bool on)
{
    tn_module_train(m->net, on);
    if (m->head)
        tn_module_train(m->head, on);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: tensor_bench mlp|cnn|transformer grad|no_grad|inference_mode|train "
                        "[iters]\n");
        return 2;
    }
    int kind = !strcmp(argv[1], "mlp") ? MLP : !strcmp(argv[1], "cnn") ? CNN
               : !strcmp(argv[1], "transformer") ? TRANSFORMER : -1;
    const char *mode = argv[2];
    int iters = argc > 3 ? atoi(argv[3]) : 20;
    bool train = !strcmp(mode, "train");
    if (kind < 0 || iters < 1 ||
        !(train || !strcmp(mode, "grad") || !strcmp(mode, "no_grad") ||
          !strcmp(mode, "inference_mode"))) {
        fprintf(stderr, "tensor_bench: bad model or mode\n");
        return 2;
    }
    tn_manual_seed(0);
    model m = {0};
    build(&m, kind);
    set_train(&m, false);
    tn_optimizer *opt = NULL, *opt_head = NULL; /* SGD over every parameter, as torch_bench's */
    if (train) {
        opt = tn_sgd_new(m.net, 0.01f, 0.0f, 0.0f);
        if (!opt || (m.head && !(opt_head = tn_sgd_new(m.head, 0.01f, 0.0f, 0.0f))))
            die("optimizer");
    }

    double *times = calloc((size_t)iters, sizeof *times);
    tn_tensor *y = NULL;
    lp_counters before = {0}, after = {0};
    long long hwm0 = vm_hwm(), hwm = 0;
    for (int it = -3; it < iters; it++) {
        if (it == -1) /* VmHWM only grows: measured over the first two forwards, before warm-up */
            hwm = vm_hwm() - hwm0;
        if (it == 0) {
            tn_release(y); /* the timed loop starts from the same live set on both sides */
            y = NULL;
            lp_counters_reset_peak();
            lp_counters_get(LP_DEVICE_HOST, &before);
        }
        double t0 = now_ms();
        if (train) {
            tn_optimizer_zero_grad(opt);
            tn_optimizer_zero_grad(opt_head);
            tn_tensor *out = forward(&m);
            tn_tensor *loss = out ? tn_mse_loss(out, m.target) : NULL;
            if (!loss || tn_backward(loss, NULL, false) != 0 || tn_optimizer_step(opt) != 0 ||
                (opt_head && tn_optimizer_step(opt_head) != 0))
                die("train step");
            tn_release(out);
            tn_release(loss);
        } else {
            tn_release(y); /* the previous output (and any graph it holds) goes now */
            tn_grad_mode prev = !strcmp(mode, "no_grad")          ? tn_no_grad_begin()
                                : !strcmp(mode, "inference_mode") ? tn_inference_mode_begin(true)
                                                                  : tn_enable_grad_begin();
            y = forward(&m);
            tn_grad_mode_end(prev);
            if (!y)
                die("forward");
        }
        if (it >= 0)
            times[it] = now_ms() - t0;
    }
    lp_counters_get(LP_DEVICE_HOST, &after);
    long long rss = vm_hwm() - hwm0;
    qsort(times, (size_t)iters, sizeof *times, cmp_double);
    printf("ms=%.4f peak=%lld hwm=%lld rss=%lld params=%zu\n", times[iters / 2],
           (long long)(after.peak_total - before.live_total), hwm, rss,
           tn_module_param_bytes(m.net) + (m.head ? tn_module_param_bytes(m.head) : 0));
    tn_release(y);
    tn_optimizer_free(opt);
    tn_optimizer_free(opt_head);
    tn_release(m.x);
    tn_release(m.target);
    tn_module_free(m.net);
    tn_module_free(m.head);
    free(times);
    return 0;
}
