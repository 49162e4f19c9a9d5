#!/usr/bin/env python3
"""The closed loop of `rate = "auto"`, replayed from one stepped run of
scripts/canary-statistics.py (its target/auto-rate/stats.json): the controller of
src/control/probe_target.rs (ported) steers a simulated load whose every second is a second
of the stepped run at the rate nearest the controller's (a mixture of the two steps either
side), replaying that second's canary runs (the logged one-client canary, timed from its
scheduled start as sluice's canary is) and production's p99 for the same wall second, so
that a stall both saw stays one event. Reports, per strategy and over seeds: the load's
rows/s and production's 1 s windows within its target after the first 10 s.

It reads one run's plant: it ranks rules against each other on the same seconds, it does
not predict a real run's figures.

  python3 scripts/auto-rate-model.py [target/auto-rate/stats.json] [--seeds 20]
"""
import argparse
import bisect
import importlib.util
import json
import random
from pathlib import Path

spec = importlib.util.spec_from_file_location("x", Path(__file__).with_name("auto-rate-experiment.py"))
x = importlib.util.module_from_spec(spec)
spec.loader.exec_module(x)
# The experiment's percentile (nearest rank), so that the model reads as the experiment does.
pct = x.pct


class Plant:
    """Seconds of the stepped run, by the rate the load achieved in them."""

    def __init__(self, stats, source):
        r = stats["result"]
        self.target = r["target"]
        marks = stats["marks"]
        runs = sorted(tuple(r) for r in stats["runs"][source])
        windows = {int(k): v for k, v in stats["windows"].items()}
        ends = [m[0] for m in marks[1:]] + [max(t for t, _ in runs)]
        steps = []
        for (begun, rate, achieved), end in zip(marks, ends):
            seconds = []
            for s in range(int(begun + 5), int(end) - 1):
                if s not in windows:
                    continue
                lo, hi = bisect.bisect_left(runs, (s,)), bisect.bisect_left(runs, (s + 1,))
                seconds.append(([(t - s, v) for t, v in runs[lo:hi]], pct(windows[s], 0.99)))
            steps.append((achieved if rate else 0.0, seconds))
        quiet = [(s, pct(v, 0.99)) for s, v in windows.items() if stats["quiet_end"] - 25 <= s < stats["quiet_end"] - 1]
        qs = [s for s, _ in quiet]
        lo, hi = bisect.bisect_left(runs, (min(qs),)), bisect.bisect_left(runs, (max(qs) + 1,))
        quiet_runs = runs[lo:hi]
        steps.append((0.0, [([(t - s, v) for t, v in quiet_runs if s <= t < s + 1], p) for s, p in quiet]))
        self.steps = sorted(steps, key=lambda s: s[0])
        self.quiet = [s for rate, sec in self.steps if rate == 0.0 for s in sec]

    def second(self, rate, rng):
        """One second of the plant at `rate`: (canary runs as (offset, ms), production p99)."""
        rates = [r for r, _ in self.steps]
        i = bisect.bisect_right(rates, rate)
        if i == 0:
            pick = 0
        elif i == len(rates):
            pick = len(rates) - 1
        else:
            lo, hi = rates[i - 1], rates[i]
            pick = i if rng.random() < (rate - lo) / max(1e-9, hi - lo) else i - 1
        return rng.choice(self.steps[pick][1])


class ProbeTarget:
    """src/control/probe_target.rs, ported (times in seconds)."""

    def __init__(self, target, floor, memory=5.0, setpoint=0.8, increase=1.0, near_peak=0.9,
                 probe=0.1, decrease=0.5, least=10.0, start=1000.0, past_peak=1.2):
        self.target, self.floor, self.memory = target, floor, memory
        self.setpoint, self.increase, self.near_peak, self.probe = setpoint, increase, near_peak, probe
        self.decrease, self.least, self.rate = decrease, least, start
        # Above `past_peak` x the rate last cut from, the peak is forgotten (None: never,
        # as up to 41a5313).
        self.past_peak = past_peak
        self.last_cut, self.peak, self.last_reading = None, None, None

    def room(self, value):
        sp = self.setpoint * self.target
        floor = self.floor if self.floor < 0.9 * sp else 0.0
        if sp <= floor:
            return 1.0
        return min(1.0, max(0.0, (sp - value) / (sp - floor)))

    def observe(self, now, value):
        since = 0.0 if self.last_reading is None else min(self.memory, now - self.last_reading)
        self.last_reading = now
        settling = self.last_cut is not None and now - self.last_cut[0] < self.memory
        if value > self.target:
            if not (settling and value <= self.last_cut[1]):
                excess = min(1.0, value / self.target - 1.0)
                self.peak = self.rate
                self.rate *= 1.0 - self.decrease * excess
                self.last_cut = (now, value)
        elif value <= self.setpoint * self.target and not settling:
            room = self.room(value)
            inc = self.increase * room
            if self.peak is not None and self.past_peak and self.rate > self.past_peak * self.peak:
                self.peak = None
            if self.peak is not None and self.rate >= self.near_peak * self.peak:
                inc = min(inc, self.probe)
            self.rate *= (1.0 + inc) ** (since / self.memory)
        self.rate = max(self.least, self.rate)


class RunShare:
    """Steers the share of canary runs over the target to `share` (stochastic
    approximation of a quantile): each run over cuts the rate by `cut`, each run under
    grows it by `cut * share / (1 - share)`, so that it stands still where `share` of the
    runs are over. Until the first run over, it climbs as ProbeTarget does (×2 per memory
    at the floor)."""

    def __init__(self, target, floor, share=0.01, cut=0.05, memory=5.0, start=1000.0, least=10.0):
        self.target, self.floor, self.share, self.cut = target, floor, share, cut
        self.memory, self.rate, self.least, self.climbing = memory, start, least, True
        self.last = None

    def runs(self, now, new):
        since = 0.0 if self.last is None else now - self.last
        self.last = now
        for v in new:
            if v > self.target:
                self.climbing = False
                self.rate *= 1.0 - self.cut
            elif not self.climbing:
                self.rate *= 1.0 + self.cut * self.share / (1.0 - self.share)
        if self.climbing:
            self.rate *= 2.0 ** (since / self.memory)
        self.rate = max(self.least, self.rate)


def quiet_seconds(plant, rng, n):
    """`n` seconds drawn from the quiet step: each its canary runs' latencies."""
    return [[v for _, v in rng.choice(plant.quiet)[0]] for _ in range(int(n))]


def flat(seconds):
    return [v for runs in seconds for v in runs]


def quieter_baseline(plant, rng, window):
    """The quieter of two windows' p99 of the quiet step's runs (src/health/probe.rs until
    the pooled baseline, `pooled_baseline`, replaced it)."""
    return min(pct(flat(quiet_seconds(plant, rng, window)), 0.99) for _ in range(2))


def simulate(plant, rng, rows, controller=None, fixed=None, window=5.0, percentile=0.99, hold=10.0,
             smooth=None, baseline=None):
    """One load of `rows`: (rows/s after its first 10 s, share of its seconds after them
    within the target). `controller(target, floor)` makes the steering, from a baseline
    measured by `baseline(plant, rng, window)` (as built: `pooled_baseline`); `fixed` a rate."""
    if fixed is not None:
        rate_of = lambda: fixed
    else:
        base = (baseline or pooled_baseline)(plant, rng, window)
        steer = controller(2 * base, base)
        rate_of = lambda: steer.rate
    t, written, seconds, runs, readings = 0.0, 0.0, [], [], []
    if fixed is None:
        t = hold
    start = t
    while written < rows:
        rate = rate_of()
        canary, p99 = plant.second(rate, rng)
        for off, v in canary:
            runs.append((t + off, v))
        runs = [(a, v) for a, v in runs if a > t + 1 - window]
        if fixed is None:
            for k in range(5):
                now = t + 0.2 * (k + 1)
                if hasattr(steer, "runs"):
                    steer.runs(now, [v for off, v in canary if 0.2 * k < off <= 0.2 * (k + 1)])
                    continue
                w = [v for a, v in runs if a <= now]
                if w:
                    readings.append((now, pct(w, percentile)))
                    if smooth:
                        readings = [(a, v) for a, v in readings if a > now - smooth[0]]
                        steer.observe(now, pct([v for _, v in readings], smooth[1]))
                    else:
                        steer.observe(now, readings[-1][1])
        seconds.append((t, rate, p99 <= plant.target))
        written += rate
        t += 1.0
    judged = [(r, ok) for at, r, ok in seconds if at >= start + 10]
    if not judged:
        return float("nan"), float("nan")
    # The load's rows/s over its whole time, the baseline's hold included (as the
    # experiment's table), and its seconds within after its first 10 s.
    return rows / t, sum(ok for _, ok in judged) / len(judged)


class ReadingShare:
    """Steers the share of readings (the window's p99, every 200 ms) over the target to
    `share`: each over cuts `cut`, each under grows `cut * share / (1 - share)`. Until the
    first over, it climbs x2 per memory."""

    def __init__(self, target, floor, share=0.1, cut=0.02, memory=5.0, start=1000.0, least=10.0):
        self.target, self.share, self.cut, self.memory = target, share, cut, memory
        self.rate, self.least, self.climbing, self.last = start, least, True, None

    def observe(self, now, value):
        since = 0.0 if self.last is None else now - self.last
        self.last = now
        if value > self.target:
            self.climbing = False
            self.rate *= 1.0 - self.cut
        elif self.climbing:
            self.rate *= 2.0 ** (since / self.memory)
        else:
            self.rate *= 1.0 + self.cut * self.share / (1.0 - self.share)
        self.rate = max(self.least, self.rate)


class SecondShare:
    """Steers the share of seconds whose slowest canary run is over the target (twice the
    quiet seconds' median slowest run) to `share`, as production is judged by its seconds:
    each such second cuts the rate by `cut`, each other grows it by `cut * share / (1 -
    share)`. Until the first second over, it doubles per `climb` seconds."""

    def __init__(self, share=0.1, cut=0.1, climb=5.0, start=1000.0, least=10.0, reclimb=None):
        self.share, self.cut, self.climb, self.rate, self.least = share, cut, climb, start, least
        # With `reclimb`, it doubles again after that many seconds under in a row.
        self.climbing, self.reclimb, self.under = True, reclimb, 0

    def second(self, slowest, target):
        if slowest > target:
            self.climbing = False
            self.under = 0
            self.rate *= 1.0 - self.cut
        elif self.reclimb and self.under >= self.reclimb:
            self.rate *= 2.0 ** (1.0 / self.climb)
        elif self.climbing:
            self.rate *= 2.0 ** (1.0 / self.climb)
        else:
            self.under += 1
            self.rate *= 1.0 + self.cut * self.share / (1.0 - self.share)
        self.rate = max(self.least, self.rate)


def simulate_seconds(plant, rng, rows, steer, hold=10, pooled=False):
    """As `simulate`, for a rule fed each second's slowest canary run. The target is twice
    the quiet seconds' median slowest run, or with `pooled` their runs' p99."""
    drawn = quiet_seconds(plant, rng, hold)
    if pooled:
        target = 2 * pct(flat(drawn), 0.99)
    else:
        quiet = sorted(max(d or [0.0]) for d in drawn)
        target = 2 * quiet[len(quiet) // 2]
    t, written, seconds = float(hold), 0.0, []
    while written < rows:
        canary, p99 = plant.second(steer.rate, rng)
        seconds.append((t, p99 <= plant.target))
        written += steer.rate
        steer.second(max([v for _, v in canary] or [0.0]), target)
        t += 1.0
    judged = [ok for at, ok in seconds if at >= hold + 10]
    return rows / t, sum(judged) / len(judged)


def pooled_baseline(plant, rng, window, windows=2):
    """The p99 of `windows` windows' runs together, instead of the quieter window's."""
    return pct(flat(quiet_seconds(plant, rng, windows * window)), 0.99)


def trimmed_baseline(plant, rng, window, drop=1):
    """The p99 of both windows' runs, less the `drop` seconds whose slowest run is slowest."""
    seconds = sorted(quiet_seconds(plant, rng, 2 * window), key=lambda runs: max(runs or [0.0]))
    return pct(flat(seconds[:len(seconds) - drop]), 0.99)


def outlier_baseline(plant, rng, window, over=3.0):
    """The p99 of both windows' runs, less the seconds whose slowest run is over `over` x
    the median second's slowest run (a stall of the machine, not the database's quiet)."""
    seconds = quiet_seconds(plant, rng, 2 * window)
    slowest = sorted(max(r or [0.0]) for r in seconds)
    median = slowest[len(slowest) // 2]
    return pct([v for r in seconds if max(r or [0.0]) <= over * median for v in r], 0.99)


def median_baseline(plant, rng, window, agree=None):
    """The median of three windows' p99; with `agree`, the third only when the first two's
    p99s are further than that ratio apart (else their pooled p99)."""
    windows = [flat(quiet_seconds(plant, rng, window)) for _ in range(3)]
    reads = [pct(w, 0.99) for w in windows]
    if agree and max(reads[:2]) <= agree * min(reads[:2]):
        return pct(windows[0] + windows[1], 0.99)
    return sorted(reads)[1]


BEST = None


def summary(results):
    """Over seeds: the rate, the share within, and on how many seeds both of the issue's bars
    were met (within >= 90% at >= 0.9 x `BEST`, the fastest fixed rate held on average)."""
    rates = sorted(r for r, _ in results)
    within = sorted(w for _, w in results)
    mean = lambda v: sum(v) / len(v)
    both = f", both bars in {sum(w >= 0.9 and r >= 0.9 * BEST for r, w in results)}" if BEST else ""
    return (f"{mean(rates):7.0f} rows/s ({rates[0]:.0f}-{rates[-1]:.0f}), within {mean(within):.0%} "
            f"({within[0]:.0%}-{within[-1]:.0%}), >=90% in {sum(w >= 0.9 for w in within)}/{len(within)}{both}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stats", nargs="?", default="target/auto-rate/stats.json")
    ap.add_argument("--source", default="canary", help="the logged canary: canary (1 client) or canary4")
    ap.add_argument("--thin", type=int, default=1, help="keep every n-th logged run (40/s -> 20/s: 2)")
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    stats = json.loads(Path(args.stats).read_text())
    stats["runs"][args.source] = sorted(tuple(r) for r in stats["runs"][args.source])[::args.thin]
    plant = Plant(stats, args.source)
    print(f"target {plant.target:.2f} ms; steps: " + ", ".join(
        f"{r:.0f} ({sum(p <= plant.target for _, p in s) / len(s):.0%} of {len(s)})" for r, s in plant.steps))
    seeds = range(args.seeds)
    global BEST
    held = []
    for fixed in sorted({round(r, -3) for r, _ in plant.steps if r}):
        res = [simulate(plant, random.Random(seed), args.rows, fixed=fixed) for seed in seeds]
        print(f"fixed {fixed:6.0f}: {summary(res)}")
        if sum(w for _, w in res) / len(res) >= 0.9 and (not held or held[-1] == fixed - 2000 or fixed <= 4000):
            held.append(fixed)
    BEST = held[-1] if held else None
    print(f"the best fixed rate: {BEST} (the fastest held on average, every slower one too)")
    strategies = {
        "a0707af's (p99 of 5 s, baseline the quieter of two windows, the peak kept)": dict(controller=lambda t, f: ProbeTarget(t, f, past_peak=None), baseline=quieter_baseline),
        "41a5313's (baseline: p99 of both windows' runs, the peak kept)": dict(controller=lambda t, f: ProbeTarget(t, f, past_peak=None), baseline=pooled_baseline),
        "as built (41a5313's, the peak forgotten past 1.2x it)": dict(controller=ProbeTarget, baseline=pooled_baseline),
        "the peak forgotten past 1.1x it": dict(controller=lambda t, f: ProbeTarget(t, f, past_peak=1.1), baseline=pooled_baseline),
        "baseline: p99 of six windows' runs (30 s)": dict(controller=ProbeTarget, baseline=lambda p, r, w: pooled_baseline(p, r, w, 6)),
        "baseline: p99 of both windows' runs less the slowest second": dict(controller=ProbeTarget, baseline=trimmed_baseline),
        "baseline: p99 of both windows' runs less the slowest two seconds": dict(controller=ProbeTarget, baseline=lambda p, r, w: trimmed_baseline(p, r, w, 2)),
        "baseline: pooled p99 less the seconds whose slowest run is over 2x the median second's": dict(controller=ProbeTarget, baseline=lambda p, r, w: outlier_baseline(p, r, w, 2.0)),
        "baseline: pooled p99 less the seconds whose slowest run is over 3x the median second's": dict(controller=ProbeTarget, baseline=outlier_baseline),
        "baseline: the median of three windows' p99 (15 s)": dict(controller=ProbeTarget, baseline=median_baseline, hold=15.0),
        "baseline: pooled p99 of two windows, a third and the median when they differ by 1.3x": dict(controller=ProbeTarget, baseline=lambda p, r, w: median_baseline(p, r, w, 1.3)),
        "readings over kept to 10% (cut 2% per reading over)": dict(controller=lambda t, f: ReadingShare(t, f), baseline=pooled_baseline),
        "readings over kept to 5% (cut 2% per reading over)": dict(controller=lambda t, f: ReadingShare(t, f, share=0.05), baseline=pooled_baseline),
        "readings over kept to 20% (cut 2% per reading over)": dict(controller=lambda t, f: ReadingShare(t, f, share=0.2), baseline=pooled_baseline),
        "readings over kept to 10% (cut 5% per reading over)": dict(controller=lambda t, f: ReadingShare(t, f, cut=0.05), baseline=pooled_baseline),
        "p99 of 10 s, paced per 10 s": dict(controller=lambda t, f: ProbeTarget(t, f, memory=10.0), window=10.0),
        "the median reading of 5 s": dict(controller=ProbeTarget, smooth=(5.0, 0.5)),
        "the 75th percentile reading of 5 s": dict(controller=ProbeTarget, smooth=(5.0, 0.75)),
        "cuts of a quarter per unit of excess": dict(controller=lambda t, f: ProbeTarget(t, f, decrease=0.25)),
        "growth up to x3 per memory": dict(controller=lambda t, f: ProbeTarget(t, f, increase=2.0)),
        "starting at 2,000 rows/s": dict(controller=lambda t, f: ProbeTarget(t, f, start=2000.0)),
        "runs over kept to 1% (cut 10% per run over)": dict(controller=lambda t, f: RunShare(t, f, cut=0.1)),
    }
    for name, kw in strategies.items():
        res = [simulate(plant, random.Random(seed), args.rows, **kw) for seed in seeds]
        print(f"{name}: {summary(res)}")
    for share, cut, hold in ((0.05, 0.1, 10), (0.1, 0.1, 10), (0.2, 0.1, 10), (0.1, 0.05, 10), (0.1, 0.2, 10),
                             (0.1, 0.1, 20), (0.15, 0.1, 10)):
        res = [simulate_seconds(plant, random.Random(seed), args.rows, SecondShare(share=share, cut=cut), hold=hold)
               for seed in seeds]
        print(f"seconds over kept to {share:.0%} (cut {cut:.0%} per second over, baseline of {hold} s): {summary(res)}")
    for n in (20, 30):
        res = [simulate_seconds(plant, random.Random(seed), args.rows, SecondShare(share=0.1, reclimb=n))
               for seed in seeds]
        print(f"seconds over kept to 10%, climbing again after {n} s under: {summary(res)}")
    res = [simulate_seconds(plant, random.Random(seed), args.rows, SecondShare(share=0.1), pooled=True) for seed in seeds]
    print(f"seconds over kept to 10%, the target twice the quiet runs' p99: {summary(res)}")


if __name__ == "__main__":
    main()
