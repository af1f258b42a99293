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
 *   fdchurn N   8 threads make N malloc/free pairs each while the main thread, all along, closes
 *               every descriptor from 3 up (close_range, then a close loop), dup2s /dev/null over
 *               3..20 and opens files that take the freed numbers; prints "fdchurn ok" and the
 *               pairs made ("pairs 8N").
 *   cancel N    N rounds of 4 allocating threads cancelled at random moments (deferred
 *               cancellation; pthread_testcancel is the program's only cancellation point);
 *               prints "cancel ok" and the pairs made.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../xorshift.h"

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

static atomic_int churn_done;

static void *churn_worker(void *arg)
{
    long n = (long)(intptr_t)arg;
    for (long k = 0; k < n; k++) {
        void *p = malloc(16 + (size_t)(k % 900));
        free(p);
    }
    atomic_fetch_add(&churn_done, 1);
    return NULL;
}

static int do_fdchurn(long n)
{
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        if (pthread_create(&th[i], NULL, churn_worker, (void *)(intptr_t)n) != 0)
            return 1;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rlim_t limit = rl.rlim_cur < 4096 ? rl.rlim_cur : 4096;
    long games = 0;
    while (atomic_load(&churn_done) < 8) {
        switch (games++ % 3) {
        case 0:
            syscall(SYS_close_range, 3u, ~0u, 0u);
            break;
        case 1:
            for (rlim_t fd = 3; fd < limit; fd++)
                close((int)fd);
            break;
        default: {
            int null = open("/dev/null", O_WRONLY);
            for (int fd = 3; fd <= 20; fd++)
                if (fd != null)
                    dup2(null, fd);
            break;
        }
        }
        for (int k = 0; k < 8; k++) /* files of the program's own on the freed numbers */
            open("/dev/null", O_RDONLY);
        usleep(500);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    printf("fdchurn ok pairs %ld games %s\n", 8 * n, games > 3 ? "many" : "few");
    return 0;
}

typedef struct cancel_count {
    volatile long pairs;
} cancel_count;

static void *cancel_worker(void *arg)
{
    cancel_count *c = arg;
    for (;;) {
        for (int i = 0; i < 1000; i++) {
            void *p = malloc(24 + (size_t)(i % 200));
            free(p);
            c->pairs++;
        }
        pthread_testcancel();
    }
    return NULL;
}

static int do_cancel(long rounds)
{
    long pairs = 0;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (long r = 0; r < rounds; r++) {
        pthread_t th[4];
        cancel_count counts[4] = {{0}};
        for (int i = 0; i < 4; i++)
            if (pthread_create(&th[i], NULL, cancel_worker, &counts[i]) != 0)
                return 1;
        xorshift64(&rng);
        struct timespec nap = {0, (long)(rng % 2000000)};
        nanosleep(&nap, NULL);
        for (int i = 0; i < 4; i++) {
            void *rc;
            if (pthread_cancel(th[i]) != 0 || pthread_join(th[i], &rc) != 0 ||
                rc != PTHREAD_CANCELED)
                return 1;
            pairs += counts[i].pairs;
        }
    }
    printf("cancel ok pairs %ld\n", pairs);
    return 0;
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
    if (!strcmp(argv[1], "fdchurn"))
        return do_fdchurn(n);
    if (!strcmp(argv[1], "cancel"))
        return do_cancel(n);
    return 2;
}
