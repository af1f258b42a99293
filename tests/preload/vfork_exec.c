/*
 * vfork children that exec, as posix_spawn and Python's subprocess make them: one whose exec
 * fails and that leaves with _exit(127), one that execs /bin/true. They share the parent's memory
 * (no fork handler runs), so what they do must not end or change the parent's trace. Then the
 * parent allocates again, waits several flush intervals and kills itself with SIGKILL: its trace
 * must hold every allocation and no end of recording at all. Knows nothing of gradprof.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vfork_exec.h"

extern char **environ;

static void pairs(size_t size, int n)
{
    for (int i = 0; i < n; i++) {
        char *p = malloc(size);
        if (p == NULL)
            exit(1);
        p[0] = (char)i;
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
}

static int spawn(const char *path)
{
    char *argv[] = {(char *)path, NULL};
    pid_t pid = vfork();
    if (pid == 0) {
        execve(path, argv, environ);
        _exit(127);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

int main(void)
{
    pairs(VE_BEFORE_SIZE, VE_BEFORE);
    if (spawn("/nonexistent/program") != 127 || spawn("/bin/true") != 0)
        return 1;
    pairs(VE_AFTER_SIZE, VE_AFTER);
    printf("vfork_exec: done\n");
    fflush(stdout);
    usleep(200 * 1000); /* ten flush intervals: everything is written */
    raise(SIGKILL);
    return 1;
}
