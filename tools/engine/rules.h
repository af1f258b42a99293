/*
 * Frame rules: classify untagged allocations by the functions on their stacks (syntax in
 * tools/rules/pytorch.rules, which ships as the default for PyTorch programs).
 */
#ifndef GRADPROF_TOOLS_RULES_H
#define GRADPROF_TOOLS_RULES_H

#include <stdbool.h>
#include <stddef.h>

#include "gradprof/libprof.h"

typedef struct gp_rules gp_rules;

/* Parses rules from text; `origin` names the source in errors ("rules.txt"). Returns NULL with a
 * message naming the origin, the line and the problem in err. */
gp_rules *gp_rules_parse(const char *text, const char *origin, char *err, size_t err_size);
/* Reads and parses a rules file. */
gp_rules *gp_rules_load(const char *path, char *err, size_t err_size);
/* The built-in PyTorch rules (tools/rules/pytorch.rules, compiled in). */
gp_rules *gp_rules_default(void);
void gp_rules_free(gp_rules *r); /* NULL is a no-op */

/* What one frame's function says (a pattern matches its name without the parameter lists, or
 * its short name as the tables show it: gp_function_short_name): `rule`, the index of the first
 * category rule it matches (-1 if none) and that rule's category; `op`, the label an op rule
 * captures from it ("" if none); `boundary`, whether a boundary rule matches it. A stack's
 * classification combines its frames inside the innermost boundary frame (the frames outside it
 * are a caller that hands control to other code, e.g. an interpreter running Python: what they
 * say does not hold inside): the category of the lowest rule index over those frames and the
 * boundary frame itself, the op of the outermost of them that has one. The replay engine also
 * takes every Python frame (a "py:" module) as a boundary. */
typedef struct gp_rule_match {
    int rule;
    lp_category category;
    char op[128];
    bool boundary;
} gp_rule_match;

void gp_rules_match(const gp_rules *r, const char *function, gp_rule_match *m);

/* Classifies a whole stack (function names, innermost first) by combining gp_rules_match of each
 * frame: *category OTHER and op "" when nothing matches. Returns whether any rule matched. */
bool gp_rules_classify(const gp_rules *r, const char *const *functions, size_t n,
                       lp_category *category, char *op_buf, size_t op_size);

/* Glob match ('*' any run, '?' one character), exposed for tests. */
bool gp__glob(const char *pattern, const char *text);

#endif
