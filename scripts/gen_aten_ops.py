#!/usr/bin/python3
"""Writes tools/rules/aten_ops.txt: the names of PyTorch's ATen operators, one per line, from the
installed torch's operator schemas (Debian's python3-torch; run with /usr/bin/python3).

    scripts/gen_aten_ops.py [OUT]

The frame rules use the list to name the op an allocation was made for as PyTorch users know it:
the dispatcher's struct at::_ops::softmax_int is the operator aten::softmax with its overload
"int", and only the list can tell where the name ends (flatten_using_ints is flatten, overload
using_ints; dense_dim is an operator of its own)."""
import os
import sys

import torch


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tools", "rules", "aten_ops.txt")
    names = sorted({s.name[len("aten::"):] for s in torch._C._jit_get_all_schemas()
                    if s.name.startswith("aten::")})
    with open(out, "w") as f:
        f.write("# ATen operator names of torch %s (scripts/gen_aten_ops.py)\n" % torch.__version__)
        f.write("\n".join(names) + "\n")
    print("%s: %d operators" % (out, len(names)))


if __name__ == "__main__":
    main()
