#!/usr/bin/env python3
"""What (e)'s canary read beside what production suffered, by the rate written (issue #41).

For each (e) run that scripts/auto-rate-experiment.py left in a directory (its
postgres-e*.json), the half-seconds of the load are binned by the rate written in them
(1,000-2,000 rows/s, 2,000-4,000, ...) and each bin gives the median of the canary's value
against the baseline the worker held then (both sampled from its /metrics), beside the
median of production's p99 of that second against production's quiet before the load, and
the share of those half-seconds production was over twice its quiet (the judge's target):

  python3 scripts/canary-readings.py target/auto-rate [more directories]

docs/bench/auto-rate.md ("A steady rate, run after run") reads six runs so: the canary's
median at one rate spans 0.74-1.96 x its baseline from run to run.
"""

import glob
import json
import math
import statistics
import sys


def bins(run):
    """{lowest rate of the bin: [(canary / its baseline, production p99 / its quiet)]}."""
    seconds = {int(k): v for k, v in run["p99_per_window"].items()}
    out = {}
    for (t0, n0, value, _, baseline), (t1, n1, *_) in zip(run["series"], run["series"][1:]):
        # NaN (no reading yet, or the baseline still being measured) compares false.
        if not (value > 0 and baseline > 0) or t1 <= t0 or int(t1) not in seconds:
            continue
        rate = (n1 - n0) / (t1 - t0)
        if rate <= 0:
            continue
        low = 1000 * 2 ** int(math.log2(max(rate, 1000) / 1000))
        out.setdefault(low, []).append((value / baseline, seconds[int(t1)] / run["alone_p99"]))
    return out


def main(dirs):
    for d in dirs:
        for path in sorted(glob.glob(f"{d}/postgres-e*.json")):
            run = json.load(open(path))
            baselines = sorted({row[4] for row in run["series"] if len(row) > 4 and row[4] > 0})
            if not baselines:
                print(f"{path}: no canary baseline in its series (a run before the experiment sampled it)",
                      file=sys.stderr)
                continue
            print(f"{path}: canary baseline {', '.join(f'{1000 * b:.2f}' for b in baselines)} ms, "
                  f"production's quiet {run['alone_p99']:.2f} ms")
            for low, pairs in sorted(bins(run).items()):
                canary, production = [c for c, _ in pairs], [p for _, p in pairs]
                over = sum(p > 2 for p in production) / len(production)
                print(f"  {low:6,}-{2 * low:6,} rows/s: {len(pairs):3} half-seconds; canary {statistics.median(canary):.2f} x, "
                      f"production {statistics.median(production):.2f} x, over 2 x in {100 * over:.0f}%")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["target/auto-rate"]))
