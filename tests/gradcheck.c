#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Loss = sum(out * w) in double; out is read through its strides via tn_copy_to. */
static double weighted_sum(const tn_tensor *out, const float *w)
{
    int64_t n = tn_numel(out);
    float *vals = malloc((size_t)(n ? n : 1) * sizeof(float));
    assert_non_null(vals);
    tn_copy_to(out, vals);
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)vals[i] * w[i];
    free(vals);
    return s;
}

static double eval_loss(gc_fn fn, void *ctx, tn_tensor *const *inputs, const float *w)
{
    tn_grad_mode prev = tn_no_grad_begin();
    tn_tensor *out = fn(inputs, ctx);
    tn_grad_mode_end(prev);
    if (!out)
        fail_msg("gradcheck: forward failed: %s", tn_last_error_message());
    double l = weighted_sum(out, w);
    tn_release(out);
    return l;
}

void gc_check(const char *name, gc_fn fn, void *ctx, int n, tn_tensor *const *inputs, double eps,
              double atol, double rtol)
{
    for (int i = 0; i < n; i++)
        if (inputs[i])
            tn_zero_grad(inputs[i]);
    tn_tensor *out = fn(inputs, ctx);
    if (!out)
        fail_msg("%s: forward failed: %s", name, tn_last_error_message());
    int64_t m = tn_numel(out);
    float *w = malloc((size_t)(m ? m : 1) * sizeof(float));
    assert_non_null(w);
    for (int64_t i = 0; i < m; i++)
        w[i] = (float)((i * 7919 % 113) / 113.0 - 0.4); /* fixed, varied, both signs */
    tn_tensor *wt = tn_from_data(tn_ndim(out), tn_shape(out), w, LP_CAT_INPUT);
    tn_tensor *prod = tn_mul(out, wt);
    tn_tensor *loss = prod ? tn_sum(prod, 0, NULL, false) : NULL;
    if (!loss)
        fail_msg("%s: building the loss failed: %s", name, tn_last_error_message());
    if (tn_backward(loss, NULL, false) != 0)
        fail_msg("%s: backward failed: %s", name, tn_last_error_message());
    tn_release(loss);
    tn_release(prod);
    tn_release(wt);
    tn_release(out);

    for (int i = 0; i < n; i++) {
        tn_tensor *x = inputs[i];
        if (!x || !tn_requires_grad(x))
            continue;
        tn_tensor *g = tn_grad(x);
        if (!g)
            fail_msg("%s: input %d requires grad but got no .grad", name, i);
        assert_true(tn_is_contiguous(x));
        int64_t k = tn_numel(x);
        float *analytic = malloc((size_t)k * sizeof(float));
        assert_non_null(analytic);
        tn_copy_to(g, analytic);
        float *data = tn_data(x);
        for (int64_t j = 0; j < k; j++) {
            float orig = data[j];
            data[j] = orig + (float)eps;
            double lp = eval_loss(fn, ctx, inputs, w);
            data[j] = orig - (float)eps;
            double lm = eval_loss(fn, ctx, inputs, w);
            data[j] = orig;
            double numeric = (lp - lm) / (2 * eps);
            if (fabs(analytic[j] - numeric) > atol + rtol * fabs(numeric))
                fail_msg("%s: d/d input%d[%ld]: analytic %.6g, numeric %.6g", name, i, (long)j,
                         analytic[j], numeric);
        }
        free(analytic);
    }
    free(w);
}

tn_tensor *gc_rand(int ndim, const int64_t *shape, float lo, float hi, bool requires_grad)
{
    tn_tensor *t = tn_rand_uniform(ndim, shape, lo, hi, LP_CAT_INPUT);
    assert_non_null(t);
    if (requires_grad)
        assert_int_equal(tn_set_requires_grad(t, true), 0);
    return t;
}

void gc_assert_close(const char *what, const float *a, const float *b, int64_t n, double atol,
                     double rtol)
{
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= atol + rtol * fabs((double)b[i])))
            fail_msg("%s[%ld]: got %.7g, expected %.7g", what, (long)i, a[i], b[i]);
}
