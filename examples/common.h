/*
 * Helpers shared by the example programs: option parsing, grad-mode scopes, timing, small models,
 * and the memory tables printed from libprof's counters. Prefix ex_; not a library, just the one
 * place where what every example does is written once.
 */
#ifndef GRADPROF_EXAMPLES_COMMON_H
#define GRADPROF_EXAMPLES_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gradprof/tensor.h"

/* ---- options -------------------------------------------------------------------------------- */

typedef enum ex_opt_kind {
    EX_OPT_FLAG,   /* no value: *(bool *)target = true */
    EX_OPT_SET,    /* no value: *(int *)target = value (several flags choosing one setting) */
    EX_OPT_COUNT,  /* an integer in [min, max] into *(long *)target */
    EX_OPT_REAL,   /* a finite number in [fmin, fmax] into *(double *)target */
    EX_OPT_CHOICE, /* one of choices (NULL-terminated): its index into *(int *)target */
} ex_opt_kind;

typedef struct ex_opt {
    const char *name; /* "--batch" */
    ex_opt_kind kind;
    void *target;
    int value;                  /* EX_OPT_SET */
    long min, max;              /* EX_OPT_COUNT */
    double fmin, fmax;          /* EX_OPT_REAL */
    const char *const *choices; /* EX_OPT_CHOICE */
} ex_opt;

/* Parses argv against opts[n]: "--name value" or "--name=value"; --help / -h prints `usage` to
 * stdout. Each option may be given again (the last one wins). A bad value, a missing value or an
 * unknown option prints one line on stderr naming the option and the value, prefixed by `prog`.
 * Returns 0 to run, 1 after --help, 2 on a usage error; main returns ex_exit_code(rc). */
int ex_parse_options(const char *prog, const char *usage, int argc, char **argv, const ex_opt *opts,
                     size_t n);
/* The exit status for a non-zero ex_parse_options result: 0 after --help, 2 for a usage error. */
static inline int ex_exit_code(int parse_rc)
{
    return parse_rc == 1 ? 0 : 2;
}

/* ---- grad modes ----------------------------------------------------------------------------- */

/* The grad mode an example runs under, chosen by --grad, --no-grad or --inference-mode. */
typedef enum ex_mode { EX_MODE_GRAD, EX_MODE_NO_GRAD, EX_MODE_INFERENCE } ex_mode;

/* The three option-table entries that set an int `mode` (an ex_mode) from those flags. */
// clang-format off
#define EX_MODE_OPTS(mode_ptr)                                                                     \
    {"--grad", EX_OPT_SET, (mode_ptr), .value = EX_MODE_GRAD},                                     \
    {"--no-grad", EX_OPT_SET, (mode_ptr), .value = EX_MODE_NO_GRAD},                               \
    {"--inference-mode", EX_OPT_SET, (mode_ptr), .value = EX_MODE_INFERENCE}
// clang-format on

/* "grad", "no_grad", "inference_mode". */
const char *ex_mode_name(int mode);
/* Enters `mode` (EX_MODE_GRAD changes nothing) and returns what ex_mode_end needs to restore. */
tn_grad_mode ex_mode_begin(int mode);
void ex_mode_end(int mode, tn_grad_mode previous);

/* ---- timing and randomness ------------------------------------------------------------------ */

/* Milliseconds on the monotonic clock. */
double ex_now_ms(void);
/* The median of v[n] (n >= 1); sorts v in place. */
double ex_median(double *v, size_t n);

/* Fills ids[n] with integers in [0, bound) from a splitmix64 stream; *state is the stream's state
 * (seed it once, deterministic for a given seed). */
void ex_random_ids(int64_t *ids, size_t n, int64_t bound, uint64_t *state);

/* ---- models --------------------------------------------------------------------------------- */

/* A Sequential of `layers` Linear layers in -> hidden -> ... -> hidden -> out with a ReLU between
 * consecutive ones (none after the last), named `name` (children "name.0", "name.1", ...), in eval
 * mode. layers >= 1; with one layer it is Linear(in, out). NULL with tn_last_error_message(). */
tn_module *ex_mlp_new(int64_t in, int64_t hidden, int64_t out, long layers, const char *name);

/* A small image classifier: `blocks` blocks of Conv2d(3x3, padding 1) + BatchNorm2d + ReLU +
 * MaxPool(2) doubling the channels from `width` (3 input channels), then Linear to `classes` on
 * the flattened features. Input [B, 3, size, size] with size divisible by 2^blocks. The tensor
 * library has no pooling module, so the pool (and the flatten) run between modules, and their
 * buffers carry no module path. */
typedef struct ex_cnn {
    tn_module *features;   /* Sequential "features": [B,3,S,S] -> [B, C, S/2^n, S/2^n] */
    tn_module *classifier; /* Linear "classifier": [B, C * (S/2^n)^2] -> [B, classes] */
} ex_cnn;

/* Builds the CNN in eval mode; 0, or a negative TN_E* with tn_last_error_message(). */
int ex_cnn_init(ex_cnn *net, long blocks, int64_t width, int64_t size, int64_t classes);
/* features, flatten, classifier: x [B, 3, S, S] -> logits [B, classes] (a new reference). */
tn_tensor *ex_cnn_forward(ex_cnn *net, tn_tensor *x);
void ex_cnn_free(ex_cnn *net);

/* ---- the inference loop of mlp_infer, cnn_infer, transformer_infer -------------------------- */

/* One forward of the model on its input: a new reference, or NULL with tn_last_error_message(). */
typedef tn_tensor *(*ex_forward_fn)(void *ctx);

typedef struct ex_infer_result {
    double median_ms;     /* median time of one forward */
    lp_counters counters; /* live: after the last forward, while its output is still held;
                             peak: over the loop (reset before it) */
} ex_infer_result;

/* Resets the peaks, then inside one lp_region "inference" runs `iters` forwards under `mode`. Each
 * iteration starts with lp_mark("iter <i>") and the release of the previous output (with the graph
 * it holds), so at most one output is alive at a time. After the loop, with the last output still
 * held, it reads the counters, pops the region and releases the output. Returns 0, or 1 after
 * printing "<prog>: forward failed: <reason>". */
int ex_infer_run(const char *prog, int mode, long iters, ex_forward_fn forward, void *ctx,
                 ex_infer_result *out);

/* ---- tables --------------------------------------------------------------------------------- */

/* Prints, per category and for the total, c's live bytes and peak bytes:
 *     category             live_bytes     peak_bytes */
void ex_print_counters(const lp_counters *c);

/* ---- the leak programs ---------------------------------------------------------------------- */

/* Options every leak program takes (each adds its own --fixed description to the usage text). */
typedef struct ex_leak_options {
    bool fixed; /* --fixed: the one-line fix */
    int mode;   /* --grad (default) | --no-grad | --inference-mode, around the whole loop */
    long iters; /* --iters N (default 20) */
    long batch; /* --batch B (default 32) */
} ex_leak_options;

#define EX_LEAK_USAGE_OPTIONS                                                                      \
    "  --grad             run the loop with grad enabled (the default: the buggy script)\n"        \
    "  --no-grad          run the whole loop under no_grad (nothing has history: no leak)\n"       \
    "  --inference-mode   run the whole loop under inference_mode (likewise)\n"                    \
    "  --iters N          batches to evaluate (default 20)\n"                                      \
    "  --batch B          examples per batch (default 32)\n"

/* Parses the options above plus --fixed, as ex_parse_options (0 run, 1 --help, 2 usage error). */
int ex_leak_parse(const char *prog, const char *usage, int argc, char **argv, ex_leak_options *o);

/* The model of the leak programs: ex_mlp_new(EX_LEAK_IN, EX_LEAK_HIDDEN, EX_LEAK_CLASSES, 3,
 * "mlp"), so one graph holds two ReLU outputs of [B, 256] floats (2 KiB per example) saved. */
#define EX_LEAK_IN 64
#define EX_LEAK_HIDDEN 256
#define EX_LEAK_CLASSES 10

/* A random batch x [B, EX_LEAK_IN] tagged INPUT (a new reference, NULL on error) and, unless
 * labels is NULL, random labels[B] in [0, EX_LEAK_CLASSES) from *rng. */
tn_tensor *ex_leak_batch(long batch, int64_t *labels, uint64_t *rng);

/* The index of the largest of row i of a contiguous [B, C] tensor (the predicted class). */
int64_t ex_argmax_row(const tn_tensor *logits, int64_t i);

/* Live bytes sampled where the leak programs mark their iterations, to show growth without
 * gradprof: at the marks of iterations 0, 1 and the last, and after the loop. Growth is measured
 * from iteration 1 on: by then the first iteration has made whatever the loop keeps in steady
 * state (the previous output, a cache), so what grows after it grows with every iteration. */
typedef struct ex_growth {
    lp_counters first, second, last, end;
    long iters;              /* marks made */
    double first_ms, end_ms; /* clock at the first mark and after the loop */
} ex_growth;

/* Marks the start of iteration i with lp_mark("iter <i>") -- what gradprof compares across
 * iterations -- and samples the counters there. Call it first in every iteration, i = 0, 1, ... */
void ex_growth_mark(ex_growth *g, long i);
/* Samples the counters after the loop (while what the loop kept is still held). */
void ex_growth_end(ex_growth *g);
/* Prints the mean time per iteration; then per category: live at the marks of iterations 0, 1
 * and the last, after the loop, the growth from iteration 1 to after the loop (from iteration 0
 * if there was only one) and that growth per iteration, and the peak since the last
 * lp_counters_reset_peak(); then one line with the total growth and one with the graph memory
 * (saved + autograd) still live after the loop. */
void ex_growth_print(const ex_growth *g);

#endif /* GRADPROF_EXAMPLES_COMMON_H */
