/*
 * What the end-to-end tests share: they run gradprof and other programs as subprocesses through
 * the shell and read back the files those write.
 */
#ifndef GRADPROF_TESTS_E2E_H
#define GRADPROF_TESTS_E2E_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* Runs `sh -c "( CMD ) >OUT 2>ERR"`, from `dir` when not NULL, CMD formatted like printf.
 * Returns the exit status, 128 + N for a death by signal N, or -1 when it could not run. */
int e2e_shell(const char *dir, const char *out_path, const char *err_path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int e2e_vshell(const char *dir, const char *out_path, const char *err_path, const char *fmt,
               va_list ap) __attribute__((format(printf, 4, 0)));

/* The whole file, NUL-terminated (the caller frees it), its length in *len when len is not NULL;
 * NULL when it cannot be read. */
char *e2e_slurp(const char *path, size_t *len);

/* Writes data to path (created or truncated); false on any error. */
bool e2e_write_file(const char *path, const char *data, size_t len);

/* Prints "---- WHAT ----" and the file (cmocka's print_message), to show why a check failed. */
void e2e_print_file(const char *what, const char *path);

/* A test program's session (test_cli, test_compare): a scratch directory, and the last command's
 * output, which the expectations below show when they fail. */
typedef struct e2e_session {
    char dir[256], out_path[512], err_path[512];
    char *out, *err; /* the last command's stdout and stderr (NULL before the first) */
} e2e_session;

/* Makes the directory /tmp/gradprof_NAME.XXXXXX; 0, or -1 when it cannot. */
int e2e_session_open(e2e_session *s, const char *name);
/* Removes the directory and forgets the output; 0, or -1 when rm fails. */
int e2e_session_close(e2e_session *s);
/* e2e_shell in the session's directory, stdout and stderr read back into s->out and s->err. */
int e2e_sh(e2e_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the last command's stdout and stderr. */
void e2e_show(const e2e_session *s);
/* Fail the test, showing the last command's output, unless hay (not NULL) has / lacks needle. */
void e2e_contains(const e2e_session *s, const char *hay, const char *needle);
void e2e_lacks(const e2e_session *s, const char *hay, const char *needle);
/* Fails the test, showing the last command's output, unless rc == want. */
void e2e_expect_rc(const e2e_session *s, int rc, int want);
/* Fails the test unless stderr is exactly one line and has `prefix`: how usage errors read. */
void e2e_one_line_error(const e2e_session *s, const char *prefix);

/* Whether /usr/bin/python3 (the interpreter with torch, and an independent JSON parser) is
 * there. */
bool e2e_have_python(void);

/* Short names for a test program with one session: it defines E2E_SESSION as that session's
 * variable before including this header (test_cli, test_compare). sh runs `sh -c CMD` in the
 * session's directory, its stdout and stderr into .out and .err, and returns the exit status. */
#ifdef E2E_SESSION
#define sh(...) e2e_sh(&E2E_SESSION, __VA_ARGS__)
#define show() e2e_show(&E2E_SESSION)
#define contains(hay, needle) e2e_contains(&E2E_SESSION, hay, needle)
#define lacks(hay, needle) e2e_lacks(&E2E_SESSION, hay, needle)
#define expect_rc(rc, want) e2e_expect_rc(&E2E_SESSION, rc, want)
#endif

#endif
