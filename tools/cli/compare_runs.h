/*
 * The two runs of `gradprof compare` (cmd_compare.c): the files each run writes, named from one
 * base, and the divergence of the runs (exit status, standard output) that stops compare before
 * the diff, with the messages that say where they diverged.
 */
#ifndef GRADPROF_TOOLS_COMPARE_RUNS_H
#define GRADPROF_TOOLS_COMPARE_RUNS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "run.h"

/* The files of one run. */
typedef struct gp_compare_files {
    const char *label; /* "A" or "B" */
    const char *grad;  /* GRADPROF_GRAD_DEFAULT */
    char trace[PATH_MAX], out[PATH_MAX], err[PATH_MAX];
} gp_compare_files;

/* Names the run's trace, stdout and stderr BASE.SUFFIX.{gptrace,stdout,stderr}. Each must fit
 * (ENAMETOOLONG otherwise, with the lengths) and not exist. 0, or prints why ("gradprof CMD: ...")
 * and returns GP_EXIT_USAGE. */
int gp_compare_names(const char *cmd, gp_compare_files *f, const char *base, const char *suffix);

/* Whether the two runs did the same thing: the same exit status, not a failure, and (unless
 * ignore_stdout) the same standard output. 0 when they did; else prints where they diverged and
 * returns the exit code (GP_EXIT_DIVERGED, or the program's status when it failed the same way in
 * both runs). */
int gp_compare_diverged(const char *cmd, const char *prog, bool ignore_stdout,
                        const gp_compare_files *fa, const gp_compare_files *fb,
                        const gp_run_result *ra, const gp_run_result *rb);

/* Prints a line of the program's output on stderr: at most 160 bytes, control characters as
 * '?', "..." when cut; "(end of output)" for NULL. */
void gp_compare_show_line(const char *line, size_t len);

/* Compares two files line by line. Returns 0 if they are the same, 1 if they differ (with the
 * 1-based number of the first differing line in *line_no and both lines, NULL for a file that
 * ended, in *la and *lb with their lengths; free them), -1 if one cannot be read. */
int gp_compare_first_difference(const char *pa, const char *pb, size_t *line_no, char **la,
                                size_t *na, char **lb, size_t *nb);

/* Prints the last non-empty line of the file at path (from its last 4 KiB), if it has one, as
 * "gradprof CMD:   LABEL's stderr ends with: '...'". */
void gp_compare_show_last_line(const char *cmd, const char *label, const char *path);

#endif /* GRADPROF_TOOLS_COMPARE_RUNS_H */
