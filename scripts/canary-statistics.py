#!/usr/bin/env python3
"""Which reading of a canary follows production's p99? One scratch PostgreSQL, production
as in scripts/auto-rate-experiment.py, a canary that logs every run (pgbench, one client,
the same range read, at the load's nice +10), and one sluice load stepped through fixed
rates by `sluice ctl rate` (in a shuffled order, so the table's growth is not read as the
rate's effect). For each step: the share of production's 1 s windows within its target
(2 x its baseline p99), and each candidate statistic of the canary (read every 200 ms over
its trailing window) as a multiple of its own baseline: median and 10th/90th percentile
over the step.

  python3 scripts/canary-statistics.py target/release/sluice [--steps 4000,12000,...]
"""
import argparse
import importlib.util
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

spec = importlib.util.spec_from_file_location("x", Path(__file__).with_name("auto-rate-experiment.py"))
x = importlib.util.module_from_spec(spec)
spec.loader.exec_module(x)


def window_at(samples, at, span):
    """The canary runs of the `span` seconds up to `at`."""
    w = [v for t, v in samples if at - span < t <= at]
    return w


def candidates(base):
    """name -> (span s, function of the window's latencies)."""
    p50 = base["p50"]
    out = {
        "p90/2s": (2, lambda w: x.pct(w, 0.9)),
        "p99/5s": (5, lambda w: x.pct(w, 0.99)),
        "p99/10s": (10, lambda w: x.pct(w, 0.99)),
        "mean/2s": (2, lambda w: sum(w) / len(w)),
        "mean/5s": (5, lambda w: sum(w) / len(w)),
        "cvar90/5s": (5, lambda w: (lambda s: sum(s) / len(s))(sorted(w)[-max(1, len(w) // 10):])),
        "cvar90/10s": (10, lambda w: (lambda s: sum(s) / len(s))(sorted(w)[-max(1, len(w) // 10):])),
    }
    for k in (1.5, 2.0, 3.0):
        out[f"share>{k}xp50/5s"] = (5, lambda w, k=k: sum(1 for v in w if v > k * p50) / len(w))
        out[f"share>{k}xp50/10s"] = (10, lambda w, k=k: sum(1 for v in w if v > k * p50) / len(w))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sluice")
    ap.add_argument("--steps", default="4000,16000,8000,0,12000,24000,6000,20000,10000,14000")
    ap.add_argument("--step-seconds", type=int, default=25)
    ap.add_argument("--canary-rate", type=int, default=20)
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--range", type=int, default=10000)
    ap.add_argument("--production-share", type=float, default=0.15)
    args = ap.parse_args()
    args.db_cpus = args.client_cpus = "0,1"
    args.database, args.canary, args.builtin = "postgres", [], "select-only"
    steps = [int(s) for s in args.steps.split(",")]
    x.OUT.mkdir(parents=True, exist_ok=True)
    rows_file = x.OUT / "stats.ndjson"
    total = int(sum(steps) * args.step_seconds * 1.1) + 50_000
    x.write_rows(rows_file, total)
    db = x.database(args)
    marks = []
    try:
        tps = db.unthrottled_tps(args)
        prod_rate = max(10, int(tps * args.production_share))
        prod = db.production(prod_rate, "stats", args)
        script = db.dir / "canary.sql"
        script.write_text(x.canary_query(args) + ";\n")
        if db.as_postgres:
            shutil.chown(script, "postgres")
        canary = x.Production(db, args.canary_rate, "canary", args, connections=1, nice=10, script=script)
        time.sleep(30)
        quiet_end = time.time()
        port = x.free_port()
        cfg = x.OUT / "stats.toml"
        cfg.write_text(x.sluice_config(db, rows_file, "load_stats", max(steps), None, port, args))
        (x.OUT / "load_stats.checkpoint").unlink(missing_ok=True)
        db.create_table("load_stats")
        log = open(x.OUT / "stats.log", "w")
        proc = subprocess.Popen(x.clients(args, 10) + [args.sluice, "run", "-c", str(cfg), "--until-empty"],
                                stdout=subprocess.DEVNULL, stderr=log)
        time.sleep(2)
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
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        windows = prod.stop()
        canary.stop()
        samples = canary.runs
    finally:
        db.stop()
    base_windows = [x.pct(v, 0.99) for s, v in windows.items() if quiet_end - 28 <= s < quiet_end - 1]
    base_p99 = sorted(base_windows)[len(base_windows) // 2]
    target = 2 * base_p99
    quiet = [v for t, v in samples if quiet_end - 28 <= t < quiet_end]
    base = {"p50": x.pct(quiet, 0.5)}
    cands = candidates(base)
    base_vals = {}
    for name, (span, f) in cands.items():
        vals = []
        t = quiet_end - 28 + span
        while t < quiet_end:
            w = window_at(samples, t, span)
            if w:
                vals.append(f(w))
            t += 0.2
        # A share is shown as it is (its baseline is near 0): 1 stands for none of the runs.
        base_vals[name] = 1.0 if name.startswith("share") else sorted(vals)[len(vals) // 2]
    print(f"production {prod_rate} tps; baseline p99 {base_p99:.2f} ms, target {target:.2f} ms; "
          f"canary baseline p50 {base['p50']:.2f} ms, {len(quiet)} runs in 28 s")
    result = {"target": target, "base": base_vals, "steps": []}
    print("| step rate | achieved | prod windows within | prod p99 med | " + " | ".join(cands) + " |")
    for i, (begun, rate, achieved) in enumerate(marks):
        stop = marks[i + 1][0] if i + 1 < len(marks) else end
        judged = [s for s in windows if begun + 5 <= s and s + 1 <= stop]
        within = sum(1 for s in judged if x.pct(windows[s], 0.99) <= target) / max(1, len(judged))
        p99s = sorted(x.pct(windows[s], 0.99) for s in judged)
        cells = []
        row = {"rate": rate, "achieved": achieved, "within": within, "stats": {}}
        for name, (span, f) in cands.items():
            vals = []
            t = begun + 5
            while t < stop:
                w = window_at(samples, t, span)
                if w:
                    vals.append(f(w) / base_vals[name])
                t += 0.2
            vals.sort()
            q = lambda p: vals[min(len(vals) - 1, int(p * len(vals)))] if vals else float("nan")
            cells.append(f"{q(0.5):.2f} ({q(0.1):.2f}-{q(0.9):.2f})")
            row["stats"][name] = [q(0.1), q(0.5), q(0.9)]
        result["steps"].append(row)
        print(f"| {rate} | {achieved:.0f} | {within:.0%} of {len(judged)} | {p99s[len(p99s) // 2]:.2f} | " + " | ".join(cells) + " |")
    (x.OUT / "stats.json").write_text(json.dumps({"result": result, "samples": samples,
                                                  "windows": {str(k): v for k, v in windows.items()},
                                                  "marks": marks, "quiet_end": quiet_end}))


if __name__ == "__main__":
    main()
