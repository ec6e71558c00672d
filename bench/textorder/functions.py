#!/usr/bin/env python3
"""The functions of BINARY that ran in the given callgrind outputs (made with --demangle=no
--compress-strings=no), hottest (own instructions) first, one symbol name a line; only names
the binary's symbol table has (lld orders by them). Usage: functions.py BINARY CALLGRIND_OUT..."""
import collections
import os
import re
import subprocess
import sys

binary = sys.argv[1]
own = os.path.basename(binary)
symbols = set()
for line in subprocess.run(["nm", binary], capture_output=True, text=True, check=True).stdout.splitlines():
    parts = line.split()
    if len(parts) == 3 and parts[1] in "tTwW":
        symbols.add(parts[2])

cost = collections.Counter()
for path in sys.argv[2:]:
    obj = fn_obj = fn = None
    after_calls = False
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                obj = line[3:].strip()
            elif line.startswith("fn="):
                # Recursion levels ('2) are the same function.
                fn = re.sub(r"'\d+$", "", line[3:].strip())
                fn_obj = obj
                if fn_obj and os.path.basename(fn_obj) == own:
                    cost[fn] += 0
            elif line.startswith("calls="):
                after_calls = True  # the next cost line is the callee's, not fn's own
            elif line[:1].isdigit() or line[:1] in "+-*":
                if after_calls:
                    after_calls = False
                elif fn and fn_obj and os.path.basename(fn_obj) == own:
                    parts = line.split()
                    if len(parts) >= 2 and parts[1].isdigit():
                        cost[fn] += int(parts[1])

for name, _ in sorted(cost.items(), key=lambda kv: (-kv[1], kv[0])):
    if name in symbols:
        print(name)
