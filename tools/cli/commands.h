/*
 * The gradprof commands. Each takes the arguments after "gradprof" (argv[0] is the command's
 * name), handles its own --help, and returns the process exit code (cli.h: GP_EXIT_*).
 */
#ifndef GRADPROF_TOOLS_COMMANDS_H
#define GRADPROF_TOOLS_COMMANDS_H

int gp_cmd_run(int argc, char **argv);    /* cmd_run.c */
int gp_cmd_report(int argc, char **argv); /* cmd_report.c */
int gp_cmd_diff(int argc, char **argv);   /* cmd_diff.c */
int gp_cmd_check(int argc, char **argv);  /* cmd_check.c */
/* compare runs the program twice (run.h) and ends in gp_cmd_diff with an argv it builds. */
int gp_cmd_compare(int argc, char **argv); /* cmd_compare.c */

#endif /* GRADPROF_TOOLS_COMMANDS_H */
