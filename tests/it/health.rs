//! Database-health probes against real servers: a scratch PostgreSQL primary with a
//! streaming standby (pg_basebackup -R) whose replay the test pauses, background
//! pg_sleep sessions, a critical limit. (MariaDB's Threads_running: `probe_reads.rs`; the
//! operator's controls and a held worker's leases: `held_writes.rs`.)

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A PostgreSQL primary and its streaming standby in a temp dir, run as the postgres user
/// when the test runs as root; both stopped when dropped.
struct Scratch {
    dir: tempfile::TempDir,
    bin: PathBuf,
    primary: u16,
    standby: u16,
    as_postgres: bool,
}

impl Scratch {
    fn start() -> Scratch {
        let bin = crate::common::pg::bin_with("pg_basebackup");
        let (dir, as_postgres) = crate::common::pg::cluster_dir();
        let mut s = Scratch {
            dir,
            bin,
            primary: free_port(),
            standby: 0,
            as_postgres,
        };
        s.standby = loop {
            let p = free_port();
            if p != s.primary {
                break p;
            }
        };
        let primary = s.path("primary");
        s.tool(
            "initdb",
            &["-D", &primary, "-A", "trust", "-U", "postgres", "--no-sync"],
        );
        std::fs::write(
            Path::new(&primary).join("postgresql.auto.conf"),
            format!(
                "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\nfsync = off\n",
                s.primary,
                s.dir.path().display()
            ),
        )
        .unwrap();
        s.pg_ctl("primary", "start");
        let standby = s.path("standby");
        let port = s.primary.to_string();
        s.tool(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                &standby,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ],
        );
        // Reported every second even without WAL traffic: the primary then sees a
        // stuck replay's lag grow, and forgets it soon after the standby caught up.
        let auto = Path::new(&standby).join("postgresql.auto.conf");
        let mut conf = std::fs::read_to_string(&auto).unwrap();
        conf.push_str(&format!(
            "port = {}\nwal_receiver_status_interval = 1s\n",
            s.standby
        ));
        std::fs::write(&auto, conf).unwrap();
        s.pg_ctl("standby", "start");
        assert_eq!(s.sql(s.standby, "select pg_is_in_recovery()"), "t");
        s
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    fn tool(&self, tool: &str, args: &[&str]) {
        let out = self.command(tool).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{tool}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn pg_ctl(&self, cluster: &str, action: &str) {
        let data = self.path(cluster);
        let log = self.path(&format!("{cluster}.log"));
        self.tool(
            "pg_ctl",
            &["-D", &data, "-l", &log, "-m", "immediate", "-w", action],
        );
    }

    fn url(&self, port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    }

    /// Runs `sql` with psql; its output, trimmed.
    fn sql(&self, port: u16, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-XtAq",
            ])
            .args(["-p", &port.to_string(), "-c", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Rows in `table` on the primary; 0 before the sink created it.
    fn count(&self, table: &str) -> i64 {
        if self.sql(
            self.primary,
            &format!("select to_regclass('{table}') is null"),
        ) == "t"
        {
            return 0;
        }
        self.sql(self.primary, &format!("select count(*) from {table}"))
            .parse()
            .unwrap()
    }

    /// `psql` sessions each running `pg_sleep(60)` on the primary, named "sleeper".
    fn sleepers(&self, n: usize) -> Vec<Child> {
        let children: Vec<Child> = (0..n)
            .map(|_| {
                Command::new(self.bin.join("psql"))
                    .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-Xq"])
                    .args(["-p", &self.primary.to_string()])
                    .args(["-c", "select pg_sleep(60)"])
                    .env("PGAPPNAME", "sleeper")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        poll(Duration::from_secs(10), "the sleepers to run", || {
            self.sql(
                self.primary,
                "select count(*) from pg_stat_activity where application_name = 'sleeper' and state = 'active'",
            ) == n.to_string()
        });
        children
    }

    fn release(&self, sleepers: Vec<Child>) {
        self.sql(
            self.primary,
            "select count(pg_cancel_backend(pid)) from pg_stat_activity where application_name = 'sleeper'",
        );
        for mut c in sleepers {
            c.wait().unwrap();
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for cluster in ["standby", "primary"] {
            let _ = self
                .command("pg_ctl")
                .args(["-D", &self.path(cluster), "-m", "immediate", "stop"])
                .output();
        }
    }
}

/// A file → PostgreSQL drain config in `dir` writing `table` at `rate`, with `extra`.
fn pg_config(dir: &Path, url: &str, table: &str, n: usize, rate: f64, extra: &str) {
    write_records(&dir.join("in.ndjson"), n, &[]);
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n[sink]\nkind = \"postgres\"\nurl = \"{url}\"\ntable = \"{table}\"\nkey = \"/id\"\nmax_batch = 20\n\n[rate]\nrecords_per_second = {rate}\ntick = \"100ms\"\n\n[concurrency]\nmax = 1\n\n{extra}"
        ),
    )
    .unwrap();
}

fn seconds(pg_epoch: &str) -> f64 {
    pg_epoch
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {pg_epoch:?}"))
}

/// The standby's replay is paused while the drain goes on: the lag seen from the primary
/// grows, the worker stops writing within `interval` + 1 s of it passing 2 s, and once
/// replay resumes the lag clears and the drain finishes with every record.
fn replica_lag_holds_until_the_standby_catches_up(s: &Scratch) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let n = 1500;
    pg_config(
        dir.path(),
        &s.url(s.primary),
        "lagged",
        n,
        150.0,
        &format!(
            "[telemetry]\nlisten = \"127.0.0.1:{port}\"\n\n[[health.probe]]\nbuiltin = \"replica_lag\"\nmax = \"2s\"\ninterval = \"1s\"\n\n\
             [[health.probe]]\nname = \"standby_lag\"\nbuiltin = \"replica_lag\"\nreplicas = [\"{}\"]\nmax = \"2s\"\ninterval = \"1s\"\n",
            s.url(s.standby)
        ),
    );
    let started = Instant::now();
    let worker = worker(dir.path(), true);
    poll(Duration::from_secs(20), "the first 300 rows", || {
        s.count("lagged") >= 300
    });
    s.sql(s.standby, "select pg_wal_replay_pause()");
    poll(Duration::from_secs(5), "replay to pause", || {
        s.sql(s.standby, "select pg_get_wal_replay_pause_state()") == "paused"
    });
    // The last commit the standby replayed: from here on the lag is now minus this.
    let replayed = seconds(&s.sql(
        s.standby,
        "select extract(epoch from pg_last_xact_replay_timestamp())",
    ));
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    poll(Duration::from_secs(15), "the worker to be held", || {
        get(&metrics).contains("sluice_throttled{reason=\"replica_lag\"} 1")
    });
    // Held: nothing more is written while replay stays paused.
    let held_count = s.count("lagged");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(s.count("lagged"), held_count, "rows written while held");
    assert!(held_count < n as i64);
    let last_write = seconds(&s.sql(
        s.primary,
        "select extract(epoch from max(ingested_at)) from lagged",
    ));
    let after_lag_passed = last_write - (replayed + 2.0);
    eprintln!(
        "replica_lag: {held_count} rows before the hold; last write {after_lag_passed:.2} s after the lag passed 2 s"
    );
    assert!(
        after_lag_passed <= 2.0,
        "the last write came {after_lag_passed:.2} s after the lag passed 2 s (interval 1 s + 1 s allowed)"
    );
    // Both ways of measuring see it: the primary's replay_lag and the standby's own.
    let text = get(&metrics);
    for name in ["replica_lag", "standby_lag"] {
        let lag = text
            .lines()
            .find(|l| l.starts_with(&format!("sluice_health_probe{{name=\"{name}\"}}")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} not in /metrics:\n{text}"));
        assert!(lag > 2.0, "{name} = {lag}");
    }
    let resumed_at = seconds(&s.sql(s.primary, "select extract(epoch from now())"));
    s.sql(s.standby, "select pg_wal_replay_resume()");
    let out = finish(worker, Duration::from_secs(40));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(s.count("lagged"), n as i64, "every record written");
    let first_after = seconds(&s.sql(
        s.primary,
        &format!(
            "select extract(epoch from min(ingested_at)) from lagged where ingested_at > to_timestamp({resumed_at})"
        ),
    ));
    eprintln!(
        "replica_lag: first write {:.2} s after replay resumed; whole drain {:.1} s",
        first_after - resumed_at,
        started.elapsed().as_secs_f64()
    );
    let log = stderr(&out);
    assert!(
        log.contains("new writes held: replica_lag"),
        "the hold is logged with the probe: {log}"
    );
    let summary = summary(&out);
    assert_eq!(summary["pulled"], n as u64);
}

/// N sessions running pg_sleep, above `max`: nothing is written; released: the drain
/// resumes and finishes.
fn active_sessions_hold_while_the_server_is_busy(s: &Scratch) {
    let dir = tempfile::tempdir().unwrap();
    let n = 300;
    pg_config(
        dir.path(),
        &s.url(s.primary),
        "busy",
        n,
        600.0,
        "[[health.probe]]\nbuiltin = \"active_sessions\"\nmax = 3\ninterval = \"200ms\"\n",
    );
    let sleepers = s.sleepers(4);
    let worker = worker(dir.path(), true);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(s.count("busy"), 0, "written while 4 sessions were active");
    s.release(sleepers);
    let released = Instant::now();
    let out = finish(worker, Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    eprintln!(
        "active_sessions: drained {n} records {:.1} s after the sleepers were released",
        released.elapsed().as_secs_f64()
    );
    assert_eq!(s.count("busy"), n as i64);
    assert!(
        stderr(&out).contains("new writes held: active_sessions"),
        "{}",
        stderr(&out)
    );
}

/// A probe above `critical`: the worker stops with exit 1 naming it, what it wrote is
/// checkpointed, and a rerun finishes the rest.
fn critical_stops_and_a_rerun_finishes(s: &Scratch) {
    s.sql(
        s.primary,
        "drop table if exists knob; create table knob (v float8); insert into knob values (0)",
    );
    let dir = tempfile::tempdir().unwrap();
    let n = 1000;
    pg_config(
        dir.path(),
        &s.url(s.primary),
        "stopped",
        n,
        200.0,
        "[[health.probe]]\nname = \"knob\"\nquery = \"select v from knob\"\nmax = 10\ncritical = 100\ninterval = \"200ms\"\n",
    );
    let worker = worker(dir.path(), true);
    poll(Duration::from_secs(20), "the first 100 rows", || {
        s.count("stopped") >= 100
    });
    s.sql(s.primary, "update knob set v = 500");
    let out = finish(worker, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let first = summary(&out);
    let error = first["error"].as_str().unwrap_or_default().to_string();
    assert!(
        error.contains("knob") && error.contains("critical"),
        "{error}"
    );
    let written = s.count("stopped");
    assert!(written < n as i64, "stopped before the end: {written}");
    s.sql(s.primary, "update knob set v = 0");
    let out = run_in(dir.path(), DRAIN);
    assert!(out.status.success(), "{}", stderr(&out));
    let rerun = summary(&out);
    let pulled = rerun["pulled"].as_u64().unwrap();
    eprintln!("critical: first run wrote {written} and exited 1; the rerun pulled {pulled} of {n}");
    assert!(
        pulled < n as u64,
        "the rerun starts from the checkpoint: pulled {pulled}"
    );
    assert_eq!(s.count("stopped"), n as i64, "nothing lost");
}

#[test]
fn postgres_probes_hold_and_stop_the_worker() {
    let started = Instant::now();
    let scratch = Scratch::start();
    eprintln!(
        "scratch primary and standby up in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    replica_lag_holds_until_the_standby_catches_up(&scratch);
    active_sessions_hold_while_the_server_is_busy(&scratch);
    critical_stops_and_a_rerun_finishes(&scratch);
    eprintln!("all in {:.1} s", started.elapsed().as_secs_f64());
}
