#!/usr/bin/env python3
"""The `rate = "auto"` experiment (issue #41): a bulk load into a PostgreSQL that serves a
"production" pgbench workload at a fixed transaction rate, by five strategies:

  (a) psql \\copy                     (no protection)
  (b) sluice, rate = "off"
  (c) sluice at fixed rates, swept:   the fastest that keeps production p99 within the
                                      target in >= 90% of 1 s windows over the whole load
                                      (the best hand-tuned: the sweep's 30 s points find a
                                      candidate, whole-load runs confirm it or go slower)
  (d) sluice, rate = "off" + canary max = "2x"   (today's threshold: hold above)
  (e) sluice, rate = "auto" + canary target = "2x"
  (s) with --steady R1,R2,..: sluice at each fixed rate, in every --repeat (a rate's run-to-run spread)
  (w) with --switch LO,HI: sluice at a rate switched between the two every --switch-seconds, to set
      against (c) at a steady --fixed of their mean (what a moving rate costs)

One command, from the repository root (`--release` builds sluice optimized first):

  python3 scripts/auto-rate-experiment.py --release
  python3 scripts/auto-rate-experiment.py --release --database mariadb --rows 1000000 --scale 2
  python3 scripts/auto-rate-experiment.py --release --knee

`--database mariadb` runs the same against a scratch MariaDB with sysbench as production
(installed with apt-get when missing); `--knee` runs `rate = "auto"` against sim-sink's
latency knee.

Every strategy runs on a fresh scratch cluster (initdb in a temp dir, run as the postgres
user when run as root; `pgbench -i -s 10`; shared_buffers over the load, no checkpoint
inside a run): 25 s of production alone, the load, 5 s more. Production is pgbench at
`--production-share` of its unthrottled tps (`-R`, per-transaction `--log`), by default a
read that does work (the sum of 10,000 accounts' balances, ~1 ms of CPU; `--range 0
--builtin select-only` for the built-in). The target is twice production's baseline p99 —
the median 1 s window's, measured alone on the strategy's own cluster in the 23 s before its
load — and each strategy is judged by its share of 1 s windows within it (until
2026-12-07 one baseline, measured alone for 30 s on a cluster of its own at the start,
judged them all; the table shows that judgment beside; docs/bench/auto-rate.md, "Each
load judged against its own quiet", says why). The clients (pgbench, psql, sluice) run at other
priorities than the database (pgbench -5, the load +10), as on hosts of their own: what is
judged is what the load does to the database. The table goes to target/auto-rate/table.md,
the plot of (a), (d), (e) to docs/bench/auto-rate.svg, each strategy's series to
target/auto-rate/<key>.json.

Why this shape (runs of 2026-12-02 and -04, 2 cores; see docs/bench/auto-rate.md): with
the strategies one after another on one cluster, a 500,000-row load left the next a
checkpoint of its dirty buffers (load average 20); with pgbench's select-only (0.2 ms) on
one core, a 2x target of its p99 broke at any load that held the core 1% of a second (500
rows/s: 85% of windows within it), since a query that arrives during another's time slice
waits out the slice; with production at 30% of the machine, 1,000 rows/s already broke it
in 12% of windows. At 15% and a read of ~1 ms, the contention is real ((a) and (b) break
the target) and there is room to load beside it.
"""

import argparse
import itertools
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
# The canary: a query like production's. A primary-key lookup (50 us) read 0.12-0.35 ms
# while the load took production's p99 from 4.7 to 12 ms: a query that short is scheduled
# at once beside a busy backend, where one that works for a millisecond shares the core.
PK_CANARY = "SELECT abalance FROM pgbench_accounts WHERE aid = 1"


def canary_query(args):
    if not args.range:
        return PK_CANARY
    return f"SELECT sum(abalance) FROM pgbench_accounts WHERE aid BETWEEN 1 AND {1 + args.range}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bin():
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    return versions[-1] if versions else Path(shutil.which("initdb")).parent


class Cluster:
    """A scratch PostgreSQL in a temp dir, on its own core(s); stopped by stop().

    Each strategy gets a fresh one: a 500,000-row load leaves dirty buffers, WAL and a
    checkpoint behind that the next strategy would otherwise pay for (the first runs'
    mistake). shared_buffers holds the load and pgbench's tables, and no checkpoint falls
    inside a run: what the load costs is CPU, WAL and its commits' fsyncs, as on a
    database sized for its data."""

    def __init__(self, cpus, scale, statements=False):
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
            "shared_buffers = '4GB'\nmax_wal_size = '16GB'\ncheckpoint_timeout = '30min'\n"
            "synchronous_commit = on\nfsync = on\n"
            + ("shared_preload_libraries = 'pg_stat_statements'\n" if statements else "")
        )
        # The database's host: every backend inherits the postmaster's affinity, so
        # production's, the load's and the canary's backends share these cores.
        subprocess.run(["taskset", "-c", cpus, *self.command(
            "pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-w", "start")],
            check=True, capture_output=True)
        self.sql("CREATE DATABASE bench", db="postgres")
        if statements:
            self.sql("CREATE EXTENSION pg_stat_statements")
        self.tool("pgbench", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                  "-i", "-s", str(scale), "-q", "bench")
        self.sql("VACUUM ANALYZE")
        self.sql("CHECKPOINT")
        subprocess.run(["sync"])

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

    sink_kind = "postgres"
    name = "PostgreSQL"

    def create_table(self, table):
        self.sql(f"CREATE TABLE {table} (key text PRIMARY KEY, payload jsonb, source text, "
                 "ingested_at timestamptz DEFAULT now())")

    def copy_progress(self):
        return float(self.sql("SELECT coalesce(max(tuples_processed), 0) FROM pg_stat_progress_copy") or 0)

    def copy(self, table, tsv, args):
        subprocess.run(clients(args, 10) + self.psql("-c", f"\\copy {table} (key, payload) FROM '{tsv}'"),
                       check=True, capture_output=True)

    def canary_query(self, args):
        return canary_query(args)

    def production(self, rate, name, args):
        return Production(self, rate, name, args)

    def unthrottled_tps(self, args):
        out = subprocess.run(clients(args, -5) + self.command(
            "pgbench", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
            *workload(self, args), "-c", "4", "-j", "2", "-T", "10", "-n", "bench"),
            capture_output=True, text=True, check=True).stdout
        return float(next(l for l in out.splitlines() if l.startswith("tps")).split()[2])

    def settle(self):
        self.sql("CHECKPOINT")


# sysbench's Lua: production on MariaDB, the range read pgbench runs on PostgreSQL, each
# transaction's latency logged as pgbench --log does (epoch second, microseconds). The
# latency is from the query's start: sysbench's --rate queue is not in it (pgbench's
# schedule lag is), so MariaDB's production p99 leaves out the clients' own queue.
SYSBENCH_RANGE = """
local ffi = require("ffi")
ffi.cdef[[ typedef struct { long s; long ns; } sluice_ts; int clock_gettime(int, sluice_ts *); ]]
local ts = ffi.new("sluice_ts")
local function now() ffi.C.clock_gettime(0, ts); return tonumber(ts.s) + tonumber(ts.ns) * 1e-9 end
local ROWS = tonumber(os.getenv("SB_ROWS"))
local RANGE = tonumber(os.getenv("SB_RANGE"))
local LOG = os.getenv("SB_LOG")
function thread_init()
  drv = sysbench.sql.driver()
  con = drv:connect()
  if LOG then
    log = io.open(LOG .. "/tx." .. sysbench.tid, "w")
    log:setvbuf("line")
  end
end
function thread_done()
  con:disconnect()
  if log then log:close() end
end
function event()
  local lo = sysbench.rand.uniform(1, ROWS - RANGE)
  local t0 = now()
  con:query(string.format("SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN %d AND %d", lo, lo + RANGE))
  if log then log:write(string.format("%d %d\\n", math.floor(t0), math.floor((now() - t0) * 1e6))) end
end
"""


class MariaDB:
    """A scratch MariaDB in a temp dir, on the database's core(s), as Cluster is for
    PostgreSQL: the buffer pool holds the load and production's table, the redo log is
    large enough that no checkpoint flush falls inside a run, every commit is durable
    (innodb_flush_log_at_trx_commit = 1), no binary log. Production's table is sysbench's
    sbtest1 (`--scale` x 100,000 rows, as pgbench's accounts)."""

    sink_kind = "mysql"
    name = "MariaDB"

    def __init__(self, cpus, scale):
        if not shutil.which("sysbench"):
            subprocess.run(["apt-get", "install", "-y", "sysbench"], check=True, capture_output=True)
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-auto-rate-maria-"))
        self.port = free_port()
        self.rows = scale * 100_000
        (self.dir / "tmp").mkdir()
        base = ["--no-defaults", "--user=root", f"--datadir={self.dir / 'data'}", f"--tmpdir={self.dir / 'tmp'}"]
        subprocess.run(["mariadb-install-db", *base, "--auth-root-authentication-method=normal",
                        "--skip-test-db"], check=True, capture_output=True)
        self.server = subprocess.Popen(
            ["taskset", "-c", cpus, "mariadbd", *base, f"--port={self.port}", f"--socket={self.dir / 'sock'}",
             f"--pid-file={self.dir / 'pid'}", "--bind-address=127.0.0.1", "--skip-log-bin",
             "--innodb-buffer-pool-size=4G", "--innodb-log-file-size=4G", "--innodb-flush-log-at-trx-commit=1",
             "--max-connections=200", "--local-infile=1"],
            stdout=subprocess.DEVNULL, stderr=open(self.dir / "log", "w"))
        for _ in range(300):
            if subprocess.run(self.client("-e", "SELECT 1"), capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        self.sql("CREATE DATABASE bench", db="")
        (self.dir / "range.lua").write_text(SYSBENCH_RANGE)
        subprocess.run(["sysbench", "oltp_read_only", *self.sysbench_args(), "--tables=1",
                        f"--table-size={self.rows}", "prepare"], check=True, capture_output=True)
        self.sql("ANALYZE TABLE sbtest1")

    def client(self, *args, db="bench"):
        return ["mariadb", "-h", "127.0.0.1", "-P", str(self.port), "-u", "root", "-N", "-B",
                "--local-infile=1", *([db] if db else []), *args]

    def sql(self, sql, db="bench"):
        out = subprocess.run(self.client("-e", sql, db=db), check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def sysbench_args(self):
        return ["--db-driver=mysql", "--mysql-host=127.0.0.1", f"--mysql-port={self.port}",
                "--mysql-user=root", "--mysql-db=bench"]

    def url(self):
        return f"mysql://root@127.0.0.1:{self.port}/bench"

    def stop(self):
        self.server.kill()
        self.server.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def create_table(self, table):
        self.sql(f"CREATE TABLE {table} (`key` VARCHAR(255) NOT NULL PRIMARY KEY, payload JSON NOT NULL, "
                 "source TEXT, ingested_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE = InnoDB")

    def copy_progress(self):
        # LOAD DATA is one statement: nothing to read its progress by but the end.
        return float("nan")

    def copy(self, table, tsv, args):
        subprocess.run(clients(args, 10) + self.client(
            "-e", f"LOAD DATA LOCAL INFILE '{tsv}' INTO TABLE {table} (`key`, payload)"),
            check=True, capture_output=True)

    def canary_query(self, args):
        return f"SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN 1 AND {1 + args.range}"

    def sysbench(self, args, nice, *extra, log=None):
        env = {**os.environ, "SB_ROWS": str(self.rows), "SB_RANGE": str(args.range)}
        if log:
            env["SB_LOG"] = str(log)
        return clients(args, nice) + ["sysbench", str(self.dir / "range.lua"), *self.sysbench_args(),
                                      "--threads=4", *extra, "run"], env

    def production(self, rate, name, args):
        return SysbenchProduction(self, rate, name, args)

    def unthrottled_tps(self, args):
        command, env = self.sysbench(args, -5, "--time=10")
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        line = next(l for l in out.splitlines() if "transactions:" in l)
        return float(line.split("(")[1].split()[0])

    def settle(self):
        self.sql("FLUSH TABLES")


def clients(args, nice):
    """The clients' host: the other core(s). Production's client runs at a higher priority
    than the load's, as if each had a host of its own: the experiment judges what the load
    does to the database, not what it does to a pgbench process beside it."""
    return ["taskset", "-c", args.client_cpus, "nice", "-n", str(nice)]


def workload(cluster, args):
    """pgbench's arguments for production's transactions: a built-in script, or (`--range
    N`) a read that does work: the sum of N accounts' balances by an index range scan."""
    if not args.range:
        return ["-b", args.builtin]
    script = cluster.dir / "range.sql"
    script.write_text(f"\\set aid random(1, 100000 * :scale - {args.range})\n"
                      f"SELECT sum(abalance) FROM pgbench_accounts WHERE aid BETWEEN :aid AND :aid + {args.range};\n")
    if cluster.as_postgres:
        shutil.chown(script, "postgres")
    return ["-f", str(script)]


class Production:
    """pgbench at a fixed rate, logging every transaction; latencies per 1 s window.
    Production's 4 clients by default; a canary that logs every run is one client at the
    load's priority running `script`."""

    def __init__(self, cluster, rate, name, args, connections=4, nice=-5, script=None):
        # In the cluster's directory: pgbench may run as the postgres user.
        self.dir = cluster.dir / f"pgbench-{name}"
        self.dir.mkdir()
        if cluster.as_postgres:
            shutil.chown(self.dir, "postgres")
        self.proc = subprocess.Popen(
            clients(args, nice) + cluster.command(
                "pgbench", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres",
                *(["-f", str(script)] if script else workload(cluster, args)), "-c", str(connections),
                "-j", str(min(connections, 2)), "-R", str(rate), "-T", "3600", "-n",
                "-l", f"--log-prefix={self.dir}/tx", "bench"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "PGAPPNAME": f"experiment-{name}"})
        self.cluster, self.name = cluster, name
        self.started = time.time()

    def end(self):
        """Ends pgbench by ending its sessions: it then exits as after a run and writes out
        the rest of its log. (A signal ended it without that — the last 4 KB of its log, 5 s
        of a one-client canary — or, run as the postgres user, did not reach it past
        runuser: 10 s waited, and it ran on until the cluster stopped.)"""
        self.cluster.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         f"WHERE application_name = 'experiment-{self.name}'")

    def stop(self):
        """Stops the client; its transactions' latencies (ms) per 1 s window, and each
        one's (epoch, ms) in `runs`."""
        self.end()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        time.sleep(0.5)
        windows, self.lags, self.runs = {}, {}, []
        for log in self.dir.glob("tx*"):
            for line in log.read_text().splitlines():
                self.read(line.split(), windows)
        self.runs.sort()
        return windows

    def read(self, f, windows):
        """A line of pgbench's --log: client tx latency_us script epoch_s epoch_us [lag_us],
        the latency as the client sees it (with -R counted from the scheduled start)."""
        if len(f) < 6 or f[2] == "skipped":
            return
        windows.setdefault(int(f[4]), []).append(int(f[2]) / 1000.0)
        self.runs.append((int(f[4]) + int(f[5]) / 1e6, int(f[2]) / 1000.0))
        if len(f) > 6:
            self.lags.setdefault(int(f[4]), []).append(int(f[6]) / 1000.0)


class SysbenchProduction(Production):
    """sysbench at a fixed rate (4 threads), the range read, each transaction logged."""

    def __init__(self, db, rate, name, args):
        self.dir = db.dir / f"sysbench-{name}"
        self.dir.mkdir()
        command, env = db.sysbench(args, -5, f"--rate={rate}", "--time=3600", log=self.dir)
        self.proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.started = time.time()

    def end(self):
        self.proc.send_signal(signal.SIGINT)

    def read(self, f, windows):
        """A line of the Lua script's log: epoch_s latency_us."""
        if len(f) == 2:
            windows.setdefault(int(f[0]), []).append(int(f[1]) / 1000.0)


def database(args):
    if args.database == "mariadb":
        return MariaDB(args.db_cpus, args.scale)
    return Cluster(args.db_cpus, args.scale, statements=getattr(args, "statements", False))


def pct(values, q):
    s = sorted(values)
    if not s:
        return float("nan")
    rank = max(1, int(-(-q * len(s) // 1)))
    return s[min(rank, len(s)) - 1]


def sample_rows(stop, get, into, every=0.5):
    """Rows loaded so far (and, from sluice, its canary's value, the rate it steers and the
    canary's baseline), twice a second (or `every` s), into `into` as (epoch, rows, ...)."""
    while not stop.is_set():
        try:
            into.append((time.time(), *get()))
        except Exception:
            pass
        stop.wait(every)


def write_rows(path, rows):
    pad = "x" * 960
    with open(path, "w") as ndjson, open(str(path) + ".tsv", "w") as tsv:
        for i in range(1, rows + 1):
            record = json.dumps({"id": f"r{i}", "n": i, "pad": pad})
            ndjson.write(record + "\n")
            tsv.write(f"r{i}\t{record}\n")


def sluice_config(cluster, rows_file, table, rate, probe, listen, args, rate_extra=()):
    text = (
        f'[source]\nkind = "file"\npath = "{rows_file}"\ncheckpoint = "{OUT}/{table}.checkpoint"\n\n'
        f'[sink]\nkind = "{cluster.sink_kind}"\nurl = "{cluster.url()}"\ntable = "{table}"\nkey = "/id"\nmax_batch = 500\n\n'
        f"[rate]\nrecords_per_second = {rate}\n" + "".join(f"{x}\n" for x in rate_extra) + "\n"
        f'[telemetry]\nlisten = "127.0.0.1:{listen}"\n'
    )
    if probe:
        text += f'\n[[health.probe]]\nbuiltin = "canary"\nquery = "{cluster.canary_query(args)}"\n{probe}\n'
        for setting in args.canary:
            text += setting + "\n"
    return text


def metrics(port, *names):
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode()
    found = {}
    for line in body.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names and name not in found:
            found[name] = float(line.rsplit(" ", 1)[1])
    return tuple(found.get(n, float("nan")) for n in names)


def rates_list(text, least=1):
    """Positive rates, records per second, comma-separated: at least `least` of them."""
    try:
        rates = [int(x) for x in text.split(",")]
    except ValueError:
        rates = []
    if len(rates) < least or min(rates, default=0) <= 0:
        raise argparse.ArgumentTypeError(f"want {'two or more' if least > 1 else 'one or more'} positive "
                                         f"rates, as 3000,9000; got {text!r}")
    return rates


def switch_rates(text):
    """--switch: two or more rates to switch between."""
    return rates_list(text, least=2)


def switch_rate(port, rates, period, stop):
    """Sets the running worker's rate to each of `rates` in turn, every `period` s, as
    `sluice ctl rate` does (a POST, not a process started beside the database)."""
    for i in itertools.count():
        if stop.wait(period if i else 1.0):
            return
        body = json.dumps({"value": rates[i % len(rates)]}).encode()
        try:
            urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{port}/control/rate", data=body, method="POST",
                headers={"Content-Type": "application/json"}), timeout=2).read()
        except OSError:
            pass


def run_load(cluster, sluice, rows_file, name, args, rate=None, probe=None, rate_extra=(), switch=None):
    """One load; returns (start, end, series of (epoch, rows), summary). `switch`: (rates,
    period) the rate is set to in turn while it runs."""
    table = f"load_{name}"
    cluster.sql(f"DROP TABLE IF EXISTS {table}")
    series, stop = [], threading.Event()
    start = time.time()
    summary, switcher = {}, None
    if rate is None:
        cluster.create_table(table)
        sampler = threading.Thread(target=sample_rows, args=(stop, lambda: (cluster.copy_progress(),), series))
        sampler.start()
        cluster.copy(table, f"{rows_file}.tsv", args)
    else:
        checkpoint = OUT / f"{table}.checkpoint"
        checkpoint.unlink(missing_ok=True)
        port = free_port()
        config = OUT / f"{name}.toml"
        config.write_text(sluice_config(cluster, rows_file, table, rate, probe, port, args, rate_extra))
        log = open(OUT / f"{name}.log", "w")
        proc = subprocess.Popen(clients(args, 10) + [sluice, "run", "-c", str(config), "--until-empty", "--summary", "json"],
                                stdout=subprocess.PIPE, stderr=log, text=True,
                                env={**os.environ, "SLUICE_LOG": "info"})
        sampler = threading.Thread(target=sample_rows,
                                   args=(stop, lambda: metrics(port, "sluice_records_written_total",
                                                               "sluice_health_probe",
                                                               "sluice_health_probe_steered_rate",
                                                               "sluice_health_probe_baseline_seconds"),
                                         series))
        sampler.start()
        if switch:
            switcher = threading.Thread(target=switch_rate, args=(port, *switch, stop))
            switcher.start()
        out, _ = proc.communicate()
        summary = json.loads(out.strip().splitlines()[-1])
    end = time.time()
    stop.set()
    sampler.join()
    if switcher:
        switcher.join()
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


# Production alone before each load, in seconds: its 1 s windows but the first and the last
# give the load's own baseline.
ALONE = 25


def strategy(sluice, rows_file, name, prod_rate, args, **load):
    """One strategy on a fresh cluster: production alone for ALONE s, the load, 5 s more."""
    cluster = database(args)
    try:
        prod = cluster.production(prod_rate, name, args)
        time.sleep(ALONE)
        start, end, series, summary, written = run_load(cluster, sluice, rows_file, name, args, **load)
        time.sleep(5)
        windows = prod.stop()
    finally:
        cluster.stop()
    return {"name": name, "start": start, "end": end, "series": series, "windows": windows,
            "lag_p99_per_window": {s: pct(v, 0.99) for s, v in sorted(prod.lags.items())},
            "summary": summary, "rows": written, "load": load,
            "rows_per_s": written / (end - start)}


def plot(results, path):
    """p99 per second and rows/s over time, one panel per strategy (a), (d), (e), each with
    its own target."""
    w, panel_h, pad = 900, 220, 50
    h = pad + len(results) * (panel_h + pad)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>']
    for i, r in enumerate(results):
        top = pad + i * (panel_h + pad)
        target = r["target"]
        t0 = r["start"] - ALONE
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
               '<tspan fill="#2a9d3f">load rows/s</tspan> · grey: the load · dashed: the target (2 × production\'s p99 alone before the load)</text>')
    out.append("</svg>")
    path.write_text("\n".join(out))


def knee(sluice, args):
    """`rate = "auto"` against `sluice sim-sink`'s latency knee (an HTTP sink with no probe:
    what bounds the rate is the adaptive concurrency): 50 ms per request up to 4 in flight,
    twice as slow for every 8 more, 2% jitter. Requests per second are c / latency(c), most
    at 11-12 in flight (100 ms each): 120/s, 12,000 records/s in batches of 100; at 32 in
    flight 57/s. Each run drains --knee-rows records from a file into a fresh emulator;
    judged by records/s against the knee's 12,000 and the most requests the sink saw in
    flight."""
    rows = OUT / "knee.ndjson"
    with open(rows, "w") as f:
        for i in range(args.knee_rows):
            f.write(json.dumps({"id": f"k{i}", "n": i}) + "\n")
    runs = [
        ('"off"', "max = 32", "no ceiling, 32 in flight"),
        ("10800", "max = 12", "a hand-tuned rate (0.9 x the knee's) at the knee's 12 in flight"),
        ('"auto"', 'algorithm = "aimd"\nmax = 32\ntarget_latency = "100ms"', "auto, aimd (target 100 ms)"),
        ('"auto"', 'algorithm = "gradient2"\nmax = 32', "auto, gradient2"),
        ('"auto"', 'algorithm = "vegas"\nmax = 32', "auto, vegas"),
    ]
    lines = ["| rate | [concurrency] | records/s | vs the knee (12,000) | most in flight at the sink | requests |",
             "|---|---|---:|---:|---:|---:|"]
    for rate, concurrency, label in runs:
        port = free_port()
        sink = subprocess.Popen([sluice, "sim-sink", "--listen", f"127.0.0.1:{port}", "--capacity", "10000000",
                                 "--latency", "50ms", "--knee", "4", "--latency-factor", "2", "--latency-k", "8",
                                 "--jitter", "0.02"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=1)
                    break
                except Exception:
                    time.sleep(0.1)
            checkpoint = OUT / "knee.checkpoint"
            checkpoint.unlink(missing_ok=True)
            config = OUT / "knee.toml"
            config.write_text(
                f'[source]\nkind = "file"\npath = "{rows}"\ncheckpoint = "{checkpoint}"\n\n'
                f'[sink]\nkind = "http"\nurl = "http://127.0.0.1:{port}/ingest"\nkey = "/id"\nmax_batch = 100\n\n'
                f'[sink.dead_letters]\npath = "{OUT / "knee.dead.ndjson"}"\n\n'
                f"[rate]\nrecords_per_second = {rate}\n\n[concurrency]\n{concurrency}\n")
            began = time.time()
            out = subprocess.run([sluice, "run", "-c", str(config), "--until-empty", "--summary", "json"],
                                 capture_output=True, text=True, check=True, timeout=300).stdout
            took = time.time() - began
            summary = json.loads(out.strip().splitlines()[-1])
            stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5).read())
        finally:
            sink.kill()
            sink.wait()
        per_s = summary["written"] / took
        print(f"{label}: {per_s:,.0f} records/s, at most {stats['max_concurrency']} in flight; "
              f"bounded by {summary.get('bounded_by')}", flush=True)
        lines.append(f"| {rate} | {concurrency.replace(chr(10), ', ')} | {per_s:,.0f} | {per_s / 12000:.2f} | "
                     f"{stats['max_concurrency']} | {stats['requests']:,} |")
    text = "\n".join(lines) + "\n"
    (OUT / "table-knee.md").write_text(text)
    print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database", choices=["postgres", "mariadb"], default="postgres",
                    help="PostgreSQL with pgbench as production, or MariaDB with sysbench")
    ap.add_argument("--knee", action="store_true",
                    help="instead: rate = \"auto\" against sim-sink's latency knee (no database)")
    ap.add_argument("--knee-rows", type=int, default=120_000)
    ap.add_argument("--rows", type=int, default=1_500_000)
    ap.add_argument("--sweep-rows", type=int, default=1_500_000)
    ap.add_argument("--sweep-seconds", type=int, default=30, help="a sweep point's load, in seconds at its rate")
    ap.add_argument("--builtin", default="select-only",
                    help="pgbench's built-in script for production: select-only (primary-key reads, "
                         "as a serving replica or a read-heavy primary) or tpcb-like (writes: every "
                         "commit waits for its WAL flush, so the disk's fsync stalls set the p99)")
    ap.add_argument("--range", type=int, default=10000,
                    help="production runs a range read of this many accounts instead of --builtin")
    ap.add_argument("--scale", type=int, default=10, help="pgbench -i -s")
    ap.add_argument("--production-share", type=float, default=0.15,
                    help="pgbench -R as a share of its unthrottled tps on the database's core")
    ap.add_argument("--production-rate", type=int, default=None,
                    help="pgbench -R as a number (the unthrottled tps on a shared VM varies 2x run to run)")
    ap.add_argument("--db-cpus", default="0,1", help="the database's cores (taskset -c)")
    ap.add_argument("--client-cpus", default="0,1", help="the clients' cores: pgbench, psql, sluice")
    ap.add_argument("--sweep", default="2000,4000,8000,16000,32000,64000",
                    help="fixed rates tried first (rows/s); then halved between the fastest that "
                         "passed and the slowest that failed, --refine times")
    ap.add_argument("--refine", type=int, default=2)
    ap.add_argument("--validate", type=int, default=3,
                    help="whole-load runs of (c) at most: the sweep's best, then slower while one fails")
    ap.add_argument("--validate-from", type=int, default=0,
                    help="no sweep: the whole-load runs of (c) start at this rate (an earlier sweep's best)")
    ap.add_argument("--fixed", type=int, default=None, help="(c) at this rate, without a sweep")
    ap.add_argument("--retries", type=int, default=2,
                    help="runs of a strategy again when production alone was disturbed before its load")
    ap.add_argument("--canary", action="append", default=[],
                    help="a setting of the canary probe in (d) and (e), as TOML (repeatable): "
                         "'interval = \"50ms\"', 'percentile = 99'")
    ap.add_argument("--variant", action="append", default=[],
                    help="with --fixed and f in --only: (f) is (c) with these [rate] settings "
                         "added (TOML, repeatable): 'tick = \"20ms\"'")
    ap.add_argument("--switch", default=None, type=switch_rates,
                    help="with w in --only: (w) is sluice at a rate switched between these, every "
                         "--switch-seconds (LO,HI: their mean against a steady --fixed of it)")
    ap.add_argument("--switch-seconds", type=float, default=5.0)
    ap.add_argument("--only", default="abcde", help="the strategies to run (c: the sweep and its best)")
    ap.add_argument("--sluice", default=None, help="the binary (default: cargo build, debug)")
    ap.add_argument("--before", default=None,
                    help="(e) also by this binary (a build before a change), each before (e): "
                         "before and after judged in the same run")
    ap.add_argument("--steady", default=[], type=rates_list,
                    help="(s): sluice at each of these fixed rates (comma-separated), judged as (e) "
                         "after its first 10 s, in every repetition before (e): how far a rate's "
                         "share of seconds within moves from one run to the next")
    ap.add_argument("--repeat", type=int, default=1,
                    help="(e) (and --before's, and --steady's) this many times, interleaved")
    ap.add_argument("--release", action="store_true", help="build and run sluice in release mode")
    args = ap.parse_args()
    if "w" in args.only and not args.switch:
        ap.error("w in --only needs --switch LO,HI")
    OUT.mkdir(parents=True, exist_ok=True)
    sluice = args.sluice
    if not sluice:
        profile = ["--release"] if args.release else []
        subprocess.run(["cargo", "build", *profile, "--bin", "sluice"], cwd=ROOT, check=True)
        sluice = str(ROOT / "target" / ("release" if args.release else "debug") / "sluice")
    if args.knee:
        return knee(sluice, args)
    load_before = os.getloadavg()
    rows_file = OUT / "rows.ndjson"
    write_rows(rows_file, args.rows)

    def sweep_file(rate):
        """A sweep point's rows: --sweep-seconds at its rate, at most --sweep-rows."""
        path = OUT / f"sweep-{rate}.ndjson"
        write_rows(path, min(args.sweep_rows, rate * args.sweep_seconds))
        return path
    cluster = database(args)
    try:
        tps = cluster.unthrottled_tps(args)
        prod_rate = args.production_rate or max(10, int(tps * args.production_share))
        print(f"{cluster.name}: production unthrottled {tps:.0f} tps; at {prod_rate} tps", flush=True)
        cluster.settle()
        base = cluster.production(prod_rate, "baseline", args)
        time.sleep(30)
        windows = base.stop()
    finally:
        cluster.stop()
    every = [v for vs in windows.values() for v in vs]
    # The baseline p99 is that of a typical 1 s window alone (the median window's), as the
    # load is judged window by window: the p99 of 30 s pooled is set by the one or two
    # seconds the VM stalled (2.3-5.5 ms against windows of 0.5-3.5 ms, run to run).
    per_window = sorted(pct(vs, 0.99) for s, vs in windows.items() if len(vs) > prod_rate / 2)
    base_p50, base_p99 = pct(every, 0.5), per_window[len(per_window) // 2]
    target = 2 * base_p99
    quiet = sum(1 for v in per_window if v <= target) / len(per_window)
    print(f"baseline p50 {base_p50:.2f} ms, p99 {base_p99:.2f} ms (median 1 s window; pooled "
          f"{pct(every, 0.99):.2f}); target {target:.2f} ms; alone, {100 * quiet:.0f}% of "
          f"{len(per_window)} windows within it", flush=True)
    results, sweep = {}, []

    def go(key, label, rows_file=rows_file, skip=0.0, binary=None, **load):
        # The VM's host sometimes slows everything for minutes: a strategy whose production
        # alone (the ALONE s before its load) read over 1.5 x the first baseline runs again.
        for attempt in range(1 + args.retries):
            r = strategy(binary or sluice, rows_file, key, prod_rate, args, **load)
            alone = sorted(pct(v, 0.99) for s, v in r["windows"].items()
                           if r["start"] - ALONE + 1 <= s < r["start"] - 1)
            r["alone_p99"] = alone[len(alone) // 2] if alone else float("nan")
            r["attempts"] = attempt + 1
            if r["alone_p99"] <= 1.5 * base_p99:
                break
            print(f"{label}: production alone read p99 {r['alone_p99']:.2f} ms before the load "
                  f"(baseline {base_p99:.2f}): the machine was disturbed; again", flush=True)
        r["label"], r["skip"] = label, skip
        # The judge: twice production's p99 alone on this cluster in the minute of its load.
        # Each strategy runs on a fresh cluster minutes after the first baseline, and
        # production alone moved 1.5-2.6 x between them on a slow day (run M): judged against
        # the first baseline, a run is judged by when it ran as much as by its load.
        r["target"] = 2 * r["alone_p99"]
        r["p50"], r["p99"], r["within"], r["windows_judged"] = judge(
            r["windows"], r["start"], r["end"], r["target"], skip)
        r["within_first"] = judge(r["windows"], r["start"], r["end"], target, skip)[2]
        after = [(t, n) for t, n, *_ in r["series"] if t >= r["start"] + 10]
        r["rows_per_s_after_10s"] = ((after[-1][1] - after[0][1]) / (after[-1][0] - after[0][0])
                                     if len(after) > 1 and after[-1][0] > after[0][0] else float("nan"))
        bounded = r["summary"].get("bounded_by") if r["summary"] else None
        print(f"{label}: {r['rows_per_s']:.0f} rows/s, p50 {r['p50']:.2f} p99 {r['p99']:.2f} ms, "
              f"{100 * r['within']:.0f}% of {r['windows_judged']} windows within its target "
              f"{r['target']:.2f} ms ({100 * r['within_first']:.0f}% within the first's)"
              f"{f'; bounded by {bounded}' if bounded else ''}", flush=True)
        (OUT / f"{args.database}-{key}.json").write_text(json.dumps(
            {x: v for x, v in r.items() if x != "windows"} | {"p99_per_window": {
                s: pct(v, 0.99) for s, v in sorted(r["windows"].items())}}, default=str))
        return r

    if "a" in args.only:
        results["a"] = go("a", "(a) psql \\copy" if args.database == "postgres" else "(a) LOAD DATA LOCAL INFILE")
    if "b" in args.only:
        results["b"] = go("b", "(b) sluice rate = \"off\"", rate='"off"')
    if "c" in args.only and args.fixed:
        results["c"] = go("c", f"(c) sluice rate = {args.fixed} (a previous run's best)", rate=str(args.fixed))
    if "f" in args.only and args.fixed:
        results["f"] = go("f", f"(f) sluice rate = {args.fixed}, {', '.join(args.variant)}",
                          rate=str(args.fixed), rate_extra=args.variant)
    elif "c" in args.only and not args.fixed:
        passed = args.validate_from

        def point(rate):
            r = go(f"c{rate}", f"(c) sluice rate = {rate} (sweep)", rows_file=sweep_file(rate), rate=str(rate))
            sweep.append(r)
            return r["within"] >= 0.9
        failed = None
        for rate in [] if passed else [int(x) for x in args.sweep.split(",")]:
            if point(rate):
                passed = rate
            else:
                failed = rate
                break
        for _ in range(args.refine if failed else 0):
            middle = int(round((passed * failed) ** 0.5 if passed else failed / 2))
            if point(middle):
                passed = middle
            else:
                failed = middle
        # A sweep point loads a small table for 30 s; the same rate hurts more as the table
        # grows (2026-12-05/06: 32,000 rows/s held 93% of a point's windows and 38% of the
        # whole load's). The expert's rate is the fastest that holds over the whole load:
        # the sweep's best is run on it, and while that fails, a slower rate (x 0.7, or
        # halfway to a slower one that held), --validate times at most.
        rate = passed or min(int(r["load"]["rate"]) for r in sweep)
        held, held_rate, broke_rate = None, None, None
        for _ in range(args.validate):
            r = go(f"cwhole{rate}", f"(c) sluice rate = {rate} (whole load)", skip=10.0, rate=str(rate))
            r["whole"] = True
            sweep.append(r)
            if r["within"] >= 0.9:
                held, held_rate = r, rate
                if broke_rate is None or broke_rate <= rate * 1.15:
                    break
                rate = int(round((rate * broke_rate) ** 0.5))
            else:
                broke_rate = rate
                rate = int(round((rate * held_rate) ** 0.5)) if held_rate else int(rate * 0.7)
        if held:
            best = dict(held, label=f"(c) sluice rate = {held_rate} (best hand-tuned, held over the whole load)")
        else:
            slowest = min((r for r in sweep if r.get("whole")), key=lambda r: int(r["load"]["rate"]))
            best = dict(slowest, label=f"(c) sluice rate = {slowest['load']['rate']} "
                        "(none held over the whole load: the slowest tried)")
        results["c"] = best
    if "w" in args.only:
        rates = args.switch
        results["w"] = go("w", f"(w) sluice, rate switched between {' and '.join(map(str, rates))} every "
                          f"{args.switch_seconds:g} s", skip=10.0, rate=str(max(rates)),
                          switch=(rates, args.switch_seconds))
    if "d" in args.only:
        results["d"] = go("d", "(d) sluice rate = \"off\", canary max = \"2x\"", rate='"off"', probe='max = "2x"')
    for i in range(args.repeat if "e" in args.only or args.steady else 0):
        n = f" {i + 1}" if args.repeat > 1 else ""
        for rate in args.steady:
            results[f"s{rate}{n}"] = go(f"s{rate}_{i}", f"(s){n} sluice rate = {rate}, steady", skip=10.0,
                                        rate=str(rate))
        if "e" not in args.only:
            continue
        auto = dict(skip=10.0, rate='"auto"', probe='target = "2x"')
        if args.before:
            results[f"e before{n}"] = go(f"ebefore{i}", f"(e) before{n}: {args.before}", binary=args.before, **auto)
        results[f"e{n}"] = go(f"e{i}" if n else "e", f"(e){n} sluice rate = \"auto\", canary target = \"2x\"", **auto)
    load_after = os.getloadavg()
    report(results, sweep, tps, prod_rate, base_p50, base_p99, target, quiet, load_before, load_after, args)
    if all(k in results for k in "ade") and args.database == "postgres" and not args.before:
        plot([results["a"], results["d"], results["e"]], ROOT / "docs" / "bench" / "auto-rate.svg")


def report(results, sweep, tps, prod_rate, base_p50, base_p99, target, quiet, load_before, load_after, args):
    lines = [
        "| strategy | load rows/s | vs (c) | after its first 10 s | vs (c) | production p50 (ms) | p99 (ms) "
        "| its baseline p99 (ms) | p99 / its baseline | 1 s windows within 2 x its baseline | within the first's target |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    best = results["c"]["rows_per_s"] if "c" in results else float("nan")
    best_after = results["c"]["rows_per_s_after_10s"] if "c" in results else float("nan")
    for key in results:
        r = results[key]
        lines.append(
            f"| {r['label']} | {r['rows_per_s']:,.0f} | {r['rows_per_s'] / best:.2f} | "
            f"{r['rows_per_s_after_10s']:,.0f} | {r['rows_per_s_after_10s'] / best_after:.2f} | {r['p50']:.2f} | {r['p99']:.2f} | "
            f"{r['alone_p99']:.2f} | {r['p99'] / r['alone_p99']:.2f} | {100 * r['within']:.0f}% of {r['windows_judged']}"
            f"{f' (after its first {skip:g} s)' if (skip := r.get('skip')) else ''} | {100 * r['within_first']:.0f}% |")
    lines.append("")
    lines.append("Run again because production alone was disturbed before the load: "
                 + (", ".join(f"{r['label']} ×{r['attempts'] - 1}" for r in [*results.values(), *sweep]
                              if r["attempts"] > 1) or "none") + ".")
    # Out of retries, a run is judged all the same: the table says which, so that a figure
    # taken on a disturbed machine is not read as the strategy's.
    disturbed = [f"{r['label']} ({r['alone_p99'] / base_p99:.1f} x)" for r in [*results.values(), *sweep]
                 if r["alone_p99"] > 1.5 * base_p99]
    lines.append("Judged although production alone still read over 1.5 x its baseline p99 before "
                 "the load (its retries spent): " + (", ".join(disturbed) or "none") + ".")
    sweep_lines = ["| fixed rate | load rows/s | p99 (ms) | its baseline p99 (ms) | windows within 2 x its baseline "
                   "| within the first's target |", "|---:|---:|---:|---:|---:|---:|"]
    for r in sweep:
        sweep_lines.append(f"| {int(r['load']['rate']):,}{' (whole load)' if r.get('whole') else ''} | {r['rows_per_s']:,.0f} | {r['p99']:.2f} | "
                           f"{r['alone_p99']:.2f} | {100 * r['within']:.0f}% of {r['windows_judged']} | {100 * r['within_first']:.0f}% |")
    text = "\n".join([
        f"rows {args.rows:,} of ~1 KB (sweep points: {args.sweep_seconds} s at their rate, at most "
        f"{args.sweep_rows:,}); {args.database}, production: {'pgbench' if args.database == 'postgres' else 'sysbench'} "
        f"{f'a {args.range:,}-account range read' if args.range else args.builtin}, 4 clients, "
        f"unthrottled {tps:.0f} tps, production at {prod_rate} tps; baseline p50 {base_p50:.2f} ms, "
        f"p99 {base_p99:.2f} ms (the median 1 s window's); target {target:.2f} ms (alone, "
        f"{100 * quiet:.0f}% of windows within it); load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after.",
        "", *lines, "", "Sweep:", "", *sweep_lines, "",
    ])
    (OUT / f"table-{args.database}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
