#!/usr/bin/env python3
"""The event vocabulary has one definition, include/gradprof/vocabulary.h; the PyTorch helper
(libprof/python/gradprof_torch.py) keeps a copy of the category wire values and region names.
This test reads both files (no torch needed) and fails on any difference, naming it.

    test_vocabulary.py SOURCE_DIR
"""
import ast
import re
import sys


def header_vocabulary(path):
    text = open(path).read()
    cats = {name: int(value) for name, _, value in
            re.findall(r'X\((\w+),\s*"(\w+)",\s*(\d+)\)', text)}
    regions = dict(re.findall(r'#define LP_REGION_(\w+) "([^"]*)"', text))
    return cats, regions


def helper_vocabulary(path):
    tree = ast.parse(open(path).read())
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant):
            consts[node.targets[0].id] = node.value.value
    return consts


def main():
    src = sys.argv[1]
    cats, regions = header_vocabulary(src + "/include/gradprof/vocabulary.h")
    consts = helper_vocabulary(src + "/libprof/python/gradprof_torch.py")
    errors = []
    if len(cats) != 9 or len(regions) != 6:
        errors.append("vocabulary.h: parsed %d categories and %d region names (expected 9 and 6):"
                      " the test's patterns no longer match the header" % (len(cats), len(regions)))
    if sorted(cats.values()) != list(range(len(cats))):
        errors.append("vocabulary.h: wire values are not 0..%d: %s" % (len(cats) - 1, cats))
    for name, value in cats.items():
        if consts.get(name) != value:
            errors.append("gradprof_torch.py: %s = %r, vocabulary.h says %d"
                          % (name, consts.get(name), value))
    for name, value in regions.items():
        if consts.get("REGION_" + name) != value:
            errors.append("gradprof_torch.py: REGION_%s = %r, vocabulary.h says %r"
                          % (name, consts.get("REGION_" + name), value))
    for e in errors:
        print("FAIL:", e)
    if not errors:
        print("vocabulary: %d categories and %d region names agree" % (len(cats), len(regions)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
