/*
 * gradprof run: runs a program under libprof_preload.so and says where its trace(s) went. The
 * running and the finding of the traces are in run.c (run.h), shared with `gradprof compare`.
 */
#define _GNU_SOURCE /* asprintf */
#include "cli.h"
#include "commands.h"
#include "run.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define CMD "run"

static const char usage_head[] =
    "usage: gradprof run [options] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Runs PROGRAM with libprof_preload.so in LD_PRELOAD: every allocation is recorded with its\n"
    "call stack (and a program that uses the gradprof tensor library gets its exact tags) into a\n"
    "trace file, which 'gradprof report', 'diff' and 'check' read.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE        trace path; %p is replaced by the pid of the process writing it\n"
    "                           (default gradprof.PROGRAM.%p.gptrace; with RANK=R in the\n"
    "                           environment, as torchrun sets it, "
    "gradprof.PROGRAM.rankR.%p.gptrace).\n"
    "                           A trace is never overwritten: a name without %p that exists\n"
    "                           (or FILE.N of an earlier run) is refused. A forked child writes\n"
    "                           its own trace (its pid, or .PID appended), an exec'd program\n"
    "                           FILE.1, .2, .... Every %p is the same pid; a name over 255 bytes\n"
    "                           once %p is a pid is refused\n";
/* ... gp_run_options_help ... */
static const char usage_tail[] =
    "  -h, --help               this help\n"
    "\n"
    "SIZE: bytes, or a number with a unit: 64k, 1.5MiB (K M G T = KiB MiB GiB TiB, powers of\n"
    "1024), 100MB (KB MB GB TB, powers of 1000).\n"
    "\n"
    "The preload library is $GRADPROF_PRELOAD if set, else <gradprof's dir>/../libprof/\n"
    "libprof_preload.so (build tree), else <gradprof's dir>/../lib/gradprof/libprof_preload.so.\n"
    "Other GRADPROF_* variables in the environment are passed on (see the README); with\n"
    "GRADPROF_ENABLE=0 the program runs without recording (one line says so), and a value\n"
    "other than 0 or 1 is warned about and recorded with.\n"
    "PYTHONPATH gets gradprof's Python startup hook first (python/startup/sitecustomize.py in\n"
    "the build tree or lib/gradprof, or $GRADPROF_PYTHON_STARTUP): when a Python program\n"
    "imports torch it attaches gradprof's PyTorch helper (unless --no-torch or\n"
    "GRADPROF_TORCH=0): module regions, the tags of parameters, saved tensors and .grad, an\n"
    "iteration mark at each call of the model and an inference region around each call in\n"
    "eval mode, with no change to the program. With GRADPROF_GRAD_DEFAULT=off a PyTorch program\n"
    "starts with grad off, as a program of the gradprof tensor library does. The hook then\n"
    "runs the program's own sitecustomize, if any. A Python program (its name starts with\n"
    "python, or its #! line names python) is recorded without call stacks unless a stack\n"
    "option, a GRADPROF_STACK_* variable or --no-torch says otherwise: the helper's tags say\n"
    "what its tensors are, and stacks cost it 1.6-2.7x its time (bench/NOTES.md).\n"
    "\n"
    "Exit status: PROGRAM's; 128+N if signal N killed it; 127 if PROGRAM was not found, 126 if\n"
    "it could not be executed; 2 for a bad option or a missing preload library.\n";

int gp_cmd_run(int argc, char **argv)
{
    static const struct option longs[] = {
        {"output", required_argument, NULL, 'o'},
        GP_RUN_LONG_OPTIONS,
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *output = NULL;
    gp_run_config cfg = GP_RUN_CONFIG_INIT;
    int c, rc;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+:o:h", longs, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (!*optarg)
                return gp_cli_error(CMD, "-o: empty file name");
            output = optarg;
            break;
        case 'h':
            fputs(usage_head, stdout);
            fputs(gp_run_options_help, stdout);
            fputs(usage_tail, stdout);
            return GP_EXIT_OK;
        default:
            if (c >= GP_RUN_OPT_STACK_DEPTH && c < GP_RUN_OPT_END) {
                if ((rc = gp_run_option(CMD, c, optarg, &cfg)))
                    return rc;
                break;
            }
            return gp_cli_bad_option(CMD, c, argv);
        }
    }
    if (optind >= argc)
        return gp_cli_error(CMD, "no program to run (usage: gradprof run [options] -- PROGRAM "
                                 "[ARGS...])");
    char **prog = argv + optind;

    bool record = gp_run_enabled(CMD);
    if (!record)
        fprintf(stderr,
                "gradprof %s: GRADPROF_ENABLE=0 in the environment: running %s without recording "
                "(no trace; unset it to record)\n",
                CMD, prog[0]);
    gp_run_setup setup = {0};
    if (record && (rc = gp_run_setup_init(CMD, &cfg, &setup)))
        return rc;
    char *templ = NULL;
    if (output) {
        templ = strdup(output);
    } else { /* a process of a job (torchrun & co. set RANK) names its rank */
        const char *base = strrchr(prog[0], '/'), *rank = getenv("RANK");
        size_t digits = rank ? strspn(rank, "0123456789") : 0;
        bool ranked = digits > 0 && digits <= 9 && rank[digits] == '\0';
        if (asprintf(&templ, "gradprof.%s.%s%s%s%%p.gptrace", base ? base + 1 : prog[0],
                     ranked ? "rank" : "", ranked ? rank : "", ranked ? "." : "") < 0)
            templ = NULL;
    }
    if (!templ)
        return gp_cli_error(CMD, "out of memory");
    gp_run_spec spec = {
        .templ = templ, .templ_option = "-o", .no_record = !record, .python_no_stacks = true};
    gp_run_result r;
    if ((rc = gp_run_program(CMD, &setup, &spec, prog, &r))) {
        free(templ);
        return rc;
    }
    if (WIFSIGNALED(r.status)) {
        char how[128];
        gp_run_describe_status(r.status, how, sizeof how);
        gp_cli_error(CMD, "%s %s", prog[0], how);
    }
    if (!record) {
        /* said above */
    } else if (r.n_traces == 0) {
        gp_cli_warn(CMD,
                    "no trace was written to %s (a static or setuid program, or one that "
                    "clears LD_PRELOAD, is not profiled; see the messages above)",
                    templ);
    } else if (r.n_traces <= 4) {
        fprintf(stderr, "gradprof: trace written to ");
        for (size_t i = 0; i < r.n_traces; i++)
            fprintf(stderr, "%s%s", i ? ", " : "", r.traces[i]);
        fputc('\n', stderr);
    } else { /* a program that forks hundreds of workers: the first three and the last named */
        fprintf(stderr,
                "gradprof: %zu traces written (each process the program started writes its "
                "own): %s, %s, %s, ..., %s\n",
                r.n_traces, r.traces[0], r.traces[1], r.traces[2], r.traces[r.n_traces - 1]);
    }
    int code = r.code;
    gp_run_result_free(&r);
    free(templ);
    return code;
}
