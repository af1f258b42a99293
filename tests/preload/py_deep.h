/* What tests/preload/py_deep.py allocates, and where (its line numbers). */
#ifndef GRADPROF_TESTS_PY_DEEP_H
#define GRADPROF_TESTS_PY_DEEP_H

#define PD_MAKE_LINE 10
#define PD_DEEP_LINE 14
#define PD_MAIN_DEEP_LINE 21
#define PD_MAIN_MAP_LINE 22
#define PD_MODULE_LINE 27
#define PD_LEVELS 60              /* native frames below deep(): more than the default depth, 32 */
#define PD_SIZE_DEEP 4000007      /* malloc'd at the bottom of the chain */
#define PD_SIZE_MAP (4000009 + 1) /* bytearray(n) allocates n + 1 bytes */
#define PD_STDOUT "4000009\n"

#endif
