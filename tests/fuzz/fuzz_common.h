/*
 * Helpers shared by the libFuzzer harnesses: the input written to a private temporary file, for
 * the APIs that read files by path.
 */
#ifndef GRADPROF_FUZZ_COMMON_H
#define GRADPROF_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes data to a fresh file under $TMPDIR (or /tmp) and returns its path in path[]; the caller
 * unlinks it. Returns 0, or -1 if the file cannot be written (the harness then skips the input). */
static int fuzz_write_file(const uint8_t *data, size_t size, const char *suffix, char *path,
                           size_t path_size)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    snprintf(path, path_size, "%s/gpfuzz-%ld-XXXXXX%s", dir, (long)getpid(), suffix);
    int fd = mkstemps(path, (int)strlen(suffix));
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0) {
            close(fd);
            unlink(path);
            return -1;
        }
        done += (size_t)n;
    }
    close(fd);
    return 0;
}

#endif
