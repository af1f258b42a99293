/*
 * compare_prog: a small tensor-library program for test_compare (tests/test_compare.c), which
 * runs it under `gradprof compare`. A 2-layer Linear+ReLU MLP on a seeded input, under whatever
 * grad mode the thread starts with (no scope of its own), prints a checksum of the output: the
 * same with grad on and off. Options make it diverge between the runs:
 *
 *   --print-grad          also print whether grad is enabled, in main and in a new thread
 *   --fail-without-grad   exit 4 (with a line on stderr) when grad is off
 *   --exit N              exit N after the work, whatever the grad mode
 *   --worker              first fork a worker that makes 20000 small allocations, more than
 *                         the MLP (its trace is the larger), and wait for it
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gradprof/tensor.h"

static void *thread_grad(void *arg)
{
    *(bool *)arg = tn_is_grad_enabled();
    return NULL;
}

int main(int argc, char **argv)
{
    bool print_grad = false, fail_without_grad = false, worker = false;
    int exit_code = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--print-grad") == 0) {
            print_grad = true;
        } else if (strcmp(argv[i], "--fail-without-grad") == 0) {
            fail_without_grad = true;
        } else if (strcmp(argv[i], "--worker") == 0) {
            worker = true;
        } else if (strcmp(argv[i], "--exit") == 0 && i + 1 < argc) {
            exit_code = atoi(argv[++i]);
        } else {
            fprintf(stderr, "compare_prog: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (worker) {
        pid_t pid = fork();
        if (pid == 0) {
            for (int i = 0; i < 20000; i++)
                free(malloc(16 + (size_t)i % 64));
            _exit(0);
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0)
            return 1;
    }

    tn_manual_seed(1);
    tn_module *net = tn_sequential_new();
    tn_sequential_append(net, tn_linear_new(32, 64, true));
    tn_sequential_append(net, tn_relu_new());
    tn_sequential_append(net, tn_linear_new(64, 8, true));
    tn_module_set_name(net, "net");
    tn_module_train(net, false);
    tn_tensor *x = tn_randn(2, (const int64_t[]){16, 32}, LP_CAT_INPUT);
    tn_tensor *y = x ? tn_module_forward(net, x) : NULL;
    tn_tensor *s = y ? tn_sum(y, 0, NULL, false) : NULL;
    if (!s) {
        fprintf(stderr, "compare_prog: forward failed: %s\n", tn_last_error_message());
        return 1;
    }
    printf("checksum %.4f\n", (double)tn_item(s));
    if (print_grad) {
        bool in_thread = true;
        pthread_t th;
        if (pthread_create(&th, NULL, thread_grad, &in_thread) != 0 || pthread_join(th, NULL) != 0)
            return 1;
        printf("grad enabled: main %s, thread %s\n", tn_is_grad_enabled() ? "yes" : "no",
               in_thread ? "yes" : "no");
    }
    bool grad = tn_is_grad_enabled();
    tn_release(s);
    tn_release(y);
    tn_release(x);
    tn_module_free(net);
    if (fail_without_grad && !grad) {
        fprintf(stderr, "compare_prog: grad is off, giving up\n");
        return 4;
    }
    return exit_code;
}
