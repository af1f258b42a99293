/*
 * Finite-difference gradient checks for cmocka tests.
 *
 * gc_check() builds the scalar loss L = sum(f(inputs) * W) for a fixed random W, runs backward, and
 * compares each input's .grad with central differences (L(x+eps) - L(x-eps)) / 2eps, computed with
 * grad disabled and the loss summed in double. A mismatch fails the running test with the input,
 * the element, and both values.
 */
#ifndef GRADPROF_TESTS_GRADCHECK_H
#define GRADPROF_TESTS_GRADCHECK_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include "gradprof/tensor.h"

/* The function under test: a new output tensor from n inputs, or NULL on error. */
typedef tn_tensor *(*gc_fn)(tn_tensor *const *inputs, void *ctx);

void gc_check(const char *name, gc_fn fn, void *ctx, int n, tn_tensor *const *inputs, double eps,
              double atol, double rtol);
#define GC_CHECK(name, fn, ctx, n, inputs) gc_check((name), (fn), (ctx), (n), (inputs), 1e-2, 2e-2, 2e-2)

/* A leaf with uniform values in [lo, hi), requiring grad if asked (category INPUT). */
tn_tensor *gc_rand(int ndim, const int64_t *shape, float lo, float hi, bool requires_grad);

/* Asserts |a[i] - b[i]| <= atol + rtol * |b[i]| for all i, naming `what` and i on failure. */
void gc_assert_close(const char *what, const float *a, const float *b, int64_t n, double atol,
                     double rtol);

/* Shorthand for shapes: GC_SHAPE(2, 3) -> 2, (int64_t[]){2, 3}. */
#define GC_NARGS_(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define GC_SHAPE(...) GC_NARGS_(__VA_ARGS__), (const int64_t[]){__VA_ARGS__}

#endif
