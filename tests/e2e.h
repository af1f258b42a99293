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

/* Whether /usr/bin/python3 (the interpreter with torch, and an independent JSON parser) is
 * there. */
bool e2e_have_python(void);

#endif
