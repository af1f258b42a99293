/*
 * gradprof: the command-line front end. `gradprof COMMAND [options]` dispatches to the commands
 * in commands.h; `gradprof help [COMMAND]`, `--help` and `--version` are handled here.
 */
#include "cli.h"
#include "commands.h"
#include "gradprof/trace_format.h"

#include <stdio.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#ifndef GRADPROF_VERSION
#define GRADPROF_VERSION "unknown"
#endif

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", gp_cmd_run, "run a program under the profiler and record a trace"},
    {"report", gp_cmd_report, "peak, live memory by category, top sites, leaks, saved tensors"},
    {"diff", gp_cmd_diff, "compare two traces (grad on vs off): what graph construction holds"},
    {"check", gp_cmd_check,
     "CI gate: fail on graph memory, peak, growth, leaks, detector findings"},
    {"compare", gp_cmd_compare,
     "run a program twice, grad as it is and grad off from the start, and diff the runs"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out)
{
    fprintf(out, "usage: gradprof COMMAND [options]\n"
                 "\n"
                 "A memory profiler for ML inference that shows what autograd holds.\n"
                 "\n"
                 "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "  %-8s %s\n", "help", "help COMMAND: the options of a command");
    fprintf(out,
            "\n"
            "options:\n"
            "  -h, --help     this help\n"
            "  --version      the version of gradprof and of the trace format it reads\n"
            "\n"
            "Run 'gradprof COMMAND --help' for a command's options. Exit status: 0 ok, 1 check\n"
            "failed, 2 usage error or unreadable input, 3 the runs do not compare ('diff\n"
            "--require-aligned', 'compare'); 'run' exits with the program's status.\n");
}

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static int unknown_command(const char *name)
{
    return gp_cli_error(NULL,
                        "unknown command '%s' (commands: run, report, diff, check, compare, help; "
                        "see 'gradprof --help')",
                        name);
}

int main(int argc, char **argv)
{
#ifdef __GLIBC__
    /* The analysers' tables are few and large, grown by doubling (each step frees the smaller
     * block) and freed when a load is done with them. A fixed threshold keeps every block of
     * 1 MiB or more in its own mapping: freed, it goes back to the system, and it grows by mremap.
     * glibc's adaptive threshold would rise to the largest block freed so far and put the next
     * ones on the heap, where the holes they leave stay resident (60 MiB of a PyTorch diff).
     * The heap below them is never trimmed: a diff frees A's small blocks and makes as many for B,
     * which would fault the same pages in again (3-4% of a diff where faults are dear). */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, -1);
#endif
    if (argc < 2) {
        usage(stderr);
        return GP_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0) {
        usage(stdout);
        return GP_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("gradprof %s (trace format %d.%d)\n", GRADPROF_VERSION, GP_VERSION_MAJOR,
               GP_VERSION_MINOR);
        return GP_EXIT_OK;
    }
    if (strcmp(name, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return GP_EXIT_OK;
        }
        const command *c = find_command(argv[2]);
        if (!c)
            return unknown_command(argv[2]);
        char *help_argv[] = {(char *)c->name, "--help", NULL};
        return c->fn(2, help_argv);
    }
    if (name[0] == '-')
        return gp_cli_error(NULL,
                            "unknown option '%s'; a command comes first (see 'gradprof "
                            "--help')",
                            name);
    const command *c = find_command(name);
    if (!c)
        return unknown_command(name);
    return c->fn(argc - 1, argv + 1);
}
