/*
 * The tools' error codes, libuv style: a function of tools/ that can fail for reasons a caller
 * may want to tell apart returns 0 or one of these negative codes (and, where it says so, a
 * message naming the file or option in an err buffer); gp_strerror gives the code's sentence
 * and gp_err_name its name. The codes of system errors are the negated errno values (GP_ENOENT
 * == -ENOENT), so gp_error_from_errno is exact for them; gradprof's own codes lie below -4000.
 *
 * Used where the tools load traces (cli.h: gp_cli_load_profile, gp_cli_probe_trace), write
 * files (output.h) and judge a trace (check.h). The rest of tools/ still returns -1 with a
 * message; it moves onto this table when it is touched.
 */
#ifndef GRADPROF_TOOLS_ERROR_H
#define GRADPROF_TOOLS_ERROR_H

#include <errno.h>

/* XX(name, code, sentence) */
#define GP_ERRNO_MAP(XX)                                                                           \
    XX(ENOENT, -ENOENT, "no such file or directory")                                               \
    XX(EACCES, -EACCES, "permission denied")                                                       \
    XX(EISDIR, -EISDIR, "is a directory")                                                          \
    XX(ENAMETOOLONG, -ENAMETOOLONG, "file name too long")                                          \
    XX(ENOMEM, -ENOMEM, "out of memory")                                                           \
    XX(EIO, -EIO, "input/output error")                                                            \
    XX(EINVAL, -EINVAL, "invalid argument")                                                        \
    XX(ENOTTRACE, -4001, "not a gradprof trace")                                                   \
    XX(EVERSION, -4002, "trace format version not supported")                                      \
    XX(ESYMLINK, -4003, "is a symbolic link")                                                      \
    XX(ESAMEFILE, -4004, "is an input of the command")                                             \
    XX(ENOTREG, -4005, "not a regular file")                                                       \
    XX(EINCOMPLETE, -4006, "the trace is incomplete")                                              \
    XX(EUNCLASSIFIED, -4007, "graph memory cannot be told from other memory")

typedef enum gp_error {
    GP_OK = 0,
#define GP__ERROR_ENUM(name, code, text) GP_##name = (code),
    GP_ERRNO_MAP(GP__ERROR_ENUM)
#undef GP__ERROR_ENUM
} gp_error;

/* The sentence of a code ("no such file or directory"); "success" for 0, "unknown error" for a
 * value not in the table. Never NULL; static storage. */
const char *gp_strerror(int err);

/* The code's name ("GP_ENOENT"), "GP_OK" for 0, "GP_UNKNOWN" otherwise. */
const char *gp_err_name(int err);

/* The code for an errno value: the table's own for the errno values in it, GP_ENOENT for
 * ENOTDIR, GP_ESYMLINK for ELOOP (a symbolic link where O_NOFOLLOW refused one), GP_EACCES for
 * EPERM and EROFS, and GP_EIO for every other (0 included: a failure that set no errno). */
int gp_error_from_errno(int errnum);

#endif /* GRADPROF_TOOLS_ERROR_H */
