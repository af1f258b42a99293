/* Frame rules: glob matching, parsing errors, per-frame matches and whole-stack classification,
 * and the built-in PyTorch rules on stacks seen in real libtorch traces. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "rules.h"

static void test_glob(void **state)
{
    assert_true(gp__glob("at::_ops::*::call", "at::_ops::linear::call"));
    assert_true(gp__glob("*Backward*", "torch::autograd::generated::AddmmBackward0"));
    assert_true(gp__glob("c10::alloc_cpu", "c10::alloc_cpu"));
    assert_true(gp__glob("a?c", "abc"));
    assert_true(gp__glob("*", ""));
    assert_false(gp__glob("c10::alloc_cpu", "c10::alloc_cpu2"));
    assert_false(gp__glob("at::_ops::*::call", "at::_ops::linear::redispatch"));
    assert_false(gp__glob("a?c", "ac"));
}

static void test_parse_errors_name_the_line(void **state)
{
    char err[256];
    gp_rules *r = gp_rules_parse("# ok\nactivation c10::*\nbogus pattern\n", "t.rules", err,
                                 sizeof err);
    assert_null(r);
    assert_non_null(strstr(err, "t.rules:3"));
    assert_non_null(strstr(err, "bogus"));
    r = gp_rules_parse("op at::_ops::linear::call\n", "t.rules", err, sizeof err);
    assert_null(r);
    assert_non_null(strstr(err, "needs a '*'"));
    r = gp_rules_parse("activation a b\n", "t.rules", err, sizeof err);
    assert_null(r);
    assert_non_null(strstr(err, "t.rules:1"));
    assert_null(gp_rules_load("/nonexistent.rules", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent.rules"));
    r = gp_rules_parse("\n   # only comments\n\n", "empty", err, sizeof err);
    assert_non_null(r); /* an empty rule set is valid and matches nothing */
    lp_category c;
    char op[32];
    const char *f[] = {"c10::alloc_cpu(unsigned long)"};
    assert_false(gp_rules_classify(r, f, 1, &c, op, sizeof op));
    assert_int_equal(c, LP_CAT_OTHER);
    gp_rules_free(r);
    gp_rules_free(NULL);
}

static void test_first_rule_wins_and_outermost_op(void **state)
{
    char err[256];
    gp_rules *r = gp_rules_parse("gradient torch::autograd::Engine::*\n"
                                 "activation c10::alloc_cpu\n"
                                 "op at::_ops::*::call\n",
                                 "t", err, sizeof err);
    assert_non_null(r);
    /* innermost first: storage made by mm inside matmul inside backward */
    const char *backward[] = {"c10::alloc_cpu(unsigned long)",
                              "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)",
                              "at::_ops::matmul::call(at::Tensor const&, at::Tensor const&)",
                              "torch::autograd::Engine::evaluate_function(int)"};
    lp_category c;
    char op[64];
    assert_true(gp_rules_classify(r, backward, 4, &c, op, sizeof op));
    assert_int_equal(c, LP_CAT_GRADIENT); /* rule order, not frame order */
    assert_string_equal(op, "matmul");    /* the outermost op */
    assert_true(gp_rules_classify(r, backward, 3, &c, op, sizeof op));
    assert_int_equal(c, LP_CAT_ACTIVATION);
    /* a frame with parameter lists containing parentheses in templates */
    gp_rule_match m;
    gp_rules_match(r, "at::_ops::relu::call(at::Tensor const&)", &m);
    assert_int_equal(m.rule, -1);
    assert_string_equal(m.op, "relu");
    gp_rules_match(r, "c10::alloc_cpu", &m);
    assert_int_equal(m.rule, 1);
    assert_int_equal(m.category, LP_CAT_ACTIVATION);
    gp_rules_free(r);
}

/* A pattern matches the name without its parameters, templates kept, or the name as the tables
 * show it (gp_function_short_name), as a user copies it from a report. */
static void test_names_as_shown(void **state)
{
    (void)state;
    char err[256];
    gp_rules *r = gp_rules_parse("activation std::vector::push_back\n"
                                 "temporary std::vector<int>::*\n"
                                 "op ns::Kernel::run_*\n"
                                 "boundary ns::(anonymous*)::enter\n",
                                 "t", err, sizeof err);
    assert_non_null(r);
    gp_rule_match m;
    gp_rules_match(r, "std::vector<long, std::allocator<long> >::push_back(long const&)", &m);
    assert_int_equal(m.rule, 0);
    gp_rules_match(r, "std::vector<int>::reserve(unsigned long)", &m); /* templates kept */
    assert_int_equal(m.rule, 1);
    assert_int_equal(m.category, LP_CAT_TEMPORARY);
    gp_rules_match(r, "void ns::Kernel<float>::run_relu<4>(float*) const", &m);
    assert_int_equal(m.rule, -1);
    assert_string_equal(m.op, "relu");
    gp_rules_match(r, "int ns::(anonymous namespace)::enter<int>(int)", &m);
    assert_true(m.boundary);
    gp_rules_match(r, "std::list<int>::push_back(int const&)", &m);
    assert_int_equal(m.rule, -1);
    assert_string_equal(m.op, "");
    assert_false(m.boundary);
    gp_rules_free(r);
}

static void test_builtin_pytorch_rules(void **state)
{
    gp_rules *r = gp_rules_default();
    assert_non_null(r);
    lp_category c;
    char op[64];
    /* a linear layer's output storage (frames as symbolized from Debian's libtorch) */
    const char *linear[] = {"c10::alloc_cpu(unsigned long)",
                            "c10::DefaultCPUAllocator::allocate(unsigned long) const",
                            "at::native::structured_addmm_out_cpu::impl(at::Tensor const&)",
                            "at::_ops::addmm::call(at::Tensor const&, at::Tensor const&)",
                            "at::native::linear(at::Tensor const&, at::Tensor const&)",
                            "at::_ops::linear::call(at::Tensor const&, at::Tensor const&)",
                            "_PyEval_EvalFrameDefault"};
    assert_true(gp_rules_classify(r, linear, 7, &c, op, sizeof op));
    assert_int_equal(c, LP_CAT_ACTIVATION);
    assert_string_equal(op, "aten::linear");
    /* a parameter's gradient accumulator, made when a graph is built */
    const char *acc[] = {"torch::autograd::impl::grad_accumulator(at::Tensor const&)",
                         "torch::autograd::impl::gradient_edge(at::Tensor const&)",
                         "at::_ops::t::call(at::Tensor const&)",
                         "at::native::linear(at::Tensor const&, at::Tensor const&)",
                         "at::_ops::linear::call(at::Tensor const&, at::Tensor const&)"};
    assert_true(gp_rules_classify(r, acc, 5, &c, op, sizeof op));
    assert_int_equal(c, LP_CAT_AUTOGRAD);
    assert_string_equal(op, "aten::linear");
    /* a Python saved-tensor hook that autograd calls while it saves a tensor: what the hook's
     * Python code allocates is not graph construction (the eval loop is a boundary) */
    const char *hook[] = {"PyDict_SetDefault", "_PyEval_EvalFrameDefault",
                          "torch::autograd::SavedVariable::SavedVariable(at::Tensor const&, bool)",
                          "at::_ops::relu::call(at::Tensor const&)", "_PyEval_EvalFrameDefault"};
    assert_false(gp_rules_classify(r, hook, 5, &c, op, sizeof op));
    assert_int_equal(c, LP_CAT_OTHER);
    assert_string_equal(op, "");
    /* without the boundary the same frames say autograd, relu */
    assert_true(gp_rules_classify(r, hook + 2, 3, &c, op, sizeof op));
    assert_int_equal(c, LP_CAT_AUTOGRAD);
    assert_string_equal(op, "aten::relu");
    /* ATen struct names: the overload apart, operators whose names hold '_' kept whole */
    static const char *const ops[][2] = {
        {"at::_ops::softmax_int::call(at::Tensor const&, long)", "aten::softmax"},
        {"at::_ops::add_Tensor::call(at::Tensor const&)", "aten::add"},
        {"at::_ops::lstm_input::call(at::Tensor const&)", "aten::lstm"},
        {"at::_ops::flatten_using_ints::call(at::Tensor const&)", "aten::flatten"},
        {"at::_ops::max_pool2d_with_indices::call(at::Tensor const&)",
         "aten::max_pool2d_with_indices"},
        {"at::_ops::dense_dim::call(at::Tensor const&)", "aten::dense_dim"},
        {"at::_ops::no_such_operator_x::call()", "aten::no_such_operator_x"}};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        assert_true(gp_rules_classify(r, &ops[i][0], 1, &c, op, sizeof op));
        assert_string_equal(op, ops[i][1]);
    }
    /* nothing torch-like */
    const char *plain[] = {"PyDict_SetDefault", "_PyEval_EvalFrameDefault"};
    assert_false(gp_rules_classify(r, plain, 2, &c, op, sizeof op));
    assert_int_equal(c, LP_CAT_OTHER);
    assert_string_equal(op, "");
    gp_rules_free(r);
}

/* A boundary frame: the frames outside it (its callers) do not classify what happens inside;
 * only the innermost boundary counts, and the boundary frame's own rules still apply. */
static void test_boundary(void **state)
{
    char err[256];
    gp_rules *r = gp_rules_parse("gradient torch::autograd::Engine::*\n"
                                 "activation c10::alloc_cpu\n"
                                 "op at::_ops::*::call\n"
                                 "boundary _PyEval_EvalFrameDefault\n",
                                 "t", err, sizeof err);
    assert_non_null(r);
    gp_rule_match m;
    gp_rules_match(r, "_PyEval_EvalFrameDefault", &m);
    assert_true(m.boundary);
    assert_int_equal(m.rule, -1);
    gp_rules_match(r, "c10::alloc_cpu", &m);
    assert_false(m.boundary);
    lp_category c;
    char op[64];
    /* a Python hook the engine runs: its own allocation is not the engine's gradient, and the
     * op outside the interpreter is not its op */
    const char *hook[] = {"c10::alloc_cpu(unsigned long)", "at::_ops::add::call(at::Tensor const&)",
                          "_PyEval_EvalFrameDefault",
                          "at::_ops::matmul::call(at::Tensor const&, at::Tensor const&)",
                          "torch::autograd::Engine::evaluate_function(int)"};
    assert_true(gp_rules_classify(r, hook, 5, &c, op, sizeof op));
    assert_int_equal(c, LP_CAT_ACTIVATION);
    assert_string_equal(op, "add");
    /* inside the boundary nothing matches: nothing is said */
    const char *plain[] = {"PyList_New", "_PyEval_EvalFrameDefault",
                           "torch::autograd::Engine::evaluate_function(int)"};
    assert_false(gp_rules_classify(r, plain, 3, &c, op, sizeof op));
    assert_int_equal(c, LP_CAT_OTHER);
    assert_string_equal(op, "");
    /* without the boundary, the engine's rule reaches the innermost frame */
    assert_true(gp_rules_classify(r, plain + 2, 1, &c, op, sizeof op));
    assert_int_equal(c, LP_CAT_GRADIENT);
    gp_rules_free(r);
    /* the built-in rules have the interpreter's boundary */
    r = gp_rules_default();
    gp_rules_match(r, "_PyEval_EvalFrameDefault", &m);
    assert_true(m.boundary);
    gp_rules_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glob),
        cmocka_unit_test(test_parse_errors_name_the_line),
        cmocka_unit_test(test_first_rule_wins_and_outermost_op),
        cmocka_unit_test(test_names_as_shown),
        cmocka_unit_test(test_builtin_pytorch_rules),
        cmocka_unit_test(test_boundary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
