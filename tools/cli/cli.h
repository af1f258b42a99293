/*
 * Shared helpers of the gradprof commands: exit codes, option values (sizes, counts, category
 * lists), error and warning lines, and loading a profile with a warning about what a damaged
 * trace lost. (JSON escaping and table helpers are in render_common.h.)
 *
 * Messages: every error is one line on stderr, "gradprof CMD: ...", naming the option or file and
 * the bad value. Parsers write such a message (without the "gradprof CMD: " prefix) into err.
 */
#ifndef GRADPROF_TOOLS_CLI_H
#define GRADPROF_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis.h"
#include "error.h"

struct gp_output;

/* Exit codes of every command. */
enum {
    GP_EXIT_OK = 0,    /* done; check: every rule passed */
    GP_EXIT_FAIL = 1,  /* check: at least one violation */
    GP_EXIT_USAGE = 2, /* bad command line, or input that cannot be read */
    GP_EXIT_DIVERGED = 3, /* diff --require-aligned, compare: the runs are not one program */
};

/*
 * Parses a byte size: a non-negative decimal number, optionally with a fraction, and an optional
 * unit, case-insensitive, optionally after one space:
 *   (none) or B        bytes (a size without a unit must be a whole number)
 *   KB MB GB TB        powers of 1000
 *   KiB MiB GiB TiB    powers of 1024, and so are the single letters K M G T
 * So "0", "512", "64k" (65536), "100MB" (100000000), "1.5GiB" (1610612736). A fraction is rounded
 * to the nearest byte. Returns 0 with *out set, or -1 with a message in err for an empty, negative,
 * malformed or too large (over 2^64 - 1 bytes) value or an unknown unit.
 */
int gp_parse_size(const char *text, uint64_t *out, char *err, size_t err_size);

/* Parses a whole decimal number in [min, max] (digits only). 0 or -1 with a message in err. */
int gp_parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out, char *err,
                  size_t err_size);

/*
 * Parses a comma-separated list of category names (lp_category_parse: case-insensitive) into
 * set[]; the whole list is checked before set[] is written. "none" or "" gives the empty set.
 * Returns 0, or -1 with a message in err naming the bad element and listing the categories.
 */
int gp_parse_categories(const char *text, bool set[LP_CAT_COUNT], char *err, size_t err_size);

/*
 * Parses a --detectors value: "all", "none" (or ""), or a comma-separated list of finding kinds
 * (gp_finding_kind_name: graph_without_grad, forgot_no_grad, ...) into set[]; the whole list is
 * checked before set[] is written. Returns 0, or -1 with a message in err naming the bad element
 * and listing the kinds.
 */
int gp_parse_detectors(const char *text, bool set[GP_FIND_KIND_COUNT], char *err,
                       size_t err_size);

/* Prints "gradprof CMD: <message>" on stderr; returns GP_EXIT_USAGE. */
int gp_cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "gradprof CMD: warning: <message>" on stderr. */
void gp_cli_warn(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Reports what getopt_long() returned for a bad option (call it with opterr = 0 and an optstring
 * starting with ':', after '+' if any): '?' is an unknown option, ':' an option without its value.
 * Prints "gradprof CMD: unknown option '--x' (see 'gradprof CMD --help')" or similar; returns
 * GP_EXIT_USAGE.
 */
int gp_cli_bad_option(const char *cmd, int c, char **argv);

/* Resolves a --rules value: NULL (option absent) gives the built-in PyTorch frame rules, "none"
 * gives no rules, anything else is a rules file to load. Sets *out (owned by the CLI, lives until
 * exit) and returns 0, or prints an error naming the file and returns GP_EXIT_USAGE. */
int gp_cli_rules(const char *cmd, const char *value, const struct gp_rules **out);

/*
 * Checks that `path` can be read as a trace before the replay opens it: the path's length, that
 * it exists and is not a directory, and for a regular file that it opens, starts with a gradprof
 * file header and has a format version this gradprof reads (a pipe or a device is left to the
 * reader, which reads it once). Returns 0, or GP_ENAMETOOLONG, GP_ENOENT, GP_EACCES, GP_EISDIR, GP_ENOTTRACE
 * (empty, too short, bad magic), GP_EVERSION or GP_EIO (error.h) with a message naming the file
 * in err.
 */
int gp_cli_probe_trace(const char *path, char *err, size_t err_size);

/*
 * Warns on stderr, once each, about what the analysis of a loaded trace could not see: a damaged
 * trace (where reading stopped, why, the bytes lost and the events recovered), a trace whose
 * program did not finish recording (how it ended, from META end_reason when the recorder wrote
 * one: exec'd, killed by signal N; else "no end record"), events the recorder dropped.
 */
void gp_cli_warn_trace(const char *cmd, const gp_profile *p);

/* Warns "cannot judge: ..." (check.h: gp_check_classified) when graph memory cannot be told from
 * other memory in p, as check says it. */
void gp_cli_warn_unclassified(const char *cmd, const gp_profile *p);

/*
 * Loads the profile of the trace at `path` (gp_cli_probe_trace, then gp_profile_load). Returns 0
 * after the warnings of gp_cli_warn_trace (none with gp_cli_load_profile_quiet), or prints
 * "gradprof CMD: <what is wrong with the file>" and returns its code (error.h: GP_ENOENT,
 * GP_ENOTTRACE, GP_EVERSION, GP_ENOMEM, GP_EIO, ...); a command exits GP_EXIT_USAGE then.
 */
int gp_cli_load_profile(const char *cmd, const char *path, const gp_analysis_options *opts,
                        gp_profile **out);
int gp_cli_load_profile_quiet(const char *cmd, const char *path, const gp_analysis_options *opts,
                              gp_profile **out);

/*
 * Opens the output file `path` of a command (NULL: standard output) through output.h, naming the
 * option it came from in the message ("gradprof report: -o: '/etc/x' is a symbolic link; ...").
 * Returns 0, or prints the error and returns GP_EXIT_USAGE.
 */
int gp_cli_output_open(const char *cmd, const char *option, const char *path,
                       const char *const *inputs, size_t n_inputs, struct gp_output *o);
/* Finishes it (gp_output_close, with the writer's result). 0, or prints and returns
 * GP_EXIT_USAGE. */
int gp_cli_output_close(const char *cmd, struct gp_output *o, int write_rc);

#endif /* GRADPROF_TOOLS_CLI_H */
