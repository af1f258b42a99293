/*
 * Running a program under the recorder (libprof_preload.so in LD_PRELOAD), for `gradprof run`
 * and `gradprof compare`: the recorder options both take, finding the libraries, starting the
 * program with its environment, and finding the traces it wrote.
 *
 * The recorder in the program names its file from GRADPROF_OUTPUT (%p = its pid), never
 * overwrites (an existing name gets .1, .2, ...), and a forked child or an exec'd image writes a
 * trace of its own. So the traces of a run are found afterwards by listing the names in the
 * output's directory that match the template and were not there before the program started.
 */
#ifndef GRADPROF_TOOLS_RUN_H
#define GRADPROF_TOOLS_RUN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gradprof/vocabulary.h"

/* The recorder options: the getopt_long codes, the table entries and the help lines. */
enum {
    GP_RUN_OPT_STACK_DEPTH = 256,
    GP_RUN_OPT_NO_STACKS,
    GP_RUN_OPT_MIN_STACK,
    GP_RUN_OPT_STACK_SAMPLE,
    GP_RUN_OPT_FLUSH_MS,
    GP_RUN_OPT_CUDA,
    GP_RUN_OPT_TORCH,
    GP_RUN_OPT_NO_TORCH,
    GP_RUN_OPT_END /* the first code free for a command's own options */
};

// clang-format off
#define GP_RUN_LONG_OPTIONS                                                                        \
    {"stack-depth", required_argument, NULL, GP_RUN_OPT_STACK_DEPTH},                             \
    {"no-stacks", no_argument, NULL, GP_RUN_OPT_NO_STACKS},                                        \
    {"min-stack-size", required_argument, NULL, GP_RUN_OPT_MIN_STACK},                            \
    {"stack-sample", required_argument, NULL, GP_RUN_OPT_STACK_SAMPLE},                           \
    {"flush-ms", required_argument, NULL, GP_RUN_OPT_FLUSH_MS},                                    \
    {"cuda", no_argument, NULL, GP_RUN_OPT_CUDA},                                                 \
    {"torch", no_argument, NULL, GP_RUN_OPT_TORCH},                                               \
    {"no-torch", no_argument, NULL, GP_RUN_OPT_NO_TORCH}
// clang-format on

/* The usage lines of the options above, each starting with two spaces, ending with a newline. */
extern const char gp_run_options_help[];

/* What the recorder options set. A field whose have_* is false is left to the environment's
 * GRADPROF_* variable (or the recorder's default). */
typedef struct gp_run_config {
    bool have_depth, have_min, have_sample, have_flush;
    uint64_t depth, min_stack, sample, flush_ms;
    bool cuda;
    int torch; /* the PyTorch helper: 1 --torch, 0 --no-torch, -1 as GRADPROF_TORCH says */
} gp_run_config;

/* What a command starts from: every option left to the environment. */
#define GP_RUN_CONFIG_INIT {.depth = LP_DEFAULT_STACK_DEPTH, .torch = -1}

/* Takes option `c` (a GP_RUN_OPT_* code) with its value into cfg. Returns 0, or prints
 * "gradprof CMD: --option: why" and returns GP_EXIT_USAGE. */
int gp_run_option(const char *cmd, int c, const char *value, gp_run_config *cfg);

/* What every run of a command shares, found once. */
typedef struct gp_run_setup {
    gp_run_config cfg;
    char preload[PATH_MAX];        /* libprof_preload.so, absolute */
    char cupti[PATH_MAX];          /* libprof_cupti.so with --cuda, else "" */
    char python_startup[PATH_MAX]; /* the folder of the Python startup hook, or "" if none */
} gp_run_setup;

/*
 * Finds the preload library ($GRADPROF_PRELOAD, else <gradprof's dir>/../libprof/, else
 * <gradprof's dir>/../lib/gradprof/), with --cuda libprof_cupti.so ($GRADPROF_CUPTI, else next to
 * the preload; warns once when there is no CUDA driver), and the Python startup hook
 * (sitecustomize.py: $GRADPROF_PYTHON_STARTUP, else <gradprof's dir>/../python/startup (the build tree), else
 * <gradprof's dir>/../lib/gradprof/python/startup; "" when none is there). Returns 0, or prints
 * what it tried and returns GP_EXIT_USAGE.
 */
int gp_run_setup_init(const char *cmd, const gp_run_config *cfg, gp_run_setup *s);

/* One run. */
typedef struct gp_run_spec {
    const char *templ;        /* the trace path template (%p = pid), as the user gave it */
    const char *templ_option; /* the option it came from, for messages ("-o") */
    const char *grad_default; /* GRADPROF_GRAD_DEFAULT for the program; NULL: as inherited */
    const char *stdout_path;  /* the program's stdout into this new file; NULL: inherited */
    const char *stderr_path;  /* likewise stderr */
    bool stdin_null;          /* stdin from /dev/null instead of inherited */
    bool same_hash_seed;      /* PYTHONHASHSEED=0 unless the environment sets it: runs to be
                                 compared lay out Python's dicts and sets alike */
    bool no_record;           /* run the program as it is: no preload, no trace (templ unused) */
    bool python_no_stacks;    /* a Python program (gp_run_is_python) that the PyTorch helper may
                                 attach to, with no stack option or GRADPROF_STACK_* variable of
                                 the user's, is recorded without call stacks (GRADPROF_STACK_DEPTH=0,
                                 and GRADPROF_PYTHON_NO_STACKS=1 for the startup hook): gradprof run
                                 only; bench/NOTES.md "PyTorch examples" has the figures */
} gp_run_spec;

typedef struct gp_run_result {
    int status;      /* the wait status */
    int code;        /* what `gradprof run` exits with: the exit status, or 128+N for signal N */
    int interrupted; /* SIGINT, SIGQUIT, SIGTERM or SIGHUP if gradprof got one while the program
                        ran (the last one), else 0 */
    char **traces;   /* the traces written, named as templ names them (a relative template gives
                        relative names), the main process's first, then in version order */
    size_t n_traces;
} gp_run_result;

/*
 * Runs prog (argv, NULL-terminated; found on PATH as execvp does) under the recorder and waits
 * for it (with spec->no_record, as it is: only GRADPROF_GRAD_DEFAULT is set, when spec says, and
 * no trace is looked for). Its environment: this process's, with LD_PRELOAD = the preload
 * library first, GRADPROF_OUTPUT = the absolute template, GRADPROF_ENABLE=1, the recorder
 * options set, with --cuda CUDA_INJECTION64_PATH, the Python startup folder first on PYTHONPATH,
 * GRADPROF_GRAD_DEFAULT when spec->grad_default says and PYTHONHASHSEED when spec->same_hash_seed
 * does. This process's own environment is not changed. While the program runs, ^C and ^\ reach
 * it (gradprof only notes them), and SIGTERM and SIGHUP sent to gradprof are passed on (and
 * noted).
 *
 * Returns 0 once the program ran, whatever its status (in *r; free with gp_run_result_free). Or
 * prints why and returns GP_EXIT_USAGE for a bad template (a missing or unwritable directory, a
 * name too long: ENAMETOOLONG with the lengths) or an output file that cannot be created, 127
 * when prog was not found, 126 when it could not be executed. The traces are found by name: every
 * %p of the template is one pid, then .N suffixes may follow.
 */
int gp_run_program(const char *cmd, const gp_run_setup *s, const gp_run_spec *spec, char **prog,
                   gp_run_result *r);

/* Whether the environment lets gradprof record: GRADPROF_ENABLE unset or "1" gives true, "0"
 * false; any other value warns (naming the variable and the value) and gives true, as the
 * recorder reads only 0 and 1 and gradprof run records unless told 0. */
bool gp_run_enabled(const char *cmd);

/* Whether prog (as execvp would find it on PATH) is a Python program: its name starts with
 * "python", or it is a script whose "#!" line names python (torchrun, pytest, a script run
 * directly). */
bool gp_run_is_python(const char *prog);

/* Frees what *r holds and zeroes it; a zeroed result is a no-op. */
void gp_run_result_free(gp_run_result *r);

/* "exited with status 3", "was killed by signal 15 (Terminated)" (and ", core dumped"). */
void gp_run_describe_status(int status, char *buf, size_t size);

#endif /* GRADPROF_TOOLS_RUN_H */
