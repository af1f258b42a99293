/* alloc_fork.c's allocations, shared with test_preload.c. */
#ifndef GRADPROF_TESTS_ALLOC_FORK_H
#define GRADPROF_TESTS_ALLOC_FORK_H

/* The parent, before the forks, AF_PARENT_BEFORE_COUNT times. */
#define AF_PARENT_BEFORE 6001
#define AF_PARENT_BEFORE_COUNT 5
/* Child 1, which leaves with exit(). */
#define AF_CHILD_EXIT 6002
#define AF_CHILD_EXIT_COUNT 3
/* Child 2, which leaves with _exit(). */
#define AF_CHILD_UNDERSCORE 6003
#define AF_CHILD_UNDERSCORE_COUNT 2
/* Child 3, once, just before execle("/bin/sh", "sh", "-c", "exit $AF_STATUS", NULL, envp) with
 * AF_STATUS=AF_EXEC_STATUS_TEXT in envp. */
#define AF_CHILD_EXEC 6004
#define AF_EXEC_STATUS_TEXT "5"
/* The parent, after the children, AF_PARENT_AFTER_COUNT times. */
#define AF_PARENT_AFTER 6005
#define AF_PARENT_AFTER_COUNT 4

#define AF_STDOUT "alloc_fork: children exited 0 0 5\n"

#endif /* GRADPROF_TESTS_ALLOC_FORK_H */
