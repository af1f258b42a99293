/*
 * A program outside the gradprof tree, built against an installed gradprof (tests/install):
 * records its own trace in-process (lp_start with options from the GRADPROF_* variables) while a
 * small Linear+ReLU model runs with grad on, so the trace holds parameters, activations and the
 * tensors saved for backward, tagged by libtensor.
 */
#include <gradprof/libprof.h>
#include <gradprof/tensor.h>

#include <stdio.h>

int main(void)
{
    if (lp_start(NULL) != 0) {
        fprintf(stderr, "consumer: lp_start failed\n");
        return 1;
    }
    tn_module *net = tn_sequential_new();
    tn_sequential_append(net, tn_linear_new(64, 32, true));
    tn_sequential_append(net, tn_relu_new());
    tn_sequential_append(net, tn_linear_new(32, 8, true));
    tn_module_set_name(net, "consumer");
    tn_tensor *x = tn_randn(2, (int64_t[]){16, 64}, LP_CAT_INPUT);
    tn_tensor *y = tn_module_forward(net, x); /* grad on: the graph saves the ReLU output */
    int rc = y != NULL ? 0 : 1;
    if (y == NULL)
        fprintf(stderr, "consumer: %s\n", tn_last_error_message());
    tn_release(y);
    tn_release(x);
    tn_module_free(net);
    lp_stop();
    printf("consumer: done\n");
    return rc;
}
