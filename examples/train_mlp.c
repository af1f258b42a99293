/*
 * train_mlp — a few optimizer steps on a synthetic task, to show the memory that training owns and
 * inference never should: a GRADIENT buffer per parameter (.grad) and the optimizer's state
 * (SGD's momentum buffer: 1x the parameters; Adam's two moments: 2x).
 *
 * The data: B random inputs x [B, 16] and a fixed random "teacher" W [4, 16]; the regression task
 * fits tanh(x W^T) [B, 4] with the mean squared error, the classification task predicts
 * argmax(x W^T) among 4 classes with cross-entropy. The model, an MLP 16 -> width -> ... -> 4, is
 * trained full-batch, so the loss printed per step goes down.
 */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

#define IN_FEATURES 16
#define OUTPUTS 4

static const char usage[] =
    "usage: train_mlp [--optimizer sgd|adam] [--steps N] [--lr LR] [--momentum M]\n"
    "                 [--task regression|classification] [--layers L] [--width W] [--batch B]\n"
    "\n"
    "Trains an L-layer Linear+ReLU MLP (16 inputs, 4 outputs) on a synthetic task for N\n"
    "full-batch steps, printing the loss per step; then prints live/peak bytes per memory\n"
    "category after the last step, while the gradients are still held: 'gradient' equals the\n"
    "parameters' bytes and 'optimizer_state' 1x (SGD with momentum) or 2x (Adam) of them.\n"
    "\n"
    "  --optimizer NAME   sgd (default) or adam\n"
    "  --steps N          optimizer steps (default 10)\n"
    "  --lr LR            learning rate (default 0.05 for sgd, 0.01 for adam)\n"
    "  --momentum M       SGD momentum, 0 for none (default 0.9)\n"
    "  --task NAME        regression (default: MSE on tanh(x W^T)) or classification\n"
    "                     (cross-entropy on argmax(x W^T))\n"
    "  --layers L         Linear layers (default 3)\n"
    "  --width W          hidden width (default 64)\n"
    "  --batch B          training examples, all used in every step (default 64)\n";

enum { OPT_SGD, OPT_ADAM };
enum { TASK_REGRESSION, TASK_CLASSIFICATION };

typedef struct data {
    tn_tensor *x;      /* [B, in] */
    tn_tensor *target; /* regression: [B, 4] */
    int64_t *labels;   /* classification: [B] in [0, 4) */
} data;

/* Makes the inputs and the teacher's answers (no graph: the teacher is fixed data). */
static int data_init(data *d, int task, long batch)
{
    *d = (data){0};
    d->x = tn_randn(2, (const int64_t[]){batch, IN_FEATURES}, LP_CAT_INPUT);
    tn_tensor *w = tn_randn(2, (const int64_t[]){OUTPUTS, IN_FEATURES}, LP_CAT_INPUT);
    tn_grad_mode prev = tn_no_grad_begin();
    tn_tensor *scores = d->x && w ? tn_linear(d->x, w, NULL) : NULL; /* [B, 4] */
    tn_grad_mode_end(prev);
    tn_release(w);
    if (!scores)
        return -1;
    if (task == TASK_REGRESSION) {
        prev = tn_no_grad_begin();
        d->target = tn_tanh(scores);
        tn_grad_mode_end(prev);
    } else if ((d->labels = malloc((size_t)batch * sizeof *d->labels))) {
        const float *s = tn_data_const(scores); /* contiguous [B, 4] */
        for (long i = 0; i < batch; i++) {
            int best = 0;
            for (int c = 1; c < OUTPUTS; c++)
                if (s[i * OUTPUTS + c] > s[i * OUTPUTS + best])
                    best = c;
            d->labels[i] = best;
        }
    }
    tn_release(scores);
    return d->target || d->labels ? 0 : -1;
}

static void data_free(data *d)
{
    tn_release(d->x);
    tn_release(d->target);
    free(d->labels);
}

int main(int argc, char **argv)
{
    static const char *const optimizers[] = {"sgd", "adam", NULL};
    static const char *const tasks[] = {"regression", "classification", NULL};
    int optimizer = OPT_SGD, task = TASK_REGRESSION;
    long steps = 10, layers = 3, width = 64, batch = 64;
    double lr = -1, momentum = 0.9;
    const ex_opt opts[] = {
        {"--optimizer", EX_OPT_CHOICE, &optimizer, .choices = optimizers},
        {"--task", EX_OPT_CHOICE, &task, .choices = tasks},
        {"--steps", EX_OPT_COUNT, &steps, .min = 1, .max = 1000000},
        {"--lr", EX_OPT_REAL, &lr, .fmin = 0, .fmax = 100},
        {"--momentum", EX_OPT_REAL, &momentum, .fmin = 0, .fmax = 1},
        {"--layers", EX_OPT_COUNT, &layers, .min = 1, .max = 1000},
        {"--width", EX_OPT_COUNT, &width, .min = 1, .max = 65536},
        {"--batch", EX_OPT_COUNT, &batch, .min = 1, .max = 65536},
    };
    int rc = ex_parse_options("train_mlp", usage, argc, argv, opts, sizeof opts / sizeof *opts);
    if (rc)
        return ex_exit_code(rc);
    if (lr < 0)
        lr = optimizer == OPT_SGD ? 0.05 : 0.01;

    tn_manual_seed(0);
    data d;
    int failed = data_init(&d, task, batch);
    tn_module *net = failed ? NULL : ex_mlp_new(IN_FEATURES, width, OUTPUTS, layers, "mlp");
    tn_optimizer *opt = NULL;
    if (net) {
        tn_module_train(net, true);
        opt = optimizer == OPT_SGD ? tn_sgd_new(net, (float)lr, (float)momentum, 0.0f)
                                   : tn_adam_new(net, (float)lr, 0.9f, 0.999f, 1e-8f);
    }
    if (!opt) {
        fprintf(stderr, "train_mlp: setup failed: %s\n", tn_last_error_message());
        tn_module_free(net);
        data_free(&d);
        return 1;
    }

    printf("train_mlp: %s, %s, %ld layers, width %ld, batch %ld, lr %g\n", optimizers[optimizer],
           tasks[task], layers, width, batch, lr);
    lp_counters_reset_peak();
    lp_counters c = {0};
    int status = 0;
    for (long step = 0; step < steps && status == 0; step++) {
        char mark[32];
        snprintf(mark, sizeof mark, "step %ld", step);
        lp_mark(mark);
        tn_optimizer_zero_grad(opt); /* frees last step's .grad (set_to_none) */
        tn_tensor *y = tn_module_forward(net, d.x);
        tn_tensor *loss = !y                        ? NULL
                          : task == TASK_REGRESSION ? tn_mse_loss(y, d.target)
                                                    : tn_cross_entropy(y, d.labels);
        if (!loss || tn_backward(loss, NULL, false) || tn_optimizer_step(opt)) {
            fprintf(stderr, "train_mlp: step %ld failed: %s\n", step, tn_last_error_message());
            status = 1;
        } else {
            printf("step %3ld  loss %.6f\n", step, (double)tn_item(loss));
        }
        tn_release(loss);
        tn_release(y);
        if (step + 1 == steps)
            lp_counters_get(LP_DEVICE_HOST, &c); /* .grad and optimizer state still held */
    }

    if (status == 0) {
        long long params = (long long)tn_module_param_bytes(net);
        printf("parameters %lld bytes; gradient %lld (%.1fx); optimizer state %lld (%.1fx)\n",
               params, (long long)c.live[LP_CAT_GRADIENT],
               (double)c.live[LP_CAT_GRADIENT] / (double)params,
               (long long)c.live[LP_CAT_OPTIMIZER_STATE],
               (double)c.live[LP_CAT_OPTIMIZER_STATE] / (double)params);
        ex_print_counters(&c);
    }
    tn_optimizer_free(opt);
    tn_module_free(net);
    data_free(&d);
    return status;
}
