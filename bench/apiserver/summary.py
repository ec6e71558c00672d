"""Summary of `bench/apiserver-latency`: one table per protocol, one row per kind.

Input: the NDJSON rows the latency client prints (label, kind, protocol, round, mean_ms,
p50_ms, p99_ms). Each figure is the median over rounds of that round's figure; each ratio is
the median over rounds of the ratio measured within the round (the setups of one round share
the machine's state), with the spread over rounds beside it.
"""

import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
KEYS = ("mean_ms", "p50_ms", "p99_ms")


def figure(proto, label, kind, key):
    vals = [r[key] for r in rows if (r["protocol"], r["label"], r["kind"]) == (proto, label, kind)]
    return statistics.median(vals) if vals else None


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
    print(f"### {proto}: dry-run create, ms (median of rounds)")
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
                rat[den].append(statistics.median(rs) if rs else None)
                if rs and key != "p99_ms":
                    worst[den] = max(worst[den], statistics.median(rs))
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
