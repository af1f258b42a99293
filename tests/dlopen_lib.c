/* A library test_recorder loads with dlopen after recording started: its code must still be
 * attributed to it (the module map follows dlopen). */
int gp_dlopen_probe(int x);
int gp_dlopen_probe(int x) { return x + 1; }
