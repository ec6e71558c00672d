#!/usr/bin/env python3
"""Where a process's RSS is (bench/reconcile/run): /proc/PID/smaps grouped into the binary's
own pages, other file-backed pages, the anonymous heap, and the main stack, plus the thread
count. Prints one JSON object (KiB). Usage: memory.py PID"""
import json
import os
import sys

pid = sys.argv[1]
exe = os.path.realpath(f"/proc/{pid}/exe")
groups = {"binary": 0, "other_files": 0, "anon": 0, "stack": 0}
anon_maps = 0
cur = None
with open(f"/proc/{pid}/smaps") as f:
    for line in f:
        head = line.split()
        if not head:
            continue
        if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            path = head[5] if len(head) > 5 else ""
            if path == exe or path.startswith(exe):
                cur = "binary"
            elif path == "[stack]":
                cur = "stack"
            elif path.startswith("/"):
                cur = "other_files"
            else:
                cur = "anon"
                anon_maps += 1
        elif head[0] == "Rss:" and cur:
            groups[cur] += int(head[1])
status = {}
with open(f"/proc/{pid}/status") as f:
    for line in f:
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
            status[k] = int(v.split()[0])
out = {"rss_kib": status.get("VmRSS"), "hwm_kib": status.get("VmHWM"),
       "threads": status.get("Threads"), "anon_mappings": anon_maps}
out.update({f"{k}_kib": v for k, v in groups.items()})
print(json.dumps(out))
