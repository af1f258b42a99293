/*
 * End to end on the C examples: each program is recorded with `gradprof run`, then judged with
 * `gradprof check`, `report --format json` and `diff --format json`, as a user would.
 *   - every leak bug fails its gate and its --fixed variant passes it;
 *   - cnn_infer and transformer_infer with grad on hold saved activations that no_grad does not;
 *   - train_mlp shows gradients and optimizer state (Adam: two moments per parameter).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char dir[256];

static int setup(void **state)
{
    snprintf(dir, sizeof dir, "/tmp/gp_examples_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs a shell command, returns its exit status. */
static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Records `example args` into dir/name.gptrace. */
static void record(const char *name, const char *example, const char *args)
{
    assert_int_equal(sh("rm -f '%s/%s.gptrace'*; '%s' run -o '%s/%s.gptrace' -- '%s/%s' %s "
                        ">/dev/null 2>&1",
                        dir, name, GRADPROF_BIN, dir, name, GRADPROF_EXAMPLES, example, args),
                     0);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* The integer after "key": in text, after `after` if given (the JSON is one key per line). */
static uint64_t json_u64(const char *text, const char *after, const char *key)
{
    const char *p = text;
    if (after) {
        p = strstr(p, after);
        if (!p)
            fail_msg("'%s' not found", after);
    }
    char needle[128];
    snprintf(needle, sizeof needle, "\"%s\":", key);
    p = strstr(p, needle);
    if (!p)
        fail_msg("key '%s' not found", key);
    return strtoull(p + strlen(needle), NULL, 10);
}

static const char *retention_gate =
    "--forbid none --detectors growth_across_iterations,graph_escapes_inference";

static void leak_case(const char *example, const char *gate, const char *finding)
{
    record("bug", example, "");
    record("fixed", example, "--fixed");
    assert_int_equal(sh("'%s' check '%s/bug.gptrace' %s > '%s/check.txt'", GRADPROF_BIN, dir, gate,
                        dir),
                     1);
    char path[512];
    snprintf(path, sizeof path, "%s/check.txt", dir);
    if (!strstr(slurp(path), finding))
        fail_msg("%s: the check output does not name %s", example, finding);
    assert_int_equal(sh("'%s' check '%s/fixed.gptrace' %s > /dev/null", GRADPROF_BIN, dir, gate),
                     0);
}

static void test_leak_accumulate(void **state)
{
    leak_case("leak_accumulate", retention_gate, "growth_across_iterations");
    /* the report names the accumulation: an add node per iteration among the growing sites */
    assert_int_equal(sh("'%s' report '%s/bug.gptrace' --top 0 | grep -A40 growth_across | "
                        "grep -q ' add '",
                        GRADPROF_BIN, dir),
                     0);
}

static void test_leak_cached_activation(void **state)
{
    leak_case("leak_cached_activation", retention_gate, "growth_across_iterations");
}

static void test_leak_collect_outputs(void **state)
{
    leak_case("leak_collect_outputs", retention_gate, "growth_across_iterations");
}

static void test_leak_eval_without_no_grad(void **state)
{
    leak_case("leak_eval_without_no_grad", "", "forgot_no_grad");
}

/*
 * mlp_infer, grad on vs off, aligned: L layers of width W, batch B, float32, ReLU between the
 * layers (L - 1 of them). With grad on each ReLU output is saved (by the next linear). A peaks at
 * the end of the forward; at the aligned instant B (no grad) still holds the newest ReLU output,
 * the input of the last linear, and has freed the L - 2 before it. So the saved part of held by
 * graph construction is exactly (L - 2) * B * W * 4; the rest of held is graph nodes (autograd).
 */
static void mlp_case(int layers, int width, int batch)
{
    char a[256], path[512];
    snprintf(a, sizeof a, "--grad --layers %d --width %d --batch %d", layers, width, batch);
    record("on", "mlp_infer", a);
    snprintf(a, sizeof a, "--no-grad --layers %d --width %d --batch %d", layers, width, batch);
    record("off", "mlp_infer", a);
    assert_int_equal(sh("'%s' diff '%s/on.gptrace' '%s/off.gptrace' --format json -o '%s/d.json'",
                        GRADPROF_BIN, dir, dir, dir),
                     0);
    snprintf(path, sizeof path, "%s/d.json", dir);
    const char *d = slurp(path);
    uint64_t act = (uint64_t)batch * (uint64_t)width * 4;
    print_message("mlp L=%d W=%d B=%d\n", layers, width, batch);
    assert_int_equal(json_u64(d, "\n    \"saved\": {", "held_bytes"), (uint64_t)(layers - 2) * act);
    assert_int_equal(json_u64(d, "\n    \"saved\": {", "saved_inferred_bytes"),
                     (uint64_t)(layers - 1) * act);
    assert_int_equal(json_u64(d, "\n    \"activation\": {", "held_bytes"), 0);
    assert_int_equal(json_u64(d, NULL, "b_more_bytes"), 0);
    assert_int_equal(json_u64(d, NULL, "unaligned_bytes"), 0);
}

static void test_mlp_held_exact(void **state)
{
    (void)state;
    mlp_case(8, 512, 64);
    mlp_case(4, 256, 16);
    mlp_case(12, 128, 32);
}

/* grad on vs off: the grad run holds saved activations at its peak and fails the gate. */
static void grad_vs_nograd(const char *example, const char *args)
{
    char a[512];
    snprintf(a, sizeof a, "--grad %s", args);
    record("on", example, a);
    snprintf(a, sizeof a, "--no-grad %s", args);
    record("off", example, a);
    char path[512];
    assert_int_equal(sh("'%s' report '%s/on.gptrace' --format json -o '%s/on.json'", GRADPROF_BIN,
                        dir, dir),
                     0);
    snprintf(path, sizeof path, "%s/on.json", dir);
    uint64_t saved_on = json_u64(slurp(path), "\"saved\": {", "bytes_at_peak");
    assert_true(saved_on > 0);
    assert_int_equal(sh("'%s' report '%s/off.gptrace' --format json -o '%s/off.json'",
                        GRADPROF_BIN, dir, dir),
                     0);
    snprintf(path, sizeof path, "%s/off.json", dir);
    const char *off = slurp(path);
    assert_int_equal(json_u64(off, "\"saved\": {", "max_live"), 0);
    assert_int_equal(json_u64(off, "\"autograd\": {", "max_live"), 0);
    snprintf(path, sizeof path, "%s/on.json", dir);
    const char *on = slurp(path);
    uint64_t graph_on = saved_on + json_u64(on, "\"autograd\": {", "bytes_at_peak") +
                        json_u64(on, "\"gradient\": {", "bytes_at_peak");
    assert_int_equal(sh("'%s' diff '%s/on.gptrace' '%s/off.gptrace' --format json -o '%s/d.json'",
                        GRADPROF_BIN, dir, dir, dir),
                     0);
    snprintf(path, sizeof path, "%s/d.json", dir);
    const char *d = slurp(path);
    uint64_t held = json_u64(d, NULL, "held_by_graph_bytes");
    /* Graph construction cannot hold more than the graph (beyond a few raw bytes that only one
     * run allocated: stdio buffers and the like); alignment finds every tagged saved tensor. */
    uint64_t held_other = json_u64(d, "\n    \"other\": {", "held_bytes");
    assert_true(held_other <= 4096);
    held -= held_other;
    assert_true(held > 0);
    assert_true(held <= graph_on);
    assert_true(json_u64(d, "\n    \"saved\": {", "saved_inferred_bytes") == saved_on);
    assert_int_equal(json_u64(d, NULL, "remainder_bytes"), 0);
    assert_int_equal(sh("'%s' check '%s/on.gptrace' > /dev/null", GRADPROF_BIN, dir), 1);
    assert_int_equal(sh("'%s' check '%s/off.gptrace' > /dev/null", GRADPROF_BIN, dir), 0);
    assert_int_equal(sh("'%s' check '%s/on.gptrace' --forbid none --detectors none --baseline "
                        "'%s/off.gptrace' > /dev/null", GRADPROF_BIN, dir, dir), 1);
}

static void test_cnn_infer(void **state) { grad_vs_nograd("cnn_infer", "--iters 2"); }

static void test_transformer_infer(void **state)
{
    grad_vs_nograd("transformer_infer", "--iters 2");
    /* the diff's layers come in model order (as the forward calls them), not alphabetically */
    char path[512];
    snprintf(path, sizeof path, "%s/d.json", dir);
    const char *layers = strstr(slurp(path), "\"layers\": [");
    assert_non_null(layers);
    static const char *const order[] = {"\"encoder.0.self_attn\"", "\"encoder.0.norm1\"",
                                        "\"encoder.0.linear1\"", "\"encoder.0.linear2\"",
                                        "\"encoder.0.norm2\"", "\"encoder.1\""};
    const char *at = layers;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const char *next = strstr(at, order[i]);
        if (next == NULL)
            fail_msg("layer %s missing or out of model order", order[i]);
        at = next;
    }
}

static void test_train_mlp_adam_state(void **state)
{
    record("train", "train_mlp", "--optimizer adam --steps 3");
    assert_int_equal(sh("'%s' report '%s/train.gptrace' --format json -o '%s/train.json'",
                        GRADPROF_BIN, dir, dir),
                     0);
    char path[512];
    snprintf(path, sizeof path, "%s/train.json", dir);
    const char *j = slurp(path);
    uint64_t params = json_u64(j, "\"parameter\": {", "max_live");
    assert_true(params > 0);
    assert_true(json_u64(j, "\"gradient\": {", "max_live") >= params); /* a .grad per parameter */
    assert_int_equal(json_u64(j, "\"optimizer_state\": {", "max_live"), 2 * params);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leak_accumulate),
        cmocka_unit_test(test_leak_cached_activation),
        cmocka_unit_test(test_leak_collect_outputs),
        cmocka_unit_test(test_leak_eval_without_no_grad),
        cmocka_unit_test(test_cnn_infer),
        cmocka_unit_test(test_transformer_infer),
        cmocka_unit_test(test_mlp_held_exact),
        cmocka_unit_test(test_train_mlp_adam_state),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
