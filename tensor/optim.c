/*
 * Optimizers: SGD (momentum, weight decay) and Adam, with torch.optim's update rules. State
 * tensors are created on the first step that needs them and tagged OPTIMIZER_STATE.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "module_internal.h"

typedef enum opt_kind { OPT_SGD, OPT_ADAM } opt_kind;

/* One parameter and its state. */
typedef struct opt_slot {
    tn_tensor *param;  /* borrowed from the module */
    tn_tensor *state0; /* SGD momentum buffer / Adam exp_avg (owned, NULL until needed) */
    tn_tensor *state1; /* Adam exp_avg_sq (owned) */
    int64_t step;      /* Adam: updates made to this parameter */
} opt_slot;

struct tn_optimizer {
    opt_kind kind;
    float lr, momentum, weight_decay; /* SGD */
    float beta1, beta2, eps;          /* Adam */
    int n;
    opt_slot *slots;
};

/* An optimizer over m's trainable parameters (buffers excluded), in named_parameters order. */
static tn_optimizer *optimizer_new(const char *op, tn_module *m, opt_kind kind)
{
    if (!m)
        return TN__FAIL_NULL(TN_EINVAL, "%s: module is NULL", op);
    tn_optimizer *opt = calloc(1, sizeof(*opt));
    int total = tn_module_param_count(m);
    opt_slot *slots = calloc((size_t)(total ? total : 1), sizeof(*slots));
    if (!opt || !slots) {
        free(opt);
        free(slots);
        return TN__FAIL_NULL(TN_ENOMEM, "%s: out of memory", op);
    }
    opt->kind = kind;
    opt->slots = slots;
    for (int i = 0; i < total; i++) {
        tn__module_param *e = tn__module_param_entry(m, i);
        if (!e->buffer)
            opt->slots[opt->n++].param = e->tensor;
    }
    return opt;
}

tn_optimizer *tn_sgd_new(tn_module *m, float lr, float momentum, float weight_decay)
{
    if (!(lr >= 0.0f) || !(momentum >= 0.0f) || !(weight_decay >= 0.0f))
        return TN__FAIL_NULL(TN_EINVAL, "sgd: lr %g, momentum %g and weight_decay %g must be >= 0",
                             (double)lr, (double)momentum, (double)weight_decay);
    tn_optimizer *opt = optimizer_new("sgd", m, OPT_SGD);
    if (opt) {
        opt->lr = lr;
        opt->momentum = momentum;
        opt->weight_decay = weight_decay;
    }
    return opt;
}

tn_optimizer *tn_adam_new(tn_module *m, float lr, float beta1, float beta2, float eps)
{
    if (!(lr >= 0.0f) || !(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f) ||
        !(eps >= 0.0f))
        return TN__FAIL_NULL(TN_EINVAL,
                             "adam: need lr >= 0, betas in [0, 1), eps >= 0; got lr %g betas "
                             "(%g, %g) eps %g",
                             (double)lr, (double)beta1, (double)beta2, (double)eps);
    tn_optimizer *opt = optimizer_new("adam", m, OPT_ADAM);
    if (opt) {
        opt->lr = lr;
        opt->beta1 = beta1;
        opt->beta2 = beta2;
        opt->eps = eps;
    }
    return opt;
}

/* A zeroed state tensor shaped like p, tagged OPTIMIZER_STATE. */
static tn_tensor *state_new(const tn_tensor *p)
{
    return tn_zeros(p->ndim, p->shape, LP_CAT_OPTIMIZER_STATE);
}

/* SGD on n floats: d = g + wd * p; buf = momentum * buf + d (buf = d on the first step);
 * p -= lr * buf (or lr * d without momentum). */
static void sgd_update(float *restrict p, const float *restrict g, float *restrict buf, int64_t n,
                       float lr, float momentum, float wd, bool first)
{
    for (int64_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        if (buf) {
            d = first ? d : momentum * buf[i] + d;
            buf[i] = d;
        }
        p[i] -= lr * d;
    }
}

/* Adam on n floats (torch.optim.Adam, amsgrad off, no weight decay):
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
static void adam_update(float *restrict p, const float *restrict g, float *restrict m,
                        float *restrict v, int64_t n, float lr, float b1, float b2, float eps,
                        int64_t t)
{
    /* The bias corrections in double, as PyTorch computes them in Python floats. */
    double bc1 = 1.0 - pow((double)b1, (double)t);
    float bc2_sqrt = (float)sqrt(1.0 - pow((double)b2, (double)t));
    float step_size = (float)(lr / bc1);
    for (int64_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= step_size * m[i] / (sqrtf(v[i]) / bc2_sqrt + eps);
    }
}

/* Updates one slot; 0 or a negative TN_E* code. Runs with grad disabled. */
static int step_slot(tn_optimizer *opt, opt_slot *s)
{
    tn_tensor *p = s->param;
    tn_tensor *grad = tn_grad(p);
    if (!grad)
        return 0;
    if (!tn_is_contiguous(p)) {
        char buf[64];
        return tn__error(TN_EINVAL, "optimizer_step: parameter %s is not contiguous",
                         tn_shape_str(p, buf, sizeof(buf)));
    }
    if (tn_numel(grad) != tn_numel(p)) {
        char a[64], b[64];
        return tn__error(TN_ESHAPE, "optimizer_step: grad %s does not match parameter %s",
                         tn_shape_str(grad, a, sizeof(a)), tn_shape_str(p, b, sizeof(b)));
    }
    tn_tensor *g = tn_contiguous(grad); /* grad itself, unless it is a strided view */
    if (!g)
        return tn_last_error();
    int64_t n = tn_numel(p);
    int rc = 0;
    if (opt->kind == OPT_SGD) {
        bool first = false;
        if (opt->momentum != 0.0f && !s->state0) {
            if (!(s->state0 = state_new(p))) {
                rc = tn_last_error();
                goto done;
            }
            first = true;
        }
        sgd_update(tn_data(p), tn_data_const(g), s->state0 ? tn_data(s->state0) : NULL, n, opt->lr,
                   opt->momentum, opt->weight_decay, first);
        if (s->state0)
            tn__bump_version(s->state0);
    } else {
        if (!s->state0 && !(s->state0 = state_new(p))) {
            rc = tn_last_error();
            goto done;
        }
        if (!s->state1 && !(s->state1 = state_new(p))) {
            rc = tn_last_error();
            goto done;
        }
        s->step++;
        adam_update(tn_data(p), tn_data_const(g), tn_data(s->state0), tn_data(s->state1), n,
                    opt->lr, opt->beta1, opt->beta2, opt->eps, s->step);
        tn__bump_version(s->state0);
        tn__bump_version(s->state1);
    }
    tn__bump_version(p);
done:
    tn_release(g);
    return rc;
}

int tn_optimizer_step(tn_optimizer *opt)
{
    if (!opt)
        return tn__error(TN_EINVAL, "optimizer_step: optimizer is NULL");
    bool prev = tn_set_grad_enabled(false);
    int rc = 0;
    for (int i = 0; i < opt->n && rc == 0; i++)
        rc = step_slot(opt, &opt->slots[i]);
    tn_set_grad_enabled(prev);
    return rc;
}

void tn_optimizer_zero_grad(tn_optimizer *opt)
{
    if (!opt)
        return;
    for (int i = 0; i < opt->n; i++)
        tn_zero_grad(opt->slots[i].param);
}

void tn_optimizer_free(tn_optimizer *opt)
{
    if (!opt)
        return;
    for (int i = 0; i < opt->n; i++) {
        tn_release(opt->slots[i].state0);
        tn_release(opt->slots[i].state1);
    }
    free(opt->slots);
    free(opt);
}
