/*
 * Allocations in a parent and in three forked children (alloc_fork.h): one child leaves with
 * exit(), one with _exit(), one execs /bin/sh through execle (after a failing execlp). Prints
 * AF_STDOUT on stdout and the children's pids on stderr ("alloc_fork: child<k> <pid>"). Knows
 * nothing of gradprof.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc_fork.h"

static void *alloc(size_t size)
{
    void *p = malloc(size);
    if (p == NULL)
        _exit(99);
    memset(p, 0x5A, size);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

/* Forks; the child runs `body` (which does not return). Returns the child's pid. */
static pid_t spawn(void (*body)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("alloc_fork: fork");
        exit(98);
    }
    if (pid == 0)
        body(arg);
    return pid;
}

static void child_exit(void *parent_block)
{
    void *p[AF_CHILD_EXIT_COUNT];
    for (int i = 0; i < AF_CHILD_EXIT_COUNT; i++)
        p[i] = alloc(AF_CHILD_EXIT);
    for (int i = 0; i < AF_CHILD_EXIT_COUNT; i++)
        free(p[i]);
    free(parent_block); /* inherited from the parent: a free of a block this trace never saw */
    exit(0);
}

static void child_underscore_exit(void *unused)
{
    (void)unused;
    void *p[AF_CHILD_UNDERSCORE_COUNT];
    for (int i = 0; i < AF_CHILD_UNDERSCORE_COUNT; i++)
        p[i] = alloc(AF_CHILD_UNDERSCORE);
    for (int i = 0; i < AF_CHILD_UNDERSCORE_COUNT; i++)
        free(p[i]);
    _exit(0);
}

static void child_exec(void *unused)
{
    (void)unused;
    alloc(AF_CHILD_EXEC); /* still live when the image is replaced */
    /* A failing exec returns and changes nothing (execlp searches PATH). */
    if (execlp("gp-no-such-program", "gp-no-such-program", "x", (char *)NULL) != -1 ||
        errno != ENOENT)
        _exit(96);
    /* execle: the environment after the NULL reaches the shell. */
    extern char **environ;
    char *envp[64];
    int n = 0;
    for (char **e = environ; *e && n < 62; e++)
        envp[n++] = *e;
    envp[n++] = "AF_STATUS=" AF_EXEC_STATUS_TEXT;
    envp[n] = NULL;
    execle("/bin/sh", "sh", "-c", "exit $AF_STATUS", (char *)NULL, envp);
    _exit(127);
}

static int wait_status(pid_t pid)
{
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

int main(void)
{
    void *before[AF_PARENT_BEFORE_COUNT];
    for (int i = 0; i < AF_PARENT_BEFORE_COUNT; i++)
        before[i] = alloc(AF_PARENT_BEFORE);

    void (*bodies[3])(void *) = {child_exit, child_underscore_exit, child_exec};
    int status[3];
    for (int k = 0; k < 3; k++) {
        pid_t pid = spawn(bodies[k], before[0]);
        fprintf(stderr, "alloc_fork: child%d %d\n", k + 1, (int)pid);
        status[k] = wait_status(pid);
    }

    void *after[AF_PARENT_AFTER_COUNT];
    for (int i = 0; i < AF_PARENT_AFTER_COUNT; i++)
        after[i] = alloc(AF_PARENT_AFTER);
    for (int i = 0; i < AF_PARENT_AFTER_COUNT; i++)
        free(after[i]);
    for (int i = 0; i < AF_PARENT_BEFORE_COUNT; i++)
        free(before[i]);
    printf("alloc_fork: children exited %d %d %d\n", status[0], status[1], status[2]);
    return 0;
}
