#!/usr/bin/env python3
"""Latency percentiles vs offered load, both handlers (the CSV of `loadgen sweep`) -> PNG.

Usage: plot.py IN.csv OUT.png   (run through bench/plot, which provides matplotlib)
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    rows = list(csv.DictReader(open(src, newline="")))
    if not rows:
        sys.exit(f"{src}: no rows")
    proto, payload = rows[0]["protocol"], rows[0]["payload"]
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    styles = {"p50": ":", "p99": "-", "p999": "--"}
    colours = {}
    for handler in sorted({r["handler"] for r in rows}):
        pts = sorted((r for r in rows if r["handler"] == handler), key=lambda r: float(r["offered_rps"]))
        x = [float(r["offered_rps"]) for r in pts]
        for q, style in styles.items():
            y = [float(r[f"client_{q}_us"]) for r in pts]
            (line,) = ax.plot(x, y, style, marker="o", markersize=3,
                              color=colours.get(handler), label=f"{handler} client {q}")
            colours[handler] = line.get_color()
        server = [(float(r["offered_rps"]), float(r["server_p99_us"])) for r in pts if r["server_p99_us"]]
        if server:
            ax.plot([p[0] for p in server], [p[1] for p in server], "-.", marker="s", markersize=3,
                    color=colours[handler], alpha=0.6, label=f"{handler} server p99 (histogram)")
    ax.set_yscale("log")
    ax.set_xlabel("offered load (requests/s, open loop)")
    ax.set_ylabel("latency (µs, log scale)")
    ax.axhline(1000, color="grey", linewidth=0.8)
    ax.text(ax.get_xlim()[0], 1000, " 1 ms (SPEC §8 p99 bound)", va="bottom", fontsize=8, color="grey")
    ax.set_title(f"tenant-gateway admission latency vs load ({proto}, {payload} review, 64 in flight)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(dst)
    print(f"plot written to {dst}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
