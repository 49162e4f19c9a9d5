#!/usr/bin/env python3
"""The `rate = "auto"` experiment (issue #41): a bulk load into a PostgreSQL that serves a
"production" pgbench workload at a fixed transaction rate, by five strategies:

  (a) psql \\copy                     (no protection)
  (b) sluice, rate = "off"
  (c) sluice at fixed rates, swept:   the fastest that keeps production p99 within the
                                      target in >= 90% of 1 s windows (the best hand-tuned)
  (d) sluice, rate = "off" + canary max = "2x"   (today's threshold: hold above)
  (e) sluice, rate = "auto" + canary target = "2x"

One command, from the repository root (builds sluice first; `--release` for an optimized
build):

  python3 scripts/auto-rate-experiment.py            # 500,000 rows of ~1 KB
  python3 scripts/auto-rate-experiment.py --rows 100000 --sweep-rows 50000   # quicker

It starts a scratch cluster (initdb in a temp dir, run as the postgres user when run as
root), `pgbench -i`, measures the unthrottled tps once, runs the production workload at
`--production-share` of it (`-R`, built-in select-only by default, per-transaction `--log`), and for
each strategy: 15 s of production alone, then the load, then 5 s more. Production's
baseline p99 is measured alone for 30 s first; the target is twice it. The results go to
docs/bench/auto-rate.md (table) and docs/bench/auto-rate.svg (plot), the raw series to
target/auto-rate/.

First runs (2026-12-02, 2 cores) judged nothing yet: the strategies share one cluster one
after another, and a 500,000-row load leaves the next one a checkpoint of its dirty
buffers and WAL (load average 20 at the start of the third run; the canary's baseline
before (e)'s first write was 2.4 ms against 0.34 ms at the start), and a 2x target of a
0.34 ms p99 is broken by any process sharing the two cores. See issue #41's note.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "target" / "auto-rate"
CANARY_QUERY = "SELECT abalance FROM pgbench_accounts WHERE aid = 1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bin():
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    return versions[-1] if versions else Path(shutil.which("initdb")).parent


class Cluster:
    """A scratch PostgreSQL in a temp dir; stopped by stop()."""

    def __init__(self):
        self.bin = pg_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-auto-rate-"))
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            shutil.chown(self.dir, "postgres")
        self.port = free_port()
        self.data = self.dir / "data"
        self.tool("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        (self.data / "postgresql.auto.conf").write_text(
            f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
            f"unix_socket_directories = '{self.dir}'\n"
            "shared_buffers = '256MB'\nmax_wal_size = '4GB'\n"
            "synchronous_commit = on\nfsync = on\n"
        )
        self.tool("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-w", "start")
        self.sql("CREATE DATABASE bench", db="postgres")

    def command(self, tool, *args):
        exe = [str(self.bin / tool)] if (self.bin / tool).exists() else [tool]
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_postgres else []
        return prefix + exe + list(args)

    def tool(self, tool, *args):
        subprocess.run(self.command(tool, *args), check=True, capture_output=True)

    def url(self):
        return f"postgres://postgres@127.0.0.1:{self.port}/bench"

    def psql(self, *args, db="bench"):
        return ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", db, "-XtAq", *args]

    def sql(self, sql, db="bench"):
        out = subprocess.run(self.psql("-c", sql, db=db), check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def stop(self):
        subprocess.run(self.command("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop"),
                       capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


class Production:
    """pgbench at a fixed rate, logging every transaction; latencies per 1 s window."""

    def __init__(self, cluster, rate, name, builtin):
        # In the cluster's directory: pgbench may run as the postgres user.
        self.dir = cluster.dir / f"pgbench-{name}"
        self.dir.mkdir()
        if cluster.as_postgres:
            shutil.chown(self.dir, "postgres")
        self.proc = subprocess.Popen(
            cluster.command("pgbench", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres",
                            "-b", builtin, "-c", "4", "-j", "2", "-R", str(rate), "-T", "3600", "-n",
                            "-l", f"--log-prefix={self.dir}/tx", "bench"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.started = time.time()

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        time.sleep(0.5)
        windows = {}
        for log in self.dir.glob("tx*"):
            for line in log.read_text().splitlines():
                f = line.split()
                if len(f) < 6 or f[2] == "skipped":
                    continue
                # client tx latency_us script epoch_s epoch_us [lag_us]: latency as the
                # client sees it (with -R pgbench counts it from the scheduled start).
                windows.setdefault(int(f[4]), []).append(int(f[2]) / 1000.0)
        return windows


def pct(values, q):
    s = sorted(values)
    if not s:
        return float("nan")
    rank = max(1, int(-(-q * len(s) // 1)))
    return s[min(rank, len(s)) - 1]


def sample_rows(stop, get, into):
    """Rows loaded so far, once a second, into `into` as (epoch, rows)."""
    while not stop.is_set():
        try:
            into.append((time.time(), get()))
        except Exception:
            pass
        stop.wait(1.0)


def write_rows(path, rows):
    pad = "x" * 960
    with open(path, "w") as ndjson, open(str(path) + ".tsv", "w") as tsv:
        for i in range(1, rows + 1):
            record = json.dumps({"id": f"r{i}", "n": i, "pad": pad})
            ndjson.write(record + "\n")
            tsv.write(f"r{i}\t{record}\n")


def sluice_config(cluster, rows_file, table, rate, probe, listen):
    text = (
        f'[source]\nkind = "file"\npath = "{rows_file}"\ncheckpoint = "{OUT}/{table}.checkpoint"\n\n'
        f'[sink]\nkind = "postgres"\nurl = "{cluster.url()}"\ntable = "{table}"\nkey = "/id"\nmax_batch = 500\n\n'
        f"[rate]\nrecords_per_second = {rate}\n\n"
        f'[telemetry]\nlisten = "127.0.0.1:{listen}"\n'
    )
    if probe:
        text += f'\n[[health.probe]]\nbuiltin = "canary"\nquery = "{CANARY_QUERY}"\n{probe}\n'
    return text


def metric(port, name):
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode()
    for line in body.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def run_load(cluster, sluice, rows_file, name, rate=None, probe=None):
    """One load; returns (start, end, series of (epoch, rows), summary)."""
    table = f"load_{name}"
    cluster.sql(f"DROP TABLE IF EXISTS {table}")
    series, stop = [], threading.Event()
    start = time.time()
    summary = {}
    if rate is None:
        cluster.sql(f"CREATE TABLE {table} (key text PRIMARY KEY, payload jsonb, source text, "
                    "ingested_at timestamptz DEFAULT now())")
        get = lambda: float(cluster.sql(
            "SELECT coalesce(max(tuples_processed), 0) FROM pg_stat_progress_copy") or 0)
        sampler = threading.Thread(target=sample_rows, args=(stop, get, series))
        sampler.start()
        subprocess.run(cluster.psql("-c", f"\\copy {table} (key, payload) FROM '{rows_file}.tsv'"),
                       check=True, capture_output=True)
    else:
        checkpoint = OUT / f"{table}.checkpoint"
        checkpoint.unlink(missing_ok=True)
        port = free_port()
        config = OUT / f"{name}.toml"
        config.write_text(sluice_config(cluster, rows_file, table, rate, probe, port))
        log = open(OUT / f"{name}.log", "w")
        proc = subprocess.Popen([sluice, "run", "-c", str(config), "--until-empty", "--summary", "json"],
                                stdout=subprocess.PIPE, stderr=log, text=True,
                                env={**os.environ, "SLUICE_LOG": "info"})
        sampler = threading.Thread(target=sample_rows,
                                   args=(stop, lambda: metric(port, "sluice_records_written_total"), series))
        sampler.start()
        out, _ = proc.communicate()
        summary = json.loads(out.strip().splitlines()[-1])
    end = time.time()
    stop.set()
    sampler.join()
    rows = int(cluster.sql(f"SELECT count(*) FROM {table}"))
    series.append((end, rows))
    return start, end, series, summary, rows


def judge(windows, start, end, target, skip=0.0):
    """p50/p99 during the load, and the share of its whole 1 s windows within target
    (after `skip` seconds)."""
    during = [v for s, vs in windows.items() if start <= s < end for v in vs]
    judged = [s for s in windows if start + skip <= s and s + 1 <= end]
    within = sum(1 for s in judged if pct(windows[s], 0.99) <= target)
    return pct(during, 0.5), pct(during, 0.99), within / max(1, len(judged)), len(judged)


def strategy(cluster, sluice, rows_file, rows, name, prod_rate, builtin, **load):
    prod = Production(cluster, prod_rate, name, builtin)
    time.sleep(15)
    start, end, series, summary, written = run_load(cluster, sluice, rows_file, name, **load)
    time.sleep(5)
    windows = prod.stop()
    cluster.sql(f"DROP TABLE IF EXISTS load_{name}")
    cluster.sql("CHECKPOINT")
    return {"name": name, "start": start, "end": end, "series": series, "windows": windows,
            "summary": summary, "rows": written, "load": load,
            "rows_per_s": written / (end - start)}


def plot(results, target, path):
    """p99 per second and rows/s over time, one panel per strategy (a), (d), (e)."""
    w, panel_h, pad = 900, 220, 50
    h = pad + len(results) * (panel_h + pad)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>']
    for i, r in enumerate(results):
        top = pad + i * (panel_h + pad)
        t0 = r["start"] - 15
        t1 = r["end"] + 5
        span = max(1.0, t1 - t0)
        x = lambda t: 60 + (t - t0) / span * (w - 140)
        p99 = sorted((s, pct(v, 0.99)) for s, v in r["windows"].items() if t0 <= s <= t1)
        ymax = max([target * 1.5] + [v for _, v in p99])
        y = lambda v: top + panel_h - v / ymax * panel_h
        rates = [((a[0] + b[0]) / 2, (b[1] - a[1]) / max(1e-3, b[0] - a[0]))
                 for a, b in zip(r["series"], r["series"][1:])]
        rmax = max([1.0] + [v for _, v in rates]) * 1.1
        yr = lambda v: top + panel_h - v / rmax * panel_h
        out.append(f'<text x="60" y="{top - 8}" font-weight="bold">{r["label"]}</text>')
        out.append(f'<rect x="60" y="{top}" width="{w - 140}" height="{panel_h}" fill="none" stroke="#999"/>')
        out.append(f'<rect x="{x(r["start"]):.1f}" y="{top}" width="{x(r["end"]) - x(r["start"]):.1f}" height="{panel_h}" fill="#f3f3f3"/>')
        out.append(f'<line x1="60" x2="{w - 80}" y1="{y(target):.1f}" y2="{y(target):.1f}" stroke="#c00" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{w - 78}" y="{y(target) + 4:.1f}" fill="#c00">target</text>')
        out.append('<polyline fill="none" stroke="#1f5fbf" stroke-width="1.5" points="'
                   + " ".join(f"{x(s + 0.5):.1f},{y(v):.1f}" for s, v in p99) + '"/>')
        out.append('<polyline fill="none" stroke="#2a9d3f" stroke-width="1.5" points="'
                   + " ".join(f"{x(t):.1f},{yr(v):.1f}" for t, v in rates) + '"/>')
        out.append(f'<text x="4" y="{top + 12}" fill="#1f5fbf">{ymax:.0f} ms</text>')
        out.append(f'<text x="4" y="{top + 26}" fill="#2a9d3f">{rmax:.0f} rows/s</text>')
        out.append(f'<text x="4" y="{top + panel_h}">0</text>')
        out.append(f'<text x="{w - 140}" y="{top + panel_h + 16}">{span:.0f} s</text>')
    out.append(f'<text x="60" y="{h - 12}"><tspan fill="#1f5fbf">production p99 per 1 s window</tspan> · '
               '<tspan fill="#2a9d3f">load rows/s</tspan> · grey: the load · dashed: the target (2 × baseline p99)</text>')
    out.append("</svg>")
    path.write_text("\n".join(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--sweep-rows", type=int, default=150_000)
    ap.add_argument("--builtin", default="select-only",
                    help="pgbench's built-in script for production: select-only (primary-key reads, "
                         "as a serving replica or a read-heavy primary) or tpcb-like (writes: every "
                         "commit waits for its WAL flush, so the disk's fsync stalls set the p99)")
    # 0.3 left no headroom on 2 cores: production fell behind its -R schedule at every
    # fixed load rate tried, even 4,762 rows/s (p50 5.6 s), so nothing could be judged.
    ap.add_argument("--production-share", type=float, default=0.1,
                    help="pgbench -R as a share of its unthrottled tps")
    ap.add_argument("--sweep", default="0.15,0.25,0.35,0.5,0.7",
                    help="fixed rates tried, as shares of rate = off's rows/s")
    ap.add_argument("--sluice", default=None, help="the binary (default: cargo build, debug)")
    ap.add_argument("--release", action="store_true", help="build and run sluice in release mode")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    sluice = args.sluice
    if not sluice:
        profile = ["--release"] if args.release else []
        subprocess.run(["cargo", "build", *profile, "--bin", "sluice"], cwd=ROOT, check=True)
        sluice = str(ROOT / "target" / ("release" if args.release else "debug") / "sluice")
    load_before = os.getloadavg()
    cluster = Cluster()
    try:
        cluster.tool("pgbench", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres",
                     "-i", "-s", "10", "-q", "bench")
        rows_file = OUT / "rows.ndjson"
        sweep_file = OUT / "sweep.ndjson"
        write_rows(rows_file, args.rows)
        write_rows(sweep_file, args.sweep_rows)
        full = subprocess.run(cluster.command("pgbench", "-h", "127.0.0.1", "-p", str(cluster.port),
                                              "-U", "postgres", "-b", args.builtin, "-c", "4", "-j", "2",
                                              "-T", "10", "-n", "bench"),
                              capture_output=True, text=True, check=True).stdout
        tps = float(next(l for l in full.splitlines() if l.startswith("tps")).split()[2])
        prod_rate = max(10, int(tps * args.production_share))
        print(f"pgbench unthrottled {tps:.0f} tps; production at -R {prod_rate}", flush=True)
        cluster.sql("CHECKPOINT")
        base = Production(cluster, prod_rate, "baseline", args.builtin)
        time.sleep(30)
        windows = base.stop()
        every = [v for vs in windows.values() for v in vs]
        base_p50, base_p99 = pct(every, 0.5), pct(every, 0.99)
        target = 2 * base_p99
        print(f"baseline p50 {base_p50:.2f} ms p99 {base_p99:.2f} ms; target {target:.2f} ms", flush=True)
        results = {}

        def go(key, label, rows_file=rows_file, rows=args.rows, skip=0.0, **load):
            r = strategy(cluster, sluice, rows_file, rows, key, prod_rate, args.builtin, **load)
            r["label"] = label
            r["p50"], r["p99"], r["within"], r["windows_judged"] = judge(r["windows"], r["start"], r["end"], target, skip)
            print(f"{label}: {r['rows_per_s']:.0f} rows/s, p50 {r['p50']:.2f} p99 {r['p99']:.2f} ms, "
                  f"{100 * r['within']:.0f}% of {r['windows_judged']} windows within target", flush=True)
            return r

        results["a"] = go("a", "(a) psql \\copy")
        results["b"] = go("b", "(b) sluice rate = \"off\"", rate='"off"')
        sweep = []
        for share in [float(s) for s in args.sweep.split(",")]:
            rate = max(100, int(results["b"]["rows_per_s"] * share))
            sweep.append(go(f"c{rate}", f"(c) sluice rate = {rate} (sweep)", rows_file=sweep_file,
                            rows=args.sweep_rows, rate=str(rate)))
        passing = [r for r in sweep if r["within"] >= 0.9]
        best = max(passing, key=lambda r: int(r["load"]["rate"])) if passing else min(sweep, key=lambda r: int(r["load"]["rate"]))
        best_rate = best["load"]["rate"]
        results["c"] = go("c", f"(c) sluice rate = {best_rate} (best hand-tuned)", rate=best_rate)
        results["d"] = go("d", "(d) sluice rate = \"off\", canary max = \"2x\"", rate='"off"', probe='max = "2x"')
        results["e"] = go("e", "(e) sluice rate = \"auto\", canary target = \"2x\"", skip=10.0,
                          rate='"auto"', probe='target = "2x"')
        load_after = os.getloadavg()
        report(results, sweep, tps, prod_rate, base_p50, base_p99, target, load_before, load_after, args)
        plot([results["a"], results["d"], results["e"]], target, ROOT / "docs" / "bench" / "auto-rate.svg")
        (OUT / "results.json").write_text(json.dumps(
            {k: {x: v for x, v in r.items() if x not in ("windows",)} for k, r in results.items()}, default=str))
    finally:
        cluster.stop()


def report(results, sweep, tps, prod_rate, base_p50, base_p99, target, load_before, load_after, args):
    lines = [
        "| strategy | load rows/s | vs (c) | production p50 (ms) | p99 (ms) | p99 / baseline | 1 s windows within target |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    best = results["c"]["rows_per_s"]
    for key in "abcde":
        r = results[key]
        lines.append(
            f"| {r['label']} | {r['rows_per_s']:,.0f} | {r['rows_per_s'] / best:.2f} | {r['p50']:.2f} | {r['p99']:.2f} | "
            f"{r['p99'] / base_p99:.2f} | {100 * r['within']:.0f}% of {r['windows_judged']}"
            f"{' (after its first 10 s)' if key == 'e' else ''} |")
    sweep_lines = ["| fixed rate | load rows/s | p99 (ms) | windows within target |", "|---:|---:|---:|---:|"]
    for r in sweep:
        sweep_lines.append(f"| {int(r['load']['rate']):,} | {r['rows_per_s']:,.0f} | {r['p99']:.2f} | "
                           f"{100 * r['within']:.0f}% of {r['windows_judged']} |")
    text = "\n".join([
        f"rows {args.rows:,} of ~1 KB (sweep runs: {args.sweep_rows:,}); pgbench {args.builtin}, 4 clients, "
        f"unthrottled {tps:.0f} tps, production at -R {prod_rate}; baseline p50 {base_p50:.2f} ms, "
        f"p99 {base_p99:.2f} ms; target {target:.2f} ms; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after.",
        "", *lines, "", "Sweep:", "", *sweep_lines, "",
    ])
    (OUT / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
