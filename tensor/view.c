/* Views (sharing storage, with their backward), detach, contiguous, and broadcasting helpers. */
#include <string.h>

#include "tensor_internal.h"

/* ---- broadcasting --------------------------------------------------------------------------- */

int tn__broadcast_shapes(const char *op, int na, const int64_t *a, int nb, const int64_t *b,
                         int *out_ndim, int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1) {
            char sa[96], sb[96];
            return tn__error(TN_ESHAPE, "%s: shapes %s and %s do not broadcast (dim %d: %ld vs %ld)",
                             op, tn__shape_fmt(na, a, sa, sizeof sa),
                             tn__shape_fmt(nb, b, sb, sizeof sb), i, (long)da, (long)db);
        }
        out[i] = da == 1 ? db : da;
    }
    *out_ndim = n;
    return 0;
}

void tn__broadcast_strides(const tn_tensor *t, int ndim, const int64_t *shape, int64_t *strides)
{
    int lead = ndim - t->ndim;
    for (int d = 0; d < ndim; d++) {
        if (d < lead)
            strides[d] = 0;
        else
            strides[d] = (t->shape[d - lead] == 1 && shape[d] != 1) ? 0 : t->strides[d - lead];
    }
}

/* ---- view nodes ----------------------------------------------------------------------------- */

static tn_tensor *tn__share(tn_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                            int64_t offset)
{
    return tn__tensor_wrap(t->storage, ndim, shape, strides, offset);
}

/* Records `kind` for a view `out` of `t` when autograd needs it. Returns out, or NULL (out freed). */
static tn_tensor *tn__view_node(const tn_node_kind *kind, tn_tensor *out, tn_tensor *t,
                                const int64_t *ints, int nints)
{
    if (!out || !tn__grad_needed(1, &t))
        return out;
    tn_node *node = tn__node_new(kind, out, 1, &t);
    if (!node) {
        tn_release(out);
        return NULL;
    }
    for (int i = 0; i < nints; i++)
        node->ints[i] = ints[i];
    return out;
}

static int tn__view_backward(tn_node *node, tn_tensor *g, tn_tensor **gin)
{
    gin[0] = tn_reshape(g, node->inputs[0].ndim, node->inputs[0].shape);
    return gin[0] ? 0 : tn_last_error();
}
static const tn_node_kind tn__view_kind = {"view", "view_backward", tn__view_backward};

static int tn__transpose_backward(tn_node *node, tn_tensor *g, tn_tensor **gin)
{
    gin[0] = tn_transpose(g, (int)node->ints[0], (int)node->ints[1]);
    return gin[0] ? 0 : tn_last_error();
}
static const tn_node_kind tn__transpose_kind = {"transpose", "transpose_backward",
                                                tn__transpose_backward};

static int tn__permute_backward(tn_node *node, tn_tensor *g, tn_tensor **gin)
{
    int inverse[TN_MAX_DIMS];
    for (int d = 0; d < g->ndim; d++)
        inverse[node->ints[d]] = d;
    gin[0] = tn_permute(g, inverse);
    return gin[0] ? 0 : tn_last_error();
}
static const tn_node_kind tn__permute_kind = {"permute", "permute_backward", tn__permute_backward};

static int tn__narrow_backward(tn_node *node, tn_tensor *g, tn_tensor **gin)
{
    tn_tensor *full = tn_zeros(node->inputs[0].ndim, node->inputs[0].shape, LP_CAT_ACTIVATION);
    tn_tensor *slice = full ? tn_narrow(full, (int)node->ints[0], node->ints[1], node->ints[2])
                            : NULL;
    int rc = slice ? tn_copy_(slice, g) : tn_last_error();
    tn_release(slice);
    if (rc) {
        tn_release(full);
        return rc;
    }
    gin[0] = full;
    return 0;
}
static const tn_node_kind tn__narrow_kind = {"narrow", "narrow_backward", tn__narrow_backward};

static int tn__expand_backward(tn_node *node, tn_tensor *g, tn_tensor **gin)
{
    gin[0] = tn__sum_to_shape(g, node->inputs[0].ndim, node->inputs[0].shape);
    return gin[0] ? 0 : tn_last_error();
}
static const tn_node_kind tn__expand_kind = {"expand", "expand_backward", tn__expand_backward};

static int tn__contiguous_backward(tn_node *node, tn_tensor *g, tn_tensor **gin)
{
    gin[0] = tn_retain(g);
    return 0;
}
static const tn_node_kind tn__contiguous_kind = {"contiguous", "contiguous_backward",
                                                 tn__contiguous_backward};

/* ---- views ---------------------------------------------------------------------------------- */

/* Resolves one -1 in `shape` against numel; TN_ESHAPE if impossible. */
static int tn__infer_shape(const char *op, const tn_tensor *t, int ndim, const int64_t *shape,
                           int64_t *out)
{
    char a[96], b[96];
    if (ndim < 0 || ndim > TN_MAX_DIMS || (ndim > 0 && !shape))
        return tn__error(TN_EINVAL, "%s: bad target ndim %d", op, ndim);
    int infer = -1;
    int64_t known = 1;
    for (int d = 0; d < ndim; d++) {
        out[d] = shape[d];
        if (shape[d] == -1) {
            if (infer >= 0)
                return tn__error(TN_EINVAL, "%s: only one dim can be -1 in %s", op,
                                 tn__shape_fmt(ndim, shape, b, sizeof b));
            infer = d;
        } else if (shape[d] < 0) {
            return tn__error(TN_EINVAL, "%s: invalid size %ld in %s", op, (long)shape[d],
                             tn__shape_fmt(ndim, shape, b, sizeof b));
        } else {
            known *= shape[d];
        }
    }
    int64_t numel = tn_numel(t);
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return tn__error(TN_ESHAPE, "%s: shape %s is invalid for input %s", op,
                             tn__shape_fmt(ndim, shape, b, sizeof b), tn_shape_str(t, a, sizeof a));
        out[infer] = numel / known;
        known *= out[infer];
    }
    if (known != numel)
        return tn__error(TN_ESHAPE, "%s: shape %s is invalid for input %s (%ld elements)", op,
                         tn__shape_fmt(ndim, shape, b, sizeof b), tn_shape_str(t, a, sizeof a),
                         (long)numel);
    return 0;
}

/* Strides for viewing t as `shape` without a copy (PyTorch's computeStride); false if impossible. */
static bool tn__view_strides(const tn_tensor *t, int nd, const int64_t *shape, int64_t *strides)
{
    if (tn_numel(t) == 0 || t->ndim == 0) {
        tn__contiguous_strides(nd, shape, strides);
        return true;
    }
    int view_d = nd - 1;
    int64_t chunk_base_stride = t->strides[t->ndim - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        tensor_numel *= t->shape[d];
        if (d == 0 ||
            (t->shape[d - 1] != 1 && t->strides[d - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                strides[view_d] = view_numel * chunk_base_stride;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel)
                return false;
            if (d > 0) {
                chunk_base_stride = t->strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

tn_tensor *tn_view(tn_tensor *t, int ndim, const int64_t *shape)
{
    if (tn__check_arg("view", "input", t))
        return NULL;
    int64_t target[TN_MAX_DIMS], strides[TN_MAX_DIMS];
    if (tn__infer_shape("view", t, ndim, shape, target))
        return NULL;
    if (!tn__view_strides(t, ndim, target, strides)) {
        char a[96], b[96];
        return TN__FAIL_NULL(TN_ESHAPE,
                             "view: size %s is not compatible with input %s's strides "
                             "(use reshape, which copies)",
                             tn__shape_fmt(ndim, target, b, sizeof b), tn_shape_str(t, a, sizeof a));
    }
    return tn__view_node(&tn__view_kind, tn__share(t, ndim, target, strides, t->offset), t, NULL, 0);
}

tn_tensor *tn_reshape(tn_tensor *t, int ndim, const int64_t *shape)
{
    if (tn__check_arg("reshape", "input", t))
        return NULL;
    int64_t target[TN_MAX_DIMS], strides[TN_MAX_DIMS];
    if (tn__infer_shape("reshape", t, ndim, shape, target))
        return NULL;
    if (tn__view_strides(t, ndim, target, strides))
        return tn__view_node(&tn__view_kind, tn__share(t, ndim, target, strides, t->offset), t,
                             NULL, 0);
    tn_tensor *c = tn_contiguous(t);
    tn_tensor *out = c ? tn_view(c, ndim, target) : NULL;
    tn_release(c);
    return out;
}

tn_tensor *tn_transpose(tn_tensor *t, int dim0, int dim1)
{
    if (tn__check_arg("transpose", "input", t))
        return NULL;
    int d0 = tn__wrap_dim(dim0, t->ndim), d1 = tn__wrap_dim(dim1, t->ndim);
    if (d0 < 0 || d1 < 0)
        return TN__FAIL_NULL(TN_EINVAL, "transpose: dims (%d, %d) out of range for %d-d input",
                             dim0, dim1, t->ndim);
    int64_t shape[TN_MAX_DIMS], strides[TN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    if (t->ndim > 0) {
        shape[d0] = t->shape[d1];
        shape[d1] = t->shape[d0];
        strides[d0] = t->strides[d1];
        strides[d1] = t->strides[d0];
    }
    int64_t dims[2] = {d0, d1};
    return tn__view_node(&tn__transpose_kind, tn__share(t, t->ndim, shape, strides, t->offset), t,
                         dims, 2);
}

tn_tensor *tn_permute(tn_tensor *t, const int *dims)
{
    if (tn__check_arg("permute", "input", t))
        return NULL;
    if (t->ndim > 0 && !dims)
        return TN__FAIL_NULL(TN_EINVAL, "permute: dims is NULL");
    int64_t shape[TN_MAX_DIMS], strides[TN_MAX_DIMS], perm[TN_MAX_DIMS];
    bool seen[TN_MAX_DIMS] = {false};
    for (int d = 0; d < t->ndim; d++) {
        int s = tn__wrap_dim(dims[d], t->ndim);
        if (s < 0 || seen[s])
            return TN__FAIL_NULL(TN_EINVAL, "permute: dims is not a permutation of %d dims (dim %d)",
                                 t->ndim, dims[d]);
        seen[s] = true;
        perm[d] = s;
        shape[d] = t->shape[s];
        strides[d] = t->strides[s];
    }
    return tn__view_node(&tn__permute_kind, tn__share(t, t->ndim, shape, strides, t->offset), t,
                         perm, t->ndim);
}

tn_tensor *tn_narrow(tn_tensor *t, int dim, int64_t start, int64_t length)
{
    if (tn__check_arg("narrow", "input", t))
        return NULL;
    int d = tn__wrap_dim(dim, t->ndim);
    if (d < 0 || t->ndim == 0)
        return TN__FAIL_NULL(TN_EINVAL, "narrow: dim %d out of range for %d-d input", dim, t->ndim);
    if (start < 0 || length < 0 || start + length > t->shape[d]) {
        char a[96];
        return TN__FAIL_NULL(TN_EINVAL, "narrow: [%ld, %ld) is outside dim %d of %s", (long)start,
                             (long)(start + length), d, tn_shape_str(t, a, sizeof a));
    }
    int64_t shape[TN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[d] = length;
    int64_t args[3] = {d, start, length};
    return tn__view_node(&tn__narrow_kind,
                         tn__share(t, t->ndim, shape, t->strides, t->offset + start * t->strides[d]),
                         t, args, 3);
}

tn_tensor *tn_expand(tn_tensor *t, int ndim, const int64_t *shape)
{
    if (tn__check_arg("expand", "input", t))
        return NULL;
    char a[96], b[96];
    if (ndim < t->ndim || ndim > TN_MAX_DIMS || (ndim > 0 && !shape))
        return TN__FAIL_NULL(TN_EINVAL, "expand: cannot expand %s to %d dims",
                             tn_shape_str(t, a, sizeof a), ndim);
    int64_t target[TN_MAX_DIMS], strides[TN_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int d = 0; d < ndim; d++) {
        int64_t have = d < lead ? 1 : t->shape[d - lead];
        target[d] = shape[d] == -1 && d >= lead ? have : shape[d];
        if (have != target[d] && have != 1)
            return TN__FAIL_NULL(TN_ESHAPE, "expand: cannot expand %s to %s (dim %d)",
                                 tn_shape_str(t, a, sizeof a),
                                 tn__shape_fmt(ndim, shape, b, sizeof b), d);
    }
    tn__broadcast_strides(t, ndim, target, strides);
    return tn__view_node(&tn__expand_kind, tn__share(t, ndim, target, strides, t->offset), t, NULL,
                         0);
}

tn_tensor *tn_contiguous(tn_tensor *t)
{
    if (tn__check_arg("contiguous", "input", t))
        return NULL;
    if (tn_is_contiguous(t))
        return tn_retain(t);
    tn_tensor *out = tn__new_output(t->ndim, t->shape, "contiguous");
    if (!out)
        return NULL;
    tn_copy_to(t, tn_data(out));
    return tn__view_node(&tn__contiguous_kind, out, t, NULL, 0);
}

tn_tensor *tn_detach(tn_tensor *t)
{
    if (tn__check_arg("detach", "input", t))
        return NULL;
    return tn__share(t, t->ndim, t->shape, t->strides, t->offset);
}
