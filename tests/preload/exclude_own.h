/* The allocations exclude_own.c makes, shared with test_preload.c. */
#ifndef GRADPROF_TESTS_EXCLUDE_OWN_H
#define GRADPROF_TESTS_EXCLUDE_OWN_H

#define EO_KEPT_SIZE 4001 /* malloc'd before lp_exclude_push, freed inside: both recorded */
#define EO_OWN_SIZE                                                                                \
    4002 /* malloc'd inside (twice nested): not recorded; freed after the                          \
            pop: one free of an unknown block */
#define EO_AFTER_SIZE                                                                              \
    4003                   /* malloc'd and freed after the last pop (and after a stray pop):       \
                              recorded */
#define EO_OTHER_SIZE 4004 /* another thread, while the main thread excludes: recorded */

#define EO_STDOUT "exclude_own: done\n"

#endif /* GRADPROF_TESTS_EXCLUDE_OWN_H */
