/*
 * Matrix ops on OpenBLAS sgemm: matmul (torch.matmul semantics) and linear (x W^T + b, fused).
 *
 * Layouts: a matrix operand whose rows or columns have unit stride goes to sgemm as it is, with a
 * transpose flag and a leading dimension, so transposed views cost no copy. Only other layouts
 * (expanded or arbitrarily strided matrices) are first copied into TEMPORARY scratch.
 *
 * Saved for backward, as PyTorch does: matmul keeps a only if b needs grad and b only if a needs
 * grad; linear keeps x only if weight needs grad and weight only if x needs grad. Nothing else.
 */
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "tensor_internal.h"

#define SHAPE_BUF 192

/* Node parameters: the saved slot of each operand, or -1 when it was not saved. */
enum { SLOT_A = 0, SLOT_B = 1 };

/* ---- helpers -------------------------------------------------------------------------------- */

/* Gives back the gradients a failing backward already made, so the engine sees none. */
static void release_grads(const tn_node *node, tn_tensor **grad_inputs)
{
    for (int i = 0; i < node->n_inputs; i++) {
        tn_release(grad_inputs[i]);
        grad_inputs[i] = NULL;
    }
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* Whether a [rows, cols] matrix with element strides (sr, sc) can be handed to row-major sgemm
 * without a copy. If so sets the transpose flag and the leading dimension (>= 1, fits an int). */
static bool gemm_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, CBLAS_TRANSPOSE *trans,
                        int *ld)
{
    int64_t l;
    if ((cols <= 1 || sc == 1) && (rows <= 1 || sr >= max64(cols, 1))) {
        *trans = CblasNoTrans;
        l = rows <= 1 ? max64(cols, 1) : sr;
    } else if ((rows <= 1 || sr == 1) && (cols <= 1 || sc >= max64(rows, 1))) {
        *trans = CblasTrans;
        l = cols <= 1 ? max64(rows, 1) : sc;
    } else {
        return false;
    }
    if (l > INT_MAX)
        return false;
    *ld = (int)l;
    return true;
}

/* Whether dims [0, nd) of (shape, strides) collapse into one dim of uniform stride; if so sets
 * *stride (fallback when every dim has size 1). */
static bool collapse_dims(int nd, const int64_t *shape, const int64_t *strides, int64_t fallback,
                          int64_t *stride)
{
    int64_t expect = -1;
    *stride = fallback;
    for (int d = nd - 1; d >= 0; d--) {
        if (shape[d] == 1)
            continue;
        if (expect < 0)
            *stride = strides[d];
        else if (strides[d] != expect)
            return false;
        expect = strides[d] * shape[d];
    }
    return true;
}

/* A view of t's storage with the given layout (a new reference; outside the graph). */
static tn_tensor *wrap(const tn_tensor *t, int ndim, const int64_t *shape, const int64_t *strides)
{
    return tn__tensor_wrap(t->storage, ndim, shape, strides, t->offset);
}

/* t with a contiguous (ndim, shape) of the same numel: a view when t is contiguous, else a copy. */
static tn_tensor *reshape_to(tn_tensor *t, int ndim, const int64_t *shape)
{
    if (!tn_is_contiguous(t))
        return tn_reshape(t, ndim, shape);
    int64_t strides[TN_MAX_DIMS];
    tn__contiguous_strides(ndim, shape, strides);
    return wrap(t, ndim, shape, strides);
}

/* ---- matmul --------------------------------------------------------------------------------- */

/* An operand promoted to >= 2 dims as torch.matmul does: a 1-D a [k] becomes [1, k], a 1-D b [k]
 * becomes [k, 1]. The promoted dim has size 1, so its stride never matters. */
typedef struct mm_operand {
    int ndim;
    int64_t shape[TN_MAX_DIMS];
    int64_t strides[TN_MAX_DIMS];
} mm_operand;

static void mm_promote(int ndim, const int64_t *shape, const int64_t *strides, bool is_a,
                       mm_operand *p)
{
    if (ndim == 1) {
        p->ndim = 2;
        int at = is_a ? 1 : 0; /* where the real dim goes */
        p->shape[at] = shape[0];
        p->strides[at] = strides ? strides[0] : 1;
        p->shape[1 - at] = 1;
        p->strides[1 - at] = is_a ? max64(shape[0], 1) : 1;
        return;
    }
    p->ndim = ndim;
    memcpy(p->shape, shape, (size_t)ndim * sizeof(int64_t));
    if (strides)
        memcpy(p->strides, strides, (size_t)ndim * sizeof(int64_t));
    else
        tn__contiguous_strides(ndim, shape, p->strides);
}

static bool mm_usable(const mm_operand *p)
{
    CBLAS_TRANSPOSE t;
    int ld;
    int nd = p->ndim;
    return gemm_layout(p->shape[nd - 2], p->shape[nd - 1], p->strides[nd - 2], p->strides[nd - 1],
                       &t, &ld);
}

/* out [batch..., n, m] (contiguous) = A [batch_a..., n, k] @ B [batch_b..., k, m], batch dims
 * broadcast to (bnd, bshape). Both operands must be mm_usable. */
static void mm_compute(const mm_operand *A, const float *a, const mm_operand *B, const float *b,
                       int bnd, const int64_t *bshape, float *out)
{
    int na = A->ndim, nb = B->ndim;
    int64_t n = A->shape[na - 2], k = A->shape[na - 1], m = B->shape[nb - 1];
    int64_t nbatch = tn__shape_numel(bnd, bshape);
    if (n == 0 || m == 0 || nbatch == 0)
        return;
    if (k == 0) {
        memset(out, 0, (size_t)(nbatch * n * m) * sizeof(float));
        return;
    }
    CBLAS_TRANSPOSE ta = CblasNoTrans, tb = CblasNoTrans;
    int lda = 1, ldb = 1; /* set by gemm_layout: the caller checked both are usable */
    gemm_layout(n, k, A->strides[na - 2], A->strides[na - 1], &ta, &lda);
    gemm_layout(k, m, B->strides[nb - 2], B->strides[nb - 1], &tb, &ldb);

    /* b without batch dims: fold a's batch into the rows for one sgemm when the layout allows. */
    int64_t rs;
    if (nb == 2 && na > 2 && ta == CblasNoTrans && nbatch * n <= INT_MAX &&
        collapse_dims(na - 1, A->shape, A->strides, max64(k, 1), &rs) && rs >= k && rs <= INT_MAX) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, (int)(nbatch * n), (int)m, (int)k, 1.0f, a,
                    (int)rs, b, ldb, 0.0f, out, (int)m);
        return;
    }

    /* Otherwise one sgemm per batch element, walking the broadcast batch index. */
    int64_t sa[TN_MAX_DIMS], sb[TN_MAX_DIMS], idx[TN_MAX_DIMS] = {0};
    for (int d = 0; d < bnd; d++) {
        int da = d - (bnd - (na - 2)), db = d - (bnd - (nb - 2));
        sa[d] = (da >= 0 && A->shape[da] != 1) ? A->strides[da] : 0;
        sb[d] = (db >= 0 && B->shape[db] != 1) ? B->strides[db] : 0;
    }
    int64_t oa = 0, ob = 0;
    for (int64_t i = 0; i < nbatch; i++) {
        cblas_sgemm(CblasRowMajor, ta, tb, (int)n, (int)m, (int)k, 1.0f, a + oa, lda, b + ob, ldb,
                    0.0f, out + i * n * m, (int)m);
        for (int d = bnd - 1; d >= 0; d--) {
            oa += sa[d];
            ob += sb[d];
            if (++idx[d] < bshape[d])
                break;
            oa -= sa[d] * bshape[d];
            ob -= sb[d] * bshape[d];
            idx[d] = 0;
        }
    }
}

static int matmul_backward(tn_node *node, tn_tensor *grad_out, tn_tensor **grad_inputs);

static const tn_node_kind matmul_kind = {"matmul", "matmul_backward", matmul_backward};

/* The output shape of a @ b, or -1 with TN_ESHAPE set. Also gives the broadcast batch shape. */
static int matmul_shapes(const tn_tensor *a, const tn_tensor *b, const mm_operand *A,
                         const mm_operand *B, int *bnd, int64_t *bshape, int *ond, int64_t *oshape)
{
    char sa[SHAPE_BUF], sb[SHAPE_BUF];
    int na = A->ndim, nb = B->ndim;
    if (A->shape[na - 1] != B->shape[nb - 2]) {
        tn__error(TN_ESHAPE,
                  "matmul: a %s and b %s do not match (a has %lld columns, b has %lld rows)",
                  tn_shape_str(a, sa, sizeof sa), tn_shape_str(b, sb, sizeof sb),
                  (long long)A->shape[na - 1], (long long)B->shape[nb - 2]);
        return -1;
    }
    int n = (na > nb ? na : nb) - 2;
    for (int d = 0; d < n; d++) {
        int da = d - (n - (na - 2)), db = d - (n - (nb - 2));
        int64_t x = da >= 0 ? A->shape[da] : 1, y = db >= 0 ? B->shape[db] : 1;
        if (x != y && x != 1 && y != 1) {
            tn__error(TN_ESHAPE,
                      "matmul: batch dims of a %s and b %s do not broadcast (%lld vs %lld)",
                      tn_shape_str(a, sa, sizeof sa), tn_shape_str(b, sb, sizeof sb), (long long)x,
                      (long long)y);
            return -1;
        }
        bshape[d] = x == 1 ? y : x;
    }
    *bnd = n;
    *ond = n;
    memcpy(oshape, bshape, (size_t)n * sizeof(int64_t));
    if (a->ndim > 1)
        oshape[(*ond)++] = A->shape[na - 2];
    if (b->ndim > 1)
        oshape[(*ond)++] = B->shape[nb - 1];
    int64_t lim[3] = {A->shape[na - 2], A->shape[na - 1], B->shape[nb - 1]};
    for (int i = 0; i < 3; i++) {
        if (lim[i] > INT_MAX) {
            tn__error(TN_EINVAL, "matmul: a %s and b %s have a matrix dim too large for BLAS",
                      tn_shape_str(a, sa, sizeof sa), tn_shape_str(b, sb, sizeof sb));
            return -1;
        }
    }
    return 0;
}

tn_tensor *tn_matmul(tn_tensor *a, tn_tensor *b)
{
    if (tn__check_arg("matmul", "a", a) || tn__check_arg("matmul", "b", b))
        return NULL;
    if (a->ndim < 1 || b->ndim < 1) {
        char sa[SHAPE_BUF], sb[SHAPE_BUF];
        return TN__FAIL_NULL(TN_ESHAPE, "matmul: a %s and b %s must both be at least 1-D",
                             tn_shape_str(a, sa, sizeof sa), tn_shape_str(b, sb, sizeof sb));
    }
    mm_operand A, B;
    mm_promote(a->ndim, a->shape, a->strides, true, &A);
    mm_promote(b->ndim, b->shape, b->strides, false, &B);
    int bnd, ond;
    int64_t bshape[TN_MAX_DIMS], oshape[TN_MAX_DIMS];
    if (matmul_shapes(a, b, &A, &B, &bnd, bshape, &ond, oshape))
        return NULL;

    tn_tensor *out = tn__new_output(ond, oshape, "matmul");
    if (!out)
        return NULL;
    if (a->ndim == 1 && b->ndim == 1) {
        /* Dot product of two vectors: a 0-D result. */
        int64_t k = a->shape[0], sa = a->strides[0], sb = b->strides[0];
        const float *pa = tn_data_const(a), *pb = tn_data_const(b);
        if (k > 0 && sa > 0 && sb > 0 && sa <= INT_MAX && sb <= INT_MAX) {
            tn_data(out)[0] = cblas_sdot((int)k, pa, (int)sa, pb, (int)sb);
        } else {
            float acc = 0.0f; /* empty or expanded (stride 0) vectors */
            for (int64_t i = 0; i < k; i++)
                acc += pa[i * sa] * pb[i * sb];
            tn_data(out)[0] = acc;
        }
    } else {
        tn_tensor *ac = NULL, *bc = NULL; /* scratch copies of layouts sgemm cannot take */
        if (!mm_usable(&A)) {
            if (!(ac = tn__scratch_copy(a, "matmul")))
                goto fail;
            mm_promote(a->ndim, a->shape, NULL, true, &A);
        }
        if (!mm_usable(&B)) {
            if (!(bc = tn__scratch_copy(b, "matmul"))) {
                tn_release(ac);
                goto fail;
            }
            mm_promote(b->ndim, b->shape, NULL, false, &B);
        }
        mm_compute(&A, tn_data_const(ac ? ac : a), &B, tn_data_const(bc ? bc : b), bnd, bshape,
                   tn_data(out));
        tn_release(ac);
        tn_release(bc);
    }

    tn_tensor *inputs[2] = {a, b};
    if (tn__grad_needed(2, inputs)) {
        tn_node *node = tn__node_new(&matmul_kind, out, 2, inputs);
        if (!node)
            goto fail;
        node->ints[SLOT_A] = -1;
        node->ints[SLOT_B] = -1;
        /* grad_a = grad @ b^T needs b; grad_b = a^T @ grad needs a. */
        if (tn__input_needs_grad(node, 1) && (node->ints[SLOT_A] = tn__save(node, a)) < 0)
            goto fail;
        if (tn__input_needs_grad(node, 0) && (node->ints[SLOT_B] = tn__save(node, b)) < 0)
            goto fail;
    }
    return out;
fail:
    tn_release(out);
    return NULL;
}

/* grad_a = sum_to_shape(G @ b^T), grad_b = sum_to_shape(a^T @ G), on the promoted shapes, then
 * viewed back to the inputs' shapes. */
static int matmul_backward(tn_node *node, tn_tensor *grad_out, tn_tensor **grad_inputs)
{
    const tn_node_input *ia = &node->inputs[0], *ib = &node->inputs[1];
    mm_operand pa, pb; /* promoted input shapes (contiguous strides; unused) */
    mm_promote(ia->ndim, ia->shape, NULL, true, &pa);
    mm_promote(ib->ndim, ib->shape, NULL, false, &pb);
    int na = pa.ndim, nb = pb.ndim;
    int64_t n = pa.shape[na - 2], k = pa.shape[na - 1], m = pb.shape[nb - 1];

    /* G promoted: [batch..., n, m]. */
    int bnd = grad_out->ndim - (ia->ndim > 1) - (ib->ndim > 1);
    int64_t gshape[TN_MAX_DIMS], gstrides[TN_MAX_DIMS];
    memcpy(gshape, grad_out->shape, (size_t)bnd * sizeof(int64_t));
    gshape[bnd] = n;
    gshape[bnd + 1] = m;
    tn__contiguous_strides(bnd + 2, gshape, gstrides);
    tn_tensor *g = wrap(grad_out, bnd + 2, gshape, gstrides);
    if (!g)
        return tn__pending_error();

    int rc = 0;
    tn_tensor *saved = NULL, *opt = NULL, *prod = NULL, *sum = NULL, *scratch = NULL, *gflat = NULL;
    if (tn__input_needs_grad(node, 0)) {
        /* grad_a [batch..., n, k] = G @ b^T. */
        if (!(saved = tn__saved(node, (int)node->ints[SLOT_B])))
            goto fail;
        mm_operand B;
        mm_promote(saved->ndim, saved->shape, saved->strides, false, &B);
        int64_t tshape[TN_MAX_DIMS], tstrides[TN_MAX_DIMS];
        memcpy(tshape, B.shape, (size_t)nb * sizeof(int64_t));
        memcpy(tstrides, B.strides, (size_t)nb * sizeof(int64_t));
        tshape[nb - 2] = B.shape[nb - 1];
        tshape[nb - 1] = B.shape[nb - 2];
        tstrides[nb - 2] = B.strides[nb - 1];
        tstrides[nb - 1] = B.strides[nb - 2];
        if (!(opt = wrap(saved, nb, tshape, tstrides)) || !(prod = tn_matmul(g, opt)) ||
            !(sum = tn__sum_to_shape(prod, na, pa.shape)) ||
            !(grad_inputs[0] = reshape_to(sum, ia->ndim, ia->shape)))
            goto fail;
        tn_release(saved);
        tn_release(opt);
        tn_release(prod);
        tn_release(sum);
        saved = opt = prod = sum = NULL;
    }
    if (tn__input_needs_grad(node, 1)) {
        if (!(saved = tn__saved(node, (int)node->ints[SLOT_A])))
            goto fail;
        mm_operand A;
        mm_promote(saved->ndim, saved->shape, saved->strides, true, &A);
        int64_t tshape[TN_MAX_DIMS], tstrides[TN_MAX_DIMS];
        if (nb == 2 && na > 2) {
            /* b has no batch dims: grad_b [k, m] = a_flat^T [k, B*n] @ G_flat [B*n, m], one sgemm
             * rather than a batched product summed afterwards. */
            int64_t rows = tn__shape_numel(na - 1, A.shape), rs;
            const tn_tensor *src = saved;
            if (!collapse_dims(na - 1, A.shape, A.strides, max64(k, 1), &rs)) {
                if (!(scratch = tn__scratch_copy(saved, "matmul")))
                    goto fail;
                src = scratch;
                rs = max64(k, 1);
            }
            tshape[0] = k;
            tshape[1] = rows;
            tstrides[0] = src->strides[src->ndim - 1];
            tstrides[1] = rs;
            int64_t fshape[2] = {rows, m}, fstrides[2] = {m, 1};
            if (!(opt = wrap(src, 2, tshape, tstrides)) ||
                !(gflat = wrap(grad_out, 2, fshape, fstrides)) || !(prod = tn_matmul(opt, gflat)) ||
                !(grad_inputs[1] = reshape_to(prod, ib->ndim, ib->shape)))
                goto fail;
        } else {
            /* grad_b [batch..., k, m] = a^T @ G, summed over broadcast batch dims. */
            memcpy(tshape, A.shape, (size_t)na * sizeof(int64_t));
            memcpy(tstrides, A.strides, (size_t)na * sizeof(int64_t));
            tshape[na - 2] = A.shape[na - 1];
            tshape[na - 1] = A.shape[na - 2];
            tstrides[na - 2] = A.strides[na - 1];
            tstrides[na - 1] = A.strides[na - 2];
            if (!(opt = wrap(saved, na, tshape, tstrides)) || !(prod = tn_matmul(opt, g)) ||
                !(sum = tn__sum_to_shape(prod, nb, pb.shape)) ||
                !(grad_inputs[1] = reshape_to(sum, ib->ndim, ib->shape)))
                goto fail;
        }
    }
    goto done;
fail:
    rc = tn__pending_error();
    release_grads(node, grad_inputs);
done:
    tn_release(saved);
    tn_release(opt);
    tn_release(prod);
    tn_release(sum);
    tn_release(scratch);
    tn_release(gflat);
    tn_release(g);
    return rc;
}

/* ---- linear --------------------------------------------------------------------------------- */

static int linear_backward(tn_node *node, tn_tensor *grad_out, tn_tensor **grad_inputs);

static const tn_node_kind linear_kind = {"linear", "linear_backward", linear_backward};

enum { SLOT_X = 0, SLOT_W = 1 };

/* Sets the transpose flag and ld for x [..., in] seen as x_flat [rows, in]; false if its layout
 * needs a copy. */
static bool linear_x_layout(const tn_tensor *x, int64_t rows, int64_t in, CBLAS_TRANSPOSE *op,
                            int *ld)
{
    int64_t rs;
    if (!collapse_dims(x->ndim - 1, x->shape, x->strides, max64(in, 1), &rs))
        return false;
    return gemm_layout(rows, in, rs, x->strides[x->ndim - 1], op, ld);
}

tn_tensor *tn_linear(tn_tensor *x, tn_tensor *weight, tn_tensor *bias)
{
    char sx[SHAPE_BUF], sw[SHAPE_BUF], sb[SHAPE_BUF];
    if (tn__check_arg("linear", "x", x) || tn__check_arg("linear", "weight", weight))
        return NULL;
    if (x->ndim < 1 || weight->ndim != 2 || weight->shape[1] != x->shape[x->ndim - 1])
        return TN__FAIL_NULL(TN_ESHAPE,
                             "linear: x %s and weight %s do not match (want x [..., in] "
                             "and weight [out, in])",
                             tn_shape_str(x, sx, sizeof sx), tn_shape_str(weight, sw, sizeof sw));
    int64_t in = weight->shape[1], outf = weight->shape[0];
    if (bias && (bias->ndim != 1 || bias->shape[0] != outf))
        return TN__FAIL_NULL(TN_ESHAPE, "linear: bias %s does not match weight %s (want [%lld])",
                             tn_shape_str(bias, sb, sizeof sb), tn_shape_str(weight, sw, sizeof sw),
                             (long long)outf);
    int64_t rows = tn__shape_numel(x->ndim - 1, x->shape);
    if (rows > INT_MAX || in > INT_MAX || outf > INT_MAX)
        return TN__FAIL_NULL(TN_EINVAL, "linear: x %s and weight %s are too large for BLAS",
                             tn_shape_str(x, sx, sizeof sx), tn_shape_str(weight, sw, sizeof sw));

    int64_t oshape[TN_MAX_DIMS];
    memcpy(oshape, x->shape, (size_t)x->ndim * sizeof(int64_t));
    oshape[x->ndim - 1] = outf;
    tn_tensor *out = tn__new_output(x->ndim, oshape, "linear");
    if (!out)
        return NULL;
    float *o = tn_data(out);

    if (rows > 0 && outf > 0) {
        /* out [rows, outf] = bias broadcast (or 0), then += x_flat @ W^T in one sgemm. */
        if (bias) {
            const float *bd = tn_data_const(bias);
            int64_t bs = bias->strides[0];
            for (int64_t j = 0; j < outf; j++)
                o[j] = bd[j * bs];
            for (int64_t r = 1; r < rows; r++)
                memcpy(o + r * outf, o, (size_t)outf * sizeof(float));
        } else if (in == 0) {
            memset(o, 0, (size_t)(rows * outf) * sizeof(float));
        }
        if (in > 0) {
            tn_tensor *xc = NULL, *wc = NULL;
            CBLAS_TRANSPOSE tx, tw;
            int ldx, ldw;
            if (!linear_x_layout(x, rows, in, &tx, &ldx)) {
                if (!(xc = tn__scratch_copy(x, "linear")))
                    goto fail;
                tx = CblasNoTrans;
                ldx = (int)in;
            }
            /* W^T [in, outf] has strides (W.s1, W.s0). */
            if (!gemm_layout(in, outf, weight->strides[1], weight->strides[0], &tw, &ldw)) {
                if (!(wc = tn__scratch_copy(weight, "linear"))) {
                    tn_release(xc);
                    goto fail;
                }
                tw = CblasTrans;
                ldw = (int)in;
            }
            cblas_sgemm(CblasRowMajor, tx, tw, (int)rows, (int)outf, (int)in, 1.0f,
                        tn_data_const(xc ? xc : x), ldx, tn_data_const(wc ? wc : weight), ldw,
                        bias ? 1.0f : 0.0f, o, (int)outf);
            tn_release(xc);
            tn_release(wc);
        }
    }

    tn_tensor *inputs[3] = {x, weight, bias};
    int n = bias ? 3 : 2;
    if (tn__grad_needed(n, inputs)) {
        tn_node *node = tn__node_new(&linear_kind, out, n, inputs);
        if (!node)
            goto fail;
        node->ints[SLOT_X] = -1;
        node->ints[SLOT_W] = -1;
        /* grad_W = G^T @ x needs x; grad_x = G @ W needs W; grad_bias needs neither. */
        if (tn__input_needs_grad(node, 1) && (node->ints[SLOT_X] = tn__save(node, x)) < 0)
            goto fail;
        if (tn__input_needs_grad(node, 0) && (node->ints[SLOT_W] = tn__save(node, weight)) < 0)
            goto fail;
    }
    return out;
fail:
    tn_release(out);
    return NULL;
}

/* G [..., out]: grad_x = G @ W [..., in]; grad_W = G_flat^T @ x_flat [out, in];
 * grad_bias = G summed over every dim but the last [out]. */
static int linear_backward(tn_node *node, tn_tensor *grad_out, tn_tensor **grad_inputs)
{
    const tn_node_input *ix = &node->inputs[0], *iw = &node->inputs[1];
    int64_t in = iw->shape[1], outf = iw->shape[0];
    int64_t rows = tn__shape_numel(ix->ndim - 1, ix->shape);
    int rc = 0;
    tn_tensor *saved = NULL, *gt = NULL, *xflat = NULL, *scratch = NULL, *gflat = NULL;

    if (tn__input_needs_grad(node, 0)) {
        if (!(saved = tn__saved(node, (int)node->ints[SLOT_W])) ||
            !(grad_inputs[0] = tn_matmul(grad_out, saved)))
            goto fail;
        tn_release(saved);
        saved = NULL;
    }
    if (tn__input_needs_grad(node, 1)) {
        if (!(saved = tn__saved(node, (int)node->ints[SLOT_X])))
            goto fail;
        /* x_flat [rows, in] as a view when x's leading dims collapse, else a scratch copy. */
        int64_t rs;
        const tn_tensor *src = saved;
        if (!collapse_dims(saved->ndim - 1, saved->shape, saved->strides, max64(in, 1), &rs)) {
            if (!(scratch = tn__scratch_copy(saved, "linear")))
                goto fail;
            src = scratch;
            rs = max64(in, 1);
        }
        int64_t xshape[2] = {rows, in}, xstrides[2] = {rs, src->strides[src->ndim - 1]};
        int64_t tshape[2] = {outf, rows}, tstrides[2] = {1, outf};
        if (!(xflat = wrap(src, 2, xshape, xstrides)) ||
            !(gt = wrap(grad_out, 2, tshape, tstrides)) || !(grad_inputs[1] = tn_matmul(gt, xflat)))
            goto fail;
    }
    if (node->n_inputs > 2 && tn__input_needs_grad(node, 2)) {
        int64_t fshape[2] = {rows, outf}, fstrides[2] = {outf, 1};
        int dim0 = 0;
        if (!(gflat = wrap(grad_out, 2, fshape, fstrides)) ||
            !(grad_inputs[2] = tn_sum(gflat, 1, &dim0, false)))
            goto fail;
    }
    goto done;
fail:
    rc = tn__pending_error();
    release_grads(node, grad_inputs);
done:
    tn_release(saved);
    tn_release(gt);
    tn_release(xflat);
    tn_release(scratch);
    tn_release(gflat);
    return rc;
}
