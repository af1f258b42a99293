/*
 * libFuzzer harness: the frame-rules parser (gp_rules_parse) on the input as text, then matching
 * a few function names against whatever parsed, so patterns and captures are exercised; and the
 * input as a demangled name to shorten (gp_function_short_name, which rules match too).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "symbolize.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[512], shown[64];
    const char *s = gp_function_short_name(text, shown, sizeof shown);
    if (s != text && strlen(s) >= sizeof shown) /* a short name fits the buffer it was given */
        abort();
    gp_rules *r = gp_rules_parse(text, "fuzz.rules", err, sizeof err);
    if (r) {
        static const char *const functions[] = {
            "at::native::add",
            "torch::autograd::SavedVariable::SavedVariable(at::Tensor const&)",
            "at::empty",
            "c10::alloc_cpu",
            "",
            "operator new(unsigned long)",
        };
        gp_rule_match m;
        for (size_t i = 0; i < sizeof functions / sizeof *functions; i++)
            gp_rules_match(r, functions[i], &m);
        lp_category cat;
        char op[64];
        gp_rules_classify(r, functions, sizeof functions / sizeof *functions, &cat, op, sizeof op);
        /* The input itself as a function name. */
        gp_rules_match(r, text, &m);
        gp_rules_free(r);
    }
    /* Glob on two halves of the input: pattern and text. */
    size_t half = size / 2;
    text[half] = '\0';
    (void)gp__glob(text, text + half + (half < size ? 1 : 0));
    free(text);
    return 0;
}
