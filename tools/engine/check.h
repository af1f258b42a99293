/*
 * The CI gate's engine: rules in (gp_check_rules), a verdict and the violations out
 * (gp_check_result). It only reads a gp_profile (and, for the baseline rule, the aligned diff
 * against a grad-off run); it prints nothing and keeps no state, so it is tested without the
 * command line. The writers (text, JSON, JUnit XML) are in render (render.h: gp_render_check_*),
 * the options in tools/cli/cmd_check.c.
 *
 * Rules. Each evaluated rule has zero or more violations, or is skipped with a reason:
 *   forbid CAT          bytes that entered category CAT over the run (allocated, or retagged
 *                       into it as SAVED always is): one rule per forbidden category;
 *   forbid CAT in R     with regions: bytes that entered CAT while region R was open
 *                       (gp_region_stats.allocated_by_category), instead of the whole run;
 *   max-peak [in R]     the peak live bytes (in R: the most live while inside it) > max_peak;
 *   max-growth          live bytes at the last mark minus the first > max_growth (skipped with
 *                       fewer than 2 marks);
 *   no-leaks            bytes still live at the end of the trace;
 *   detector KIND       every gradient-leak finding of an enabled detector kind;
 *   baseline B          the graph memory this run holds that the grad-off run B does not, by the
 *                       aligned diff: saved for backward (inferred) plus held graph nodes and
 *                       gradients, over baseline_slack.
 *
 * Judging. A gate never passes what it could not judge, so before any rule the engine asks two
 * questions and records a doubt for each "no":
 *   complete?   (gp_check_complete) the trace has metadata, events, a clean end (an END record
 *               and no damage) and lost no events, and its recorder did not stop at an exec or a
 *               fatal signal (META end_reason; absent in older traces: then the END record
 *               decides).
 *   classified? (gp_check_classified; only asked when a rule depends on categories: forbid,
 *               a detector or the baseline) graph memory can be told from other memory: the
 *               bytes allocated that stayed `other` and have no call stack, so that neither a
 *               tag nor a frame rule could say what they were, are at most
 *               GP_CHECK_UNCLASSIFIED_MAX_PERCENT of all bytes allocated, or a tagging source
 *               was attached (some bytes tagged `parameter` or `saved`, which no frame rule
 *               gives: the PyTorch helper in a run without stacks), or one saw every tensor
 *               saved for backward in the process (notes "saves_seen", each "all": the helper
 *               in a DataLoader worker, which calls no model; the startup hook in a Python
 *               process that never imported torch).
 * A doubt the rules accept (allow_incomplete, allow_unclassified) is kept and shown but does not
 * decide the verdict. Verdict: UNJUDGED when a doubt is not accepted (whatever the rules found),
 * else FAILED when a rule has a violation, else PASSED.
 *
 * Items. A violation lists the rows behind it (gp_finding_item: category, op, module, the call
 * stack of its site, bytes, count), largest first, ties in the order the engine met them: the
 * tag keys of a category (with the stack of the key's top_site; untagged memory, op and module
 * "", by call site), a finding's own items, or the diff's rows. At most GP_CHECK_MAX_ITEMS are
 * kept; more_items counts the rest.
 *
 * Ownership: a result owns its rules, violations and item arrays; strings and findings in it are
 * borrowed from the profile (and the diff), which must outlive it. gp_check_result_free(NULL) is
 * a no-op.
 */
#ifndef GRADPROF_TOOLS_CHECK_H
#define GRADPROF_TOOLS_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "analysis.h"
#include "diff.h"

#define GP_CHECK_UNCLASSIFIED_MAX_PERCENT 50
#define GP_CHECK_MAX_ITEMS 100
#define GP_CHECK_DEFAULT_BASELINE_SLACK (64 * 1024)

typedef struct gp_check_rules {
    bool forbid[LP_CAT_COUNT];  /* default: saved, gradient, autograd */
    const char *const *regions; /* borrowed; scope forbid and max-peak (none: the run) */
    size_t n_regions;
    bool has_max_peak, has_max_growth, no_leaks;
    uint64_t max_peak, max_growth;
    bool detectors[GP_FIND_KIND_COUNT]; /* default: all */
    const gp_diff *baseline;            /* borrowed; NULL: no baseline rule */
    uint64_t baseline_slack;            /* default GP_CHECK_DEFAULT_BASELINE_SLACK */
    bool allow_incomplete;              /* accept an incomplete trace (see gp_check_complete) */
    bool allow_unclassified;            /* accept memory that cannot be classified */
} gp_check_rules;

/* The defaults above; nothing else set. */
void gp_check_rules_default(gp_check_rules *r);

/* What the replay must know of rules r before gp_check_run judges its profile: r's regions (if
 * any) become o's inference regions (borrowed from r), and max_growth (if set) o's growth
 * threshold. The rest of o is left as it is. */
void gp_check_analysis_options(const gp_check_rules *r, gp_analysis_options *o);

typedef enum gp_check_kind {
    GP_CHECK_FORBID,
    GP_CHECK_MAX_PEAK,
    GP_CHECK_MAX_GROWTH,
    GP_CHECK_NO_LEAKS,
    GP_CHECK_DETECTOR,
    GP_CHECK_BASELINE,
} gp_check_kind;

/* One violation: what the writers print. Fields that do not apply to its kind are 0 or NULL. */
typedef struct gp_check_violation {
    gp_check_kind kind;
    const char *rule;     /* "forbid", "max-peak", "max-growth", "no-leaks", "baseline", or the
                             detector's finding kind name ("forgot_no_grad") */
    const char *region;   /* the region it is about; "" for the whole run */
    lp_category category; /* forbid: its category; otherwise that of the largest item, or
                             LP_CAT_COUNT when there is none */
    uint64_t bytes;
    uint64_t count; /* buffers behind `bytes` where known, else 0 */
    uint64_t limit; /* max-peak, max-growth, baseline (the slack) */
    bool has_limit;
    uint64_t time_ns;          /* max-peak over the run: when the peak was first reached */
    const gp_finding *finding; /* detector: the finding (the profile's) */
    const gp_iteration *first_mark, *last_mark; /* max-growth (the profile's) */
    size_t n_marks;
    /* baseline: the trace B, the saved-for-backward bytes (inferred) and the number of ops
     * holding them, the held graph nodes and gradients; items[0, n_saved_items) are the saved
     * bytes per op (category saved; at most GP_CHECK_MAX_ITEMS / 2 kept), the rest the held graph
     * nodes and gradients per tag key (count 0: the diff does not count buffers per row) */
    const char *baseline_path;
    uint64_t saved_bytes, held_graph_bytes;
    size_t n_saved_ops, n_saved_items;
    gp_finding_item *items; /* owned */
    size_t n_items;
    size_t more_items; /* rows left out beyond GP_CHECK_MAX_ITEMS */
} gp_check_violation;

/* One rule evaluated (a JUnit testcase): its violations are violations[first, first + n). */
typedef struct gp_check_rule {
    char name[288]; /* "forbid saved", "forbid saved in inference", "max-peak", "detector
                       forgot_no_grad", "baseline nograd.gptrace", ... */
    gp_check_kind kind;
    char skipped[256]; /* non-empty: not evaluated, and why */
    size_t first, n;
} gp_check_rule;

/* What kept the engine from judging the trace. */
typedef struct gp_check_doubt {
    int code;           /* GP_EINCOMPLETE or GP_EUNCLASSIFIED (error.h) */
    const char *option; /* the option that accepts it: "--allow-incomplete", ... */
    bool accepted;      /* the rules accept it: it does not decide the verdict */
    char message[768];  /* one line naming the trace and saying what is missing */
} gp_check_doubt;

typedef enum gp_check_verdict {
    GP_CHECK_PASSED,
    GP_CHECK_FAILED,
    GP_CHECK_UNJUDGED,
} gp_check_verdict;

typedef struct gp_check_result {
    gp_check_verdict verdict;
    const char *path; /* the trace (the profile's path) */
    gp_check_rule *rules;
    size_t n_rules, rules_failed, rules_skipped;
    gp_check_violation *violations;
    size_t n_violations;
    gp_check_doubt doubts[4]; /* the trace incomplete, the baseline incomplete, unclassified,
                               * saves unseen */
    size_t n_doubts;
    /* What to try when the rules judged more than the user likely meant ("" if nothing): a
     * program that trains fails `forbid` over the whole run on its training graphs. */
    char hint[320];
} gp_check_result;

/*
 * Evaluates `rules` on profile p (loaded with the rules' regions as its inference regions and,
 * with max_growth, that as its growth threshold; with a baseline, p is the diff's A). Returns 0
 * with *out set (free with gp_check_result_free), or GP_EINVAL when a region of the rules is not
 * in the trace (err names it and lists the trace's regions), or GP_ENOMEM.
 */
int gp_check_run(const gp_profile *p, const gp_check_rules *rules, gp_check_result **out, char *err,
                 size_t err_size);
void gp_check_result_free(gp_check_result *r);

/* The verdict of a job of n processes, results[i] of process i (none NULL): unjudged if any
 * process is, else failed if any is, else passed. */
gp_check_verdict gp_check_job_verdict(gp_check_result *const *results, size_t n);

/* The name of a violation kind's rule ("forbid", "max-peak", ...; "detector" for detectors). */
const char *gp_check_kind_name(gp_check_kind k);

/*
 * Whether the trace of p is complete (see the top of this file). Returns 0, or GP_EINCOMPLETE
 * with one line in why naming the trace and every way it is incomplete ("'t.gptrace' is
 * incomplete: it has no metadata and no events (a file header only)").
 */
int gp_check_complete(const gp_profile *p, char *why, size_t why_size);

/*
 * Whether graph memory can be told from other memory in p (see the top of this file). Returns 0,
 * or GP_EUNCLASSIFIED with one line in why giving the unclassified bytes, their share and the
 * likely cause. *unclassified (may be NULL) gets the unclassified bytes either way.
 */
int gp_check_classified(const gp_profile *p, uint64_t *unclassified, char *why, size_t why_size);

/*
 * How a recorder's end_reason META value ends a sentence about the program: "exit" or NULL (an
 * older trace) give NULL (nothing to say); "exec" gives "exec'd another program (its new image
 * records a trace of its own)"; "signal 6" gives "was killed by signal 6 (SIGABRT)"; "file size
 * limit N" (the trace reached the program's RLIMIT_FSIZE) says that the recorder stopped there;
 * any other value "ended by '<value>'". Returns buf or NULL.
 */
const char *gp_check_end_reason(const char *end_reason, char *buf, size_t size);

#endif /* GRADPROF_TOOLS_CHECK_H */
