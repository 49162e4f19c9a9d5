#!/usr/bin/env python3
"""Which reading of the database follows production's p99? One scratch PostgreSQL (with
pg_stat_statements), production as in scripts/auto-rate-experiment.py, and one sluice load
stepped through fixed rates by `sluice ctl rate` (in a shuffled order, so the table's growth
is not read as the rate's effect). Read beside it: a canary that logs every run (pgbench,
one client, the same range read, at the load's nice +10), one shaped as production (four
clients at its priority), sluice's own canary (as /metrics shows it: its p99 over 5 s), and
production's statements as pg_stat_statements times them (server-side: mean and mean + 2.33
standard deviations), and the machine's CPU pressure (the share of time some task waited
for a core, /proc/pressure/cpu). For each step: the share of production's 1 s windows
within its target (2 x its baseline p99), and each reading (every 200 ms) as a multiple of
its value in the quiet 25 s before the first step — the CPU pressure as itself, its quiet
value being near 0 — median and 10th/90th percentile over the step.

  python3 scripts/canary-statistics.py target/release/sluice [--steps 4000,12000,...]
"""
import argparse
import importlib.util
import json
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

spec = importlib.util.spec_from_file_location("x", Path(__file__).with_name("auto-rate-experiment.py"))
x = importlib.util.module_from_spec(spec)
spec.loader.exec_module(x)


def window_at(samples, at, span):
    """The canary runs of the `span` seconds up to `at`."""
    return [v for t, v in samples if at - span < t <= at]


def run_statistics():
    """name -> (span s, function of a window of runs' latencies)."""
    return {
        "p90/2s": (2, lambda w: x.pct(w, 0.9)),
        "p99/5s": (5, lambda w: x.pct(w, 0.99)),
        "p99/10s": (10, lambda w: x.pct(w, 0.99)),
        "mean/5s": (5, lambda w: sum(w) / len(w)),
    }


def run_series(samples, begin, end, span, f):
    """A statistic of the runs read every 200 ms over its trailing window."""
    out, t = [], begin
    while t < end:
        w = window_at(samples, t, span)
        if w:
            out.append((t, f(w)))
        t += 0.2
    return out


def trailing(samples, span):
    """Each cumulative sample (its epoch first) with the last one `span` seconds or more
    before it, once there is one."""
    for i, sample in enumerate(samples):
        j = i
        while j > 0 and samples[j - 1][0] > sample[0] - span:
            j -= 1
        if j > 0:
            yield sample, samples[j - 1]


def statement_series(samples, span, tail):
    """Production's statements as pg_stat_statements counts them (server-side execution
    time): their mean over the trailing `span` seconds, or with `tail` the mean plus 2.33
    standard deviations (where a normal's p99 would be). `samples`: (epoch, calls, total
    ms, sum of squares) cumulative, every 200 ms."""
    out = []
    for (t, calls, total, sq), (_, c0, t0, q0) in trailing(samples, span):
        n = calls - c0
        if n <= 0:
            continue
        mean = (total - t0) / n
        sd = max(0.0, (sq - q0) / n - mean * mean) ** 0.5
        out.append((t, mean + 2.33 * sd if tail else mean))
    return out


def pressure_series(samples, span):
    """The share of the trailing `span` seconds in which some task waited for a core
    (Linux PSI, /proc/pressure/cpu "some"). `samples`: (epoch, cumulative µs), every 200 ms."""
    return [(t, (total - total0) / 1e6 / (t - t0)) for (t, total), (t0, total0) in trailing(samples, span)]


def sample_pressure(stop, samples):
    """/proc/pressure/cpu's cumulative "some" stall, every 200 ms, until `stop`."""
    while not stop.is_set():
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        samples.append((time.time(), int(line.rsplit("total=", 1)[1])))
        time.sleep(0.2)


class Statements:
    """pg_stat_statements read every 200 ms by one psql (`\\watch`): production's range
    read (its text has the `+` the canary's lacks) as cumulative calls, time and sum of
    squares."""

    QUERY = ("SELECT extract(epoch FROM clock_timestamp()), coalesce(sum(calls), 0), "
             "coalesce(sum(total_exec_time), 0), "
             "coalesce(sum(calls * (stddev_exec_time ^ 2 + mean_exec_time ^ 2)), 0) "
             "FROM pg_stat_statements WHERE query LIKE 'SELECT sum(abalance)%+%'")

    def __init__(self, db, args):
        self.proc = subprocess.Popen(x.clients(args, -5) + db.psql(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.proc.stdin.write(self.QUERY + " \\watch 0.2\n")
        self.proc.stdin.flush()
        self.samples = []
        self.reader = threading.Thread(target=self.read)
        self.reader.start()

    def read(self):
        for line in self.proc.stdout:
            f = line.strip().split("|")
            if len(f) == 4:
                self.samples.append(tuple(float(v) for v in f))

    def stop(self):
        self.proc.kill()
        self.reader.join()
        return self.samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sluice")
    ap.add_argument("--steps", default="4000,16000,8000,0,12000,24000,6000,20000,10000,14000")
    ap.add_argument("--step-seconds", type=int, default=25)
    ap.add_argument("--canary-rate", type=int, default=20, help="runs a second of the one-client canary")
    ap.add_argument("--shaped-rate", type=int, default=20, help="runs a second of the four-client canary")
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--range", type=int, default=10000)
    ap.add_argument("--production-share", type=float, default=0.15)
    args = ap.parse_args()
    args.db_cpus = args.client_cpus = "0,1"
    args.database, args.canary, args.builtin = "postgres", [], "select-only"
    args.statements = True
    steps = [int(s) for s in args.steps.split(",")]
    x.OUT.mkdir(parents=True, exist_ok=True)
    rows_file = x.OUT / "stats.ndjson"
    total = int(sum(steps) * args.step_seconds * 1.1) + 50_000
    x.write_rows(rows_file, total)
    db = x.database(args)
    marks, ours, stop = [], [], threading.Event()
    try:
        tps = db.unthrottled_tps(args)
        prod_rate = max(10, int(tps * args.production_share))
        prod = db.production(prod_rate, "stats", args)
        script = db.dir / "canary.sql"
        script.write_text(x.canary_query(args) + ";\n")
        if db.as_postgres:
            shutil.chown(script, "postgres")
        # A canary of one client at the load's priority, and one shaped as production is
        # (four clients at its priority).
        canary = x.Production(db, args.canary_rate, "canary", args, connections=1, nice=10, script=script)
        canary4 = x.Production(db, args.shaped_rate, "canary4", args, connections=4, nice=-5, script=script)
        statements = Statements(db, args)
        # sluice starts paused (`ctl rate` steers under the configured ceiling): its own
        # canary (never holding: `max` far out of reach) reads the quiet period too.
        port = x.free_port()
        cfg = x.OUT / "stats.toml"
        cfg.write_text(x.sluice_config(db, rows_file, "load_stats", max(steps), 'max = "10s"', port, args))
        (x.OUT / "load_stats.checkpoint").unlink(missing_ok=True)
        db.create_table("load_stats")
        log = open(x.OUT / "stats.log", "w")
        proc = subprocess.Popen(x.clients(args, 10) + [args.sluice, "run", "-c", str(cfg), "--until-empty"],
                                stdout=subprocess.DEVNULL, stderr=log)
        while subprocess.run([args.sluice, "ctl", "-c", str(cfg), "pause"], capture_output=True).returncode:
            time.sleep(0.1)
        marks.append((time.time(), 0, 0.0))
        # sluice's own canary as /metrics shows it (its p99 over its window), every 200 ms.
        sampler = threading.Thread(target=x.sample_rows, args=(
            stop, lambda: x.metrics(port, "sluice_health_probe"), ours, 0.2))
        sampler.start()
        pressure = []
        psi = threading.Thread(target=sample_pressure, args=(stop, pressure))
        if Path("/proc/pressure/cpu").exists():
            psi.start()
        time.sleep(30)
        quiet_end = time.time()
        for rate in steps:
            action = ["pause"] if rate == 0 else ["rate", str(rate)]
            if rate != 0 and marks and marks[-1][1] == 0:
                subprocess.run([args.sluice, "ctl", "-c", str(cfg), "resume"], capture_output=True)
            subprocess.run([args.sluice, "ctl", "-c", str(cfg), *action], capture_output=True, check=True)
            begun = time.time()
            before = x.metrics(port, "sluice_records_written_total")[0]
            time.sleep(args.step_seconds)
            if proc.poll() is not None:
                break
            after = x.metrics(port, "sluice_records_written_total")[0]
            marks.append((begun, rate, (after - before) / (time.time() - begun)))
            print(f"step {rate}: {marks[-1][2]:.0f} rows/s", flush=True)
        end = time.time()
        marks.pop(0)
        stop.set()
        sampler.join()
        if psi.is_alive():
            psi.join()
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        stmts = statements.stop()
        windows = prod.stop()
        canary.stop()
        canary4.stop()
    finally:
        db.stop()
    quiet = (quiet_end - 25, quiet_end)
    base_windows = [x.pct(v, 0.99) for s, v in windows.items() if quiet[0] <= s < quiet[1] - 1]
    base_p99 = sorted(base_windows)[len(base_windows) // 2]
    target = 2 * base_p99
    series = {}
    for who, runs in (("canary", canary.runs), ("canary4", canary4.runs)):
        for name, (span, f) in run_statistics().items():
            series[f"{who} {name}"] = run_series(runs, quiet[0] - 10, end, span, f)
    series["sluice canary"] = [(t, v) for t, v in ours if v == v]
    for span in (1, 2, 5):
        series[f"statements mean/{span}s"] = statement_series(stmts, span, tail=False)
    for span in (2, 5):
        series[f"statements tail/{span}s"] = statement_series(stmts, span, tail=True)
    # Read as itself (a share of time: its quiet value is near 0, no ratio to it).
    absolute = {f"cpu pressure/{span}s" for span in (1, 5)}
    for span in (1, 5):
        series[f"cpu pressure/{span}s"] = pressure_series(pressure, span)
    base_vals = {}
    for name, s in series.items():
        vals = sorted(v for t, v in s if quiet[0] <= t < quiet[1])
        base_vals[name] = vals[len(vals) // 2] if vals else float("nan")
    scale = {name: 1.0 if name in absolute else v for name, v in base_vals.items()}
    print(f"production {prod_rate} tps; baseline p99 {base_p99:.2f} ms, target {target:.2f} ms; "
          "quiet values: " + ", ".join(f"{n} {v:.2f}" for n, v in base_vals.items()))
    result = {"target": target, "base": base_vals, "steps": []}
    print("| step rate | achieved | prod windows within | prod p99 med | " + " | ".join(series) + " |")
    for i, (begun, rate, achieved) in enumerate(marks):
        stop_at = marks[i + 1][0] if i + 1 < len(marks) else end
        judged = [s for s in windows if begun + 5 <= s and s + 1 <= stop_at]
        within = sum(1 for s in judged if x.pct(windows[s], 0.99) <= target) / max(1, len(judged))
        p99s = sorted(x.pct(windows[s], 0.99) for s in judged)
        cells = []
        row = {"rate": rate, "achieved": achieved, "within": within, "stats": {}}
        for name, s in series.items():
            vals = sorted(v / scale[name] for t, v in s if begun + 5 <= t < stop_at)
            q = lambda p: vals[min(len(vals) - 1, int(p * len(vals)))] if vals else float("nan")
            cells.append(f"{q(0.5):.2f} ({q(0.1):.2f}-{q(0.9):.2f})")
            row["stats"][name] = [q(0.1), q(0.5), q(0.9)]
        result["steps"].append(row)
        print(f"| {rate} | {achieved:.0f} | {within:.0%} of {len(judged)} | {p99s[len(p99s) // 2]:.2f} | "
              + " | ".join(cells) + " |")
    (x.OUT / "stats.json").write_text(json.dumps({"result": result, "series": series,
                                                  "windows": {str(k): v for k, v in windows.items()},
                                                  "marks": marks, "quiet_end": quiet_end,
                                                  "runs": {"canary": canary.runs, "canary4": canary4.runs}}))


if __name__ == "__main__":
    main()
