#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Prints the functions of src/ longer than a limit, longest first.

usage: fn-length.py [--max N] FILE...

A function's length is its lines from the signature's first line to its
closing brace, comments and blank lines included (what a reader scrolls
through). Rust: an item starting with ``fn`` (after visibility, ``const``,
``unsafe``, ``extern "C"``), ended by the first ``}`` at the signature's
indentation. C: a definition whose opening brace is alone in column 0, ended by
the ``}`` in column 0. Exit status 1 when a function is longer than --max
(default 80), else 0; the longest function is printed either way.
"""
import re
import sys

RUST_FN = re.compile(r'^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)')
C_FN = re.compile(r'^[A-Za-z_][\w\s\*]*?\b(\w+)\s*\(')


def rust_functions(path, lines):
    for i, line in enumerate(lines):
        m = RUST_FN.match(line)
        if not m:
            continue
        indent, name = m.group(1), m.group(7)
        # A declaration without a body (trait item, extern block) ends with ';'.
        j = i
        while j < len(lines) and '{' not in lines[j] and not lines[j].rstrip().endswith(';'):
            j += 1
        if j >= len(lines) or '{' not in lines[j]:
            continue
        if lines[j].rstrip().endswith('}') and lines[j].count('{') == lines[j].count('}'):
            yield path, name, i + 1, j - i + 1
            continue
        for k in range(j + 1, len(lines)):
            if lines[k].startswith(indent + '}') and not lines[k].startswith(indent + '} else'):
                yield path, name, i + 1, k - i + 1
                break


def c_functions(path, lines):
    for i, line in enumerate(lines):
        if line.rstrip() != '{':
            continue
        # The signature: back to the line that starts in column 0 with a name.
        s = i - 1
        while s > 0 and (lines[s].startswith('\t') or lines[s].startswith(' ')):
            s -= 1
        m = C_FN.match(lines[s])
        if not m:
            continue
        for k in range(i + 1, len(lines)):
            if lines[k].startswith('}'):
                yield path, m.group(1), s + 1, k - s + 1
                break


def main(argv):
    limit = 80
    files = []
    it = iter(argv)
    for a in it:
        if a == '--max':
            limit = int(next(it))
        else:
            files.append(a)
    found = []
    for path in files:
        with open(path, encoding='utf-8') as f:
            lines = f.read().split('\n')
        fns = rust_functions if path.endswith('.rs') else c_functions
        found.extend(fns(path, lines))
    found.sort(key=lambda f: -f[3])
    over = [f for f in found if f[3] > limit]
    for path, name, line, n in over:
        print(f'{path}:{line}: {name}: {n} lines (more than {limit})')
    if found:
        path, name, line, n = found[0]
        print(f'longest: {path}:{line}: {name}: {n} lines')
    return 1 if over else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
