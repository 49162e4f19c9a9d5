#!/usr/bin/env python3
"""Does the worker's own side inflate its canary? During one load at a fixed rate (beside
production, as in scripts/auto-rate-experiment.py), the canary is read three ways: the
worker's own (its /metrics, at the load's nice +10), and `sluice plan` timing the same
query from a process of its own at nice +10 and at nice -5 (production's priority).

  python3 scripts/canary-diagnostic.py target/release/sluice [rate=8000] [mariadb|postgres]
"""
import argparse
import importlib.util
import statistics
import subprocess
import sys
import time
spec = importlib.util.spec_from_file_location("x", __import__("pathlib").Path(__file__).with_name("auto-rate-experiment.py"))
x = importlib.util.module_from_spec(spec); spec.loader.exec_module(x)
SLUICE = sys.argv[1]
RATE = sys.argv[2] if len(sys.argv) > 2 else "8000"
DBKIND = sys.argv[3] if len(sys.argv) > 3 else "mariadb"
args = argparse.Namespace(db_cpus="0,1", client_cpus="0,1", scale=2 if DBKIND == "mariadb" else 10, range=10000,
                          database=DBKIND, canary=[], builtin="select-only")
x.OUT.mkdir(parents=True, exist_ok=True)
rows = x.OUT / "diag.ndjson"
x.write_rows(rows, 1_500_000)
db = x.database(args)
try:
    tps = db.unthrottled_tps(args)
    prod = db.production(max(10, int(tps * 0.15)), "diag", args)
    time.sleep(10)
    port = x.free_port()
    cfg = x.OUT / "diag.toml"
    cfg.write_text(x.sluice_config(db, rows, "load_diag", RATE, 'max = "100x"', port, args))
    def plan_reading(nice):
        out = subprocess.run(["taskset", "-c", "0,1", "nice", "-n", str(nice), SLUICE, "plan", "-c", str(cfg)],
                             capture_output=True, text=True).stdout + ""
        for line in out.splitlines():
            if "baseline" in line and "measured now" in line:
                return float(line.split("baseline")[1].split("ms")[0])
        return None
    idle = {n: [plan_reading(n) for _ in range(3)] for n in (10, -5)}
    print("before the load: plan +10", idle[10], "plan -5", idle[-5], flush=True)
    log = open(x.OUT / "diag.log", "w")
    proc = subprocess.Popen(x.clients(args, 10) + [SLUICE, "run", "-c", str(cfg), "--until-empty"],
                            stdout=subprocess.DEVNULL, stderr=log)
    time.sleep(8)
    worker, ext = [], {10: [], -5: []}
    t0 = time.time()
    while time.time() - t0 < 60 and proc.poll() is None:
        for n in (10, -5):
            v = plan_reading(n)
            if v is not None:
                ext[n].append(v)
            try:
                worker.append(x.metrics(port, "sluice_health_probe")[0] * 1000)
            except Exception:
                pass
    proc.kill(); proc.wait()
    med = lambda v: round(statistics.median([a for a in v if a == a]), 2) if v else None
    print(f"during the load at {RATE} rows/s: worker's canary p90 median {med(worker)} ms ({len(worker)} readings); "
          f"plan at nice +10: median {med(ext[10])} ({len(ext[10])}); plan at nice -5: median {med(ext[-5])} ({len(ext[-5])})")
    print("worker", [round(a, 2) for a in worker]); print("+10", ext[10]); print("-5", ext[-5])
    prod.stop()
finally:
    db.stop()
