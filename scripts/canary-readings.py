#!/usr/bin/env python3
"""What (e)'s canary read beside what production suffered, by the rate written (issue #41).

For each (e) run that scripts/auto-rate-experiment.py left in a directory (its
postgres-e*.json and the worker's e*.log), the half-seconds of the load are binned by the
rate written in them (1,000-2,000 rows/s, 2,000-4,000, ...) and each bin gives the median of
the canary's value against the baseline the worker measured (from its log), beside the
median of production's p99 of that second against production's quiet before the load, and
the share of those half-seconds production was over twice its quiet (the judge's target):

  python3 scripts/canary-readings.py target/auto-rate [more directories]

docs/bench/auto-rate.md ("A steady rate, run after run") reads six runs so: the canary's
median at one rate spans 0.74-1.96 x its baseline from run to run.
"""

import glob
import json
import math
import re
import statistics
import sys


def bins(run, canary_baseline):
    """{lowest rate of the bin: [(canary / its baseline, production p99 / its quiet)]}."""
    seconds = {int(k): v for k, v in run["p99_per_window"].items()}
    out = {}
    for (t0, n0, value, _), (t1, n1, *_) in zip(run["series"], run["series"][1:]):
        if value != value or t1 <= t0 or int(t1) not in seconds:
            continue
        rate = (n1 - n0) / (t1 - t0)
        if rate <= 0:
            continue
        low = 1000 * 2 ** int(math.log2(max(rate, 1000) / 1000))
        out.setdefault(low, []).append((1000 * value / canary_baseline, seconds[int(t1)] / run["alone_p99"]))
    return out


def main(dirs):
    for d in dirs:
        for path in sorted(glob.glob(f"{d}/postgres-e*.json")):
            key = path.rsplit("postgres-", 1)[1][:-len(".json")]
            found = re.search(r"baseline p\d+ = ([\d.]+) ms", open(f"{d}/{key}.log").read())
            if not found:
                print(f"{path}: the worker's log has no baseline", file=sys.stderr)
                continue
            run, baseline = json.load(open(path)), float(found.group(1))
            print(f"{d} {key}: canary baseline {baseline:.2f} ms, production's quiet {run['alone_p99']:.2f} ms")
            for low, pairs in sorted(bins(run, baseline).items()):
                canary, production = [c for c, _ in pairs], [p for _, p in pairs]
                over = sum(p > 2 for p in production) / len(production)
                print(f"  {low:6,}-{2 * low:6,} rows/s: {len(pairs):3} half-seconds; canary {statistics.median(canary):.2f} x, "
                      f"production {statistics.median(production):.2f} x, over 2 x in {100 * over:.0f}%")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["target/auto-rate"]))
