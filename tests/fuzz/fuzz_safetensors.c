/*
 * libFuzzer harness: tn_module_load_safetensors on a small MLP (Linear(4,8), ReLU, Linear(8,3))
 * from a file holding the input, with and without allow_extra. A bad file must give an error
 * code, never a crash, a leak or an allocation sized by an unchecked header field.
 */
#include "fuzz_common.h"

#include "gradprof/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tn_module *model;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!model) {
        tn_manual_seed(1);
        model = tn_sequential_new();
        if (!model || tn_sequential_append(model, tn_linear_new(4, 8, true)) != 0 ||
            tn_sequential_append(model, tn_relu_new()) != 0 ||
            tn_sequential_append(model, tn_linear_new(8, 3, true)) != 0)
            abort();
    }
    char path[256];
    if (fuzz_write_file(data, size, ".safetensors", path, sizeof path) != 0)
        return 0;
    (void)tn_module_load_safetensors(model, path, false);
    (void)tn_module_load_safetensors(model, path, true);
    tn_clear_error();
    unlink(path);
    return 0;
}
