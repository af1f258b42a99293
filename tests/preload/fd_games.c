/*
 * Descriptor games a program may play while gradprof records it (fd_games.h lists its
 * allocations):
 *   fd_games MODE FILE
 * allocates (a second thread allocates all along), plays MODE, allocates again, writes FG_TEXT
 * into FILE and checks that FILE holds exactly that: nobody else wrote into it. MODE is
 *   dup3         open(FILE) and dup2 it onto descriptor 3, as `cmd 3>FILE` does, and write there
 *   devnull      dup2 /dev/null over descriptors 3..20
 *   closefrom    close every descriptor from 3 to the RLIMIT_NOFILE soft limit, one by one
 *   close_range  close_range(3, ~0U, 0)
 *   hijack       find the descriptor whose target ends in ".gptrace" in /proc/self/fd and dup2 FILE
 *                onto it (what a program that reuses "its" descriptor numbers may do by chance);
 *                without one (not profiled), descriptor 1000
 * Prints FG_STDOUT and exits 0 when FILE is intact. Knows nothing of gradprof beyond the suffix.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fd_games.h"

static pthread_barrier_t halfway;

static void touch(void *p, size_t n)
{
    memset(p, 0x5A, n);
    __asm__ volatile("" : : "r"(p) : "memory");
}

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < FG_WORKER; i++) {
        if (i == FG_WORKER / 2)
            pthread_barrier_wait(&halfway); /* the game happens while half is still to come */
        void *p = malloc(FG_WORKER_SIZE);
        if (p == NULL)
            return (void *)1;
        touch(p, 16);
        free(p);
        if (i % 200 == 0)
            usleep(1000);
    }
    return NULL;
}

static int pairs(size_t size, int n)
{
    for (int i = 0; i < n; i++) {
        void *p = malloc(size);
        if (p == NULL)
            return -1;
        touch(p, 16);
        free(p);
    }
    return 0;
}

/* The descriptor /proc/self/fd says is a trace, or -1. */
static int find_trace_fd(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int found = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char link[64], target[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 8)
            continue;
        target[n] = '\0';
        if (strstr(target, ".gptrace") != NULL)
            found = atoi(e->d_name);
    }
    closedir(d);
    return found;
}

/* Plays `mode`; returns the descriptor to write FG_TEXT to, or -1. */
static int play(const char *mode, const char *file)
{
    if (strcmp(mode, "dup3") == 0) {
        int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || (fd != 3 && (dup2(fd, 3) != 3 || close(fd) != 0)))
            return -1;
        return 3;
    }
    if (strcmp(mode, "devnull") == 0) {
        int null = open("/dev/null", O_WRONLY);
        for (int fd = 3; fd <= 20; fd++)
            if (fd != null && dup2(null, fd) != fd)
                return -1;
        return open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    if (strcmp(mode, "closefrom") == 0) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
            return -1;
        for (rlim_t fd = 3; fd < rl.rlim_cur; fd++)
            close((int)fd);
        return open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    if (strcmp(mode, "close_range") == 0) {
        if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
            return -1;
        return open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    if (strcmp(mode, "hijack") == 0) {
        int trace = find_trace_fd();
        if (trace < 0)
            trace = 1000; /* not profiled: play the same game on a number of our own */
        int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, trace) != trace)
            return -1;
        close(fd);
        return trace;
    }
    return -1;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    pthread_t th;
    pthread_barrier_init(&halfway, NULL, 2);
    if (pthread_create(&th, NULL, worker, NULL) != 0)
        return 1;
    void *held[FG_HELD];
    for (int i = 0; i < FG_HELD; i++) {
        held[i] = malloc(FG_HELD_SIZE);
        touch(held[i], 16);
    }
    if (pairs(FG_BEFORE_SIZE, FG_BEFORE) != 0)
        return 1;
    pthread_barrier_wait(&halfway);
    int fd = play(argv[1], argv[2]);
    if (fd < 0) {
        printf("fd_games: %s failed\n", argv[1]);
        return 1;
    }
    if (pairs(FG_AFTER_SIZE, FG_AFTER) != 0)
        return 1;
    for (int i = 0; i < FG_HELD; i++)
        free(held[i]);
    void *rc;
    pthread_join(th, &rc);
    usleep(100 * 1000); /* several flush intervals: the recorder writes while the file is open */
    if (write(fd, FG_TEXT, strlen(FG_TEXT)) != (ssize_t)strlen(FG_TEXT) || close(fd) != 0)
        return 1;
    /* The file must hold exactly what this program wrote. */
    char buf[4096];
    int in = open(argv[2], O_RDONLY);
    ssize_t n = in < 0 ? -1 : read(in, buf, sizeof buf);
    if (n != (ssize_t)strlen(FG_TEXT) || memcmp(buf, FG_TEXT, (size_t)n) != 0) {
        printf("fd_games: %s: the file holds %zd bytes, not the program's %zu\n", argv[1], n,
               strlen(FG_TEXT));
        return 1;
    }
    if (rc != NULL)
        return 1;
    fputs(FG_STDOUT, stdout);
    return 0;
}
