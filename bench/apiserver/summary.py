"""Summary of `bench/apiserver-latency`: one table per protocol, one row per kind.

Input: the NDJSON rows the latency client prints (label, kind, protocol, round, mean_ms,
p50_ms, p99_ms). The mean is that of every request of every round (rounds have the same
number of requests), and the mean ratio is the ratio of those means: on a shared machine the
mean is set by the few requests another process delays by 10-20 ms, and pooling the rounds
counts all of them. p50 and p99 are the median over rounds of each round's figure, and their
ratios the median of the ratios measured within a round (the setups of one round share the
machine's state). Every round's ratios are listed below each table to show the spread.
"""

import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
KEYS = ("mean_ms", "p50_ms", "p99_ms")


def figure(proto, label, kind, key):
    vals = [r[key] for r in rows if (r["protocol"], r["label"], r["kind"]) == (proto, label, kind)]
    if not vals:
        return None
    return statistics.fmean(vals) if key == "mean_ms" else statistics.median(vals)


def ratios(proto, num, den, kind, key):
    """The per-round ratios num/den of `key`, for the rounds that measured both."""
    by_round = {}
    for r in rows:
        if (r["protocol"], r["kind"]) == (proto, kind) and r["label"] in (num, den):
            by_round.setdefault(r["round"], {})[r["label"]] = r[key]
    return [v[num] / v[den] for v in by_round.values() if num in v and den in v and v[den] > 0]


def fmt3(vals):
    return " / ".join("-" if v is None else f"{v:.3f}" for v in vals)


worst = {"noop": 0.0, "policies": 0.0}
for proto in dict.fromkeys(r["protocol"] for r in rows):
    kinds = list(dict.fromkeys(r["kind"] for r in rows if r["protocol"] == proto))
    print()
    print(f"### {proto}: dry-run create, ms (mean of all rounds; p50, p99: median of rounds)")
    print()
    print("| kind | none mean | policies/ mean / p50 / p99 | do-nothing mean / p50 / p99 | webhook mean / p50 / p99 "
          "| webhook ÷ do-nothing mean / p50 / p99 | webhook ÷ policies/ mean / p50 / p99 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    spread_lines = []
    for k in kinds:
        cells = {label: [figure(proto, label, k, key) for key in KEYS] for label in ("none", "policies", "noop", "webhook")}
        rat = {}
        for den in ("noop", "policies"):
            rat[den] = []
            for key in KEYS:
                rs = ratios(proto, "webhook", den, k, key)
                if key == "mean_ms":
                    num, base = figure(proto, "webhook", k, key), figure(proto, den, k, key)
                    r = num / base if num is not None and base else None
                else:
                    r = statistics.median(rs) if rs else None
                rat[den].append(r)
                if r is not None and key != "p99_ms":
                    worst[den] = max(worst[den], r)
                    spread_lines.append(f"{k} {key[:-3]} webhook ÷ {den}: rounds {', '.join(f'{x:.3f}' for x in rs)}")
        none_mean = cells["none"][0]
        print(f"| {k} | {'-' if none_mean is None else f'{none_mean:.3f}'} | {fmt3(cells['policies'])} | "
              f"{fmt3(cells['noop'])} | {fmt3(cells['webhook'])} | {fmt3(rat['noop'])} | {fmt3(rat['policies'])} |")
    print()
    for line in spread_lines:
        print(f"- {line}")

print()
print(f"worst ratio webhook ÷ do-nothing over kinds and protocols (mean or p50) = {worst['noop']:.3f} "
      f"(target <= 1.05): {'PASS' if worst['noop'] <= 1.05 else 'MISS'}")
print(f"worst ratio webhook ÷ policies/ over kinds and protocols (mean or p50) = {worst['policies']:.3f} "
      f"(target <= 1.15): {'PASS' if worst['policies'] <= 1.15 else 'MISS'}")
