# Python frames in recorded stacks (test_preload, test_python_frames): allocations of known
# sizes at known lines. Run as /usr/bin/python3 -S -E py_alloc.py under libprof_preload.so.
# The line numbers are in tests/preload/py_alloc.h: keep them in step.


def make(n):
    return bytearray(n)  # PA_MAKE_LINE (bytearray(n) allocates n + 1 bytes)


def main():
    a = make(3000001)  # PA_LINE_A
    b = make(3000003)  # PA_LINE_B
    c = bytearray(3000005)  # PA_LINE_C
    print(len(a) + len(b) + len(c))


main()  # PA_LINE_MODULE
