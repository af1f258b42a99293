/*
 * Small programs for the stress tests, chosen by the first argument:
 *   fork N      N threads allocate in a loop while the main thread forks; the child allocates,
 *               prints "child ok" and exits 0; the parent waits for it, stops the threads and
 *               prints "parent ok".
 *   signal N    a SIGALRM handler that mallocs and frees (not async-signal-safe, as real programs
 *               do it) fires every 100 us while the main thread allocates N blocks; prints the
 *               number of handler runs > 0 as "signal ok".
 *   kill N      makes N allocations, prints "allocated N", flushes stdout, then sleeps until
 *               killed (the test sends SIGKILL after more than a flush interval).
 *   work N      deterministic work: N allocations, prints a checksum and exits with code 7.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_bool stop;
static volatile sig_atomic_t handler_runs;

static void *spin(void *arg)
{
    (void)arg;
    uint64_t k = 0;
    while (!atomic_load(&stop)) {
        void *p = malloc(16 + (k++ % 1000));
        free(p);
    }
    return NULL;
}

static int do_fork(int n)
{
    pthread_t th[64];
    if (n > 64)
        n = 64;
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, spin, NULL);
    usleep(20000);
    for (int round = 0; round < 20; round++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            for (int k = 0; k < 1000; k++)
                free(malloc(32 + k));
            if (round == 0)
                printf("child ok\n");
            fflush(stdout);
            _exit(0);
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            return 1;
    }
    atomic_store(&stop, true);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    printf("parent ok\n");
    return 0;
}

static void on_alarm(int sig)
{
    (void)sig;
    void *p = malloc(48);
    free(p);
    handler_runs++;
}

static int do_signal(long n)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 100}, {0, 100}};
    setitimer(ITIMER_REAL, &it, NULL);
    for (long k = 0; k < n; k++) {
        void *p = malloc(1 + (size_t)(k % 2000));
        free(p);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("signal %s\n", handler_runs > 0 ? "ok" : "never ran");
    return handler_runs > 0 ? 0 : 1;
}

static _Noreturn void do_kill(long n)
{
    static void *keep[1024];
    for (long k = 0; k < n; k++) {
        free(keep[k % 1024]);
        keep[k % 1024] = malloc(1 + (size_t)(k % 500));
    }
    printf("allocated %ld\n", n);
    fflush(stdout);
    for (;;)
        pause();
}

static int do_work(long n)
{
    uint64_t sum = 0;
    for (long k = 0; k < n; k++) {
        unsigned char *p = malloc(1 + (size_t)(k % 777));
        p[0] = (unsigned char)k;
        sum = sum * 31 + p[0] + (uint64_t)(k % 777);
        free(p);
    }
    printf("checksum %llu\n", (unsigned long long)sum);
    fprintf(stderr, "work done\n");
    return 7;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    long n = atol(argv[2]);
    if (!strcmp(argv[1], "fork"))
        return do_fork((int)n);
    if (!strcmp(argv[1], "signal"))
        return do_signal(n);
    if (!strcmp(argv[1], "kill"))
        do_kill(n);
    if (!strcmp(argv[1], "work"))
        return do_work(n);
    return 2;
}
