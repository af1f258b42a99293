/* What vfork_exec.c does, shared with test_preload.c. */
#ifndef GRADPROF_TESTS_VFORK_EXEC_H
#define GRADPROF_TESTS_VFORK_EXEC_H

#define VE_BEFORE_SIZE 6201 /* malloc/free pairs before the vforks */
#define VE_BEFORE 300
#define VE_AFTER_SIZE 6203  /* malloc/free pairs after them */
#define VE_AFTER 300

#endif /* GRADPROF_TESTS_VFORK_EXEC_H */
