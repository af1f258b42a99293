# Python frames above a native stack deeper than the recording depth, and calls through C between
# Python frames (test_preload, test_python_frames_deep). Run as
# /usr/bin/python3 -S -E py_deep.py LIBRARY under libprof_preload.so, LIBRARY being deep_native.c's.
# The line numbers and sizes are in tests/preload/py_deep.h: keep them in step.
import ctypes
import sys


def make(n):
    return bytearray(n)  # PD_MAKE_LINE


def deep(lib):
    return lib.gp_deep_alloc(60, 4000007)  # PD_DEEP_LINE: PD_LEVELS, PD_SIZE_DEEP


def nest(n):
    return nest(n - 1) if n else bytearray(4000011)  # PD_NEST_LINE: PD_SIZE_NEST


def main():
    lib = ctypes.CDLL(sys.argv[1])
    lib.gp_deep_alloc.restype = ctypes.c_void_p
    lib.gp_deep_alloc.argtypes = [ctypes.c_int, ctypes.c_size_t]
    p = deep(lib)  # PD_MAIN_DEEP_LINE
    made = list(map(make, [4000009]))  # PD_MAIN_MAP_LINE: make runs from C (map, list)
    nested = nest(100)  # PD_MAIN_NEST_LINE: PD_NEST_DEPTH Python frames
    lib.gp_deep_free(ctypes.c_void_p(p))
    print(len(made[0]) + len(nested))


main()  # PD_MODULE_LINE
