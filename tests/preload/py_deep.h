/* What tests/preload/py_deep.py allocates, and where (its line numbers). */
#ifndef GRADPROF_TESTS_PY_DEEP_H
#define GRADPROF_TESTS_PY_DEEP_H

#define PD_MAKE_LINE 10
#define PD_DEEP_LINE 14
#define PD_NEST_LINE 18
#define PD_MAIN_DEEP_LINE 25
#define PD_MAIN_MAP_LINE 26
#define PD_MAIN_NEST_LINE 27
#define PD_MODULE_LINE 32
#define PD_LEVELS 60              /* native frames below deep(): more than the default depth, 32 */
#define PD_NEST_DEPTH 101         /* nest(100) .. nest(0): Python frames, more than the depth */
#define PD_SIZE_DEEP 4000007      /* malloc'd at the bottom of the chain */
#define PD_SIZE_MAP (4000009 + 1) /* bytearray(n) allocates n + 1 bytes */
#define PD_SIZE_NEST (4000011 + 1)
#define PD_STDOUT "8000020\n"

#endif
