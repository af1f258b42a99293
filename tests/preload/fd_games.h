/* The allocations fd_games.c makes, shared with test_preload.c. */
#ifndef GRADPROF_TESTS_FD_GAMES_H
#define GRADPROF_TESTS_FD_GAMES_H

#define FG_BEFORE_SIZE 6101 /* malloc/free pairs before the descriptor game, FG_BEFORE times */
#define FG_BEFORE 500
#define FG_HELD_SIZE 6102 /* blocks allocated before the game, freed after it */
#define FG_HELD 50
#define FG_AFTER_SIZE 6103 /* malloc/free pairs after the game */
#define FG_AFTER 500
#define FG_WORKER_SIZE 6104 /* a second thread's malloc/free pairs, spanning the game */
#define FG_WORKER 4000

/* What the program writes into its own file; the file must hold exactly this afterwards. */
#define FG_TEXT "fd_games: the program's own bytes\n"
#define FG_STDOUT "fd_games: ok\n"

#endif /* GRADPROF_TESTS_FD_GAMES_H */
