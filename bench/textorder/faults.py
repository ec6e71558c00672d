#!/usr/bin/env python3
"""The functions of BINARY whose code pages a native run faulted in, from `perf script
--no-demangle -F addr,ip,sym,dso` of `perf record -e page-faults -c 1 -d` (stdin), that LIST
does not have yet, in the order they faulted; one symbol name a line. With the listed
functions already laid out first, each such fault is a 64 KiB window the kernel mapped
outside them for a function callgrind did not see run (code chosen by CPU features callgrind
does not report, such as SHA or ADX instructions, and paths that depend on timing).
Usage: faults.py BINARY LIST < perf-script-output"""
import os
import re
import sys

binary, listfile = sys.argv[1], sys.argv[2]
own = os.path.basename(binary)
listed = {l.strip() for l in open(listfile) if l.strip() and not l.startswith("#")}
line_re = re.compile(r"\s*([0-9a-f]+)\s+(\S+)\s+\(([^)]*)\)\s+([0-9a-f]+)\s+(\S+)\s+\(([^)]*)\)")
seen = set()
for line in sys.stdin:
    m = line_re.match(line)
    if not m or os.path.basename(m.group(3)) != own or m.group(2) == "[unknown]":
        continue
    # An instruction fetch: the faulting address is within a page of the instruction. A load
    # from the binary's read-only data would fault at an address far from the IP.
    if abs(int(m.group(1), 16) - int(m.group(4), 16)) > 4096:
        continue
    name = m.group(2).split("+")[0]
    if name not in listed and name not in seen:
        seen.add(name)
        print(name)
