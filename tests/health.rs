//! Database-health probes against real servers: a scratch PostgreSQL primary with a
//! streaming standby (pg_basebackup -R) whose replay the test pauses, background
//! pg_sleep sessions, a critical limit, MariaDB's Threads_running; and the operator
//! controls (`sluice ctl`) of a running worker.

mod common;

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
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL binaries under /usr/lib/postgresql")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|p| p.join("pg_basebackup").exists())
            .max()
            .expect("a PostgreSQL version with pg_basebackup");
        let dir = tempfile::tempdir().unwrap();
        let as_postgres = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        if as_postgres {
            let ok = Command::new("chown")
                .arg("postgres")
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(ok.success());
        }
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

/// Waits for `done`, polling every 50 ms, failing after `within`.
fn poll(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn get(url: &str) -> String {
    block_on(async {
        match reqwest::get(url).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    })
}

/// POSTs to `url` without a token: the status and the body.
fn post(url: &str) -> (u16, String) {
    block_on(async {
        let r = reqwest::Client::new().post(url).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    })
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

fn ctl(dir: &Path, args: &[&str], token: Option<&str>) -> std::process::Output {
    let mut cmd = sluice();
    cmd.current_dir(dir)
        .args(["ctl", "-c", "sluice.toml"])
        .args(args);
    if let Some(t) = token {
        cmd.env("SLUICE_TELEMETRY__TOKEN", t);
    }
    cmd.output().unwrap()
}

fn status(dir: &Path) -> serde_json::Value {
    let out = ctl(dir, &["status", "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `sluice ctl` against a running worker: pause holds the writes, rate sets the ceiling,
/// resume lets the drain finish; a wrong or missing token is refused with 401.
#[test]
fn ctl_pauses_resumes_and_sets_the_rate_of_a_running_worker() {
    let dir = tempfile::tempdir().unwrap();
    let n = 600;
    write_records(&dir.path().join("in.ndjson"), n, &[]);
    let port = free_port();
    write_config(
        dir.path(),
        "in.ndjson",
        100.0,
        &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"s3cret\"\n"),
    );
    let worker = worker(dir.path(), true);
    poll(Duration::from_secs(20), "the worker's first writes", || {
        let out = ctl(dir.path(), &["status", "--json"], None);
        out.status.success()
            && serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .is_ok_and(|s| s["written"].as_u64() > Some(0))
    });
    let wrong = ctl(dir.path(), &["pause"], Some("wrong"));
    assert_eq!(wrong.status.code(), Some(1));
    assert!(stderr(&wrong).contains("401"), "{}", stderr(&wrong));
    let (missing, _) = post(&format!("http://127.0.0.1:{port}/control/pause"));
    assert_eq!(missing, 401);
    assert_eq!(status(dir.path())["controls"]["paused"], false);

    let out = ctl(dir.path(), &["pause"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    poll(Duration::from_secs(5), "the pause to apply", || {
        status(dir.path())["held_by"] == "operator"
    });
    // Batches in flight when the pause applied finish; then nothing more.
    std::thread::sleep(Duration::from_millis(300));
    let paused_at = status(dir.path())["written"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(status(dir.path())["written"].as_u64().unwrap(), paused_at);
    assert!(paused_at < n as u64);

    let out = ctl(dir.path(), &["batch", "3"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = ctl(dir.path(), &["batch", "0"], None);
    assert_eq!(out.status.code(), Some(2), "a batch of 0 is refused");
    let out = ctl(dir.path(), &["rate", "20"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = ctl(dir.path(), &["resume"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    poll(Duration::from_secs(5), "the new ceiling to apply", || {
        let s = status(dir.path());
        s["held_by"].is_null() && s["rate_limit"].as_f64().is_some_and(|r| r <= 20.0)
    });
    assert!(status(dir.path())["batch_records"].as_u64().unwrap() <= 3);
    let out = ctl(dir.path(), &["status"], None);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("batch 3 records"), "{text}");
    let at = Instant::now();
    let before = status(dir.path())["written"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let gained = status(dir.path())["written"].as_u64().unwrap() - before;
    let per_second = gained as f64 / at.elapsed().as_secs_f64();
    eprintln!("ctl: {per_second:.0} rec/s under a 20 rec/s ceiling (configured 100)");
    assert!(per_second <= 40.0, "{per_second} rec/s");
    let out = ctl(dir.path(), &["rate", "off"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = finish(worker, Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        sqlite_count(&dir.path().join("out.db"), "select count(*) from records"),
        n as i64
    );
    let log = stderr(&out);
    assert!(log.contains("operator: new writes paused"), "{log}");
    assert!(log.contains("http from 127.0.0.1"), "{log}");
}

/// A listener off loopback without a token serves metrics but refuses the controls (403):
/// the worker runs, says so naming the key, and drains everything.
#[test]
fn controls_off_loopback_need_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let n = 300;
    write_records(&dir.path().join("in.ndjson"), n, &[]);
    let port = free_port();
    write_config(
        dir.path(),
        "in.ndjson",
        100.0,
        &format!("[telemetry]\nlisten = \"0.0.0.0:{port}\"\n"),
    );
    let worker = worker(dir.path(), true);
    poll(Duration::from_secs(20), "the metrics", || {
        get(&format!("http://127.0.0.1:{port}/metrics")).contains("sluice_")
    });
    let (code, body) = post(&format!("http://127.0.0.1:{port}/control/pause"));
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("telemetry.token"), "{body}");
    let out = finish(worker, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("telemetry.token"), "{}", stderr(&out));
    assert_eq!(
        sqlite_count(&dir.path().join("out.db"), "select count(*) from records"),
        n as i64
    );
}

/// Threads_running on the real MariaDB: `sluice plan` reads it, and it holds the writes
/// while two sessions run SLEEP.
#[test]
fn mysql_threads_running_as_a_probe() {
    let Ok(url) = std::env::var("SLUICE_TEST_MYSQL_URL") else {
        panic!("SLUICE_TEST_MYSQL_URL is not set: eval \"$(scripts/services.sh)\"");
    };
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 50, &[]);
    write_config(
        dir.path(),
        "in.ndjson",
        100.0,
        &format!(
            "[[health.probe]]\nbuiltin = \"active_sessions\"\nurl = \"{url}\"\nmax = 1\ninterval = \"200ms\"\n\n[[health.probe]]\nname = \"lag\"\nbuiltin = \"replica_lag\"\nreplicas = [\"{url}\"]\nmax = 5\n"
        ),
    );
    let plan = |dir: &Path| {
        let out = run_in(dir, &["plan", "-c", "sluice.toml", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let quiet = plan(dir.path());
    let sessions = &quiet["health"][0];
    assert_eq!(sessions["name"], "active_sessions");
    assert!(sessions["value"].as_f64().is_some(), "{quiet}");
    // MariaDB here is no replica (or the user may not ask): its lag is unknown, which
    // holds (fail safe).
    let lag = &quiet["health"][1];
    assert_eq!(lag["holds"], true, "{quiet}");
    assert!(lag["value"].is_null(), "{quiet}");
    eprintln!("mysql replica_lag on a non-replica: {}", lag["verdict"]);
    // `sluice check` reaches and reads each probe; the unreadable one fails the check.
    let check = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    let text = stderr(&check);
    assert!(
        text.contains("health probe active_sessions: reads"),
        "{text}"
    );
    assert!(text.contains("health probe lag"), "{text}");
    assert_eq!(check.status.code(), Some(1), "{text}");
    let sleepers: Vec<Child> = (0..3)
        .map(|_| {
            Command::new("mariadb")
                .args(["--protocol=socket", "-u", "root", "-e", "SELECT SLEEP(8)"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    poll(
        Duration::from_secs(5),
        "MariaDB to count the sleepers",
        || {
            plan(dir.path())["health"][0]["value"]
                .as_f64()
                .is_some_and(|v| v >= 3.0)
        },
    );
    let busy = plan(dir.path());
    assert_eq!(busy["health"][0]["holds"], true, "{busy}");
    for mut c in sleepers {
        let _ = c.kill();
        let _ = c.wait();
    }
    let out = Command::new("mariadb")
        .args(["--protocol=socket", "-u", "root", "-N", "-e"])
        .arg("SELECT CONCAT('KILL QUERY ', id, ';') FROM information_schema.processlist WHERE info = 'SELECT SLEEP(8)'")
        .output()
        .unwrap();
    let kills = String::from_utf8_lossy(&out.stdout).to_string();
    if !kills.trim().is_empty() {
        Command::new("mariadb")
            .args(["--protocol=socket", "-u", "root", "-e", &kills])
            .output()
            .unwrap();
    }
    poll(Duration::from_secs(10), "the sleepers to end", || {
        plan(dir.path())["health"][0]["holds"] == false
    });
}

/// Leases and health combine: a worker held by a probe keeps its leases only for
/// `idle_grace`, and takes them again once the probe lets it write.
#[test]
fn a_worker_held_by_health_gives_its_leases_back_after_idle_grace() {
    let knob = unique("health_knob");
    let pool = unique("health_pool");
    let psql = |sql: &str| {
        let out = Command::new("psql")
            .arg(pg_url())
            .args(["-XtAq", "-c", sql])
            .output()
            .unwrap();
        assert!(out.status.success(), "{sql}: {}", stderr(&out));
    };
    psql(&format!(
        "create table {knob} (v float8); insert into {knob} values (0)"
    ));
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 5000, &[]);
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\ntable = \"records\"\nkey = \"/id\"\n\n[rate]\ntick = \"100ms\"\n\n\
             [leases]\nstore = {:?}\npool = {pool:?}\ncapacity = 200\npartitions = 4\nttl = \"4s\"\nidle_grace = \"2s\"\n\n\
             [[health.probe]]\nname = \"knob\"\nquery = \"select v from {knob}\"\nurl = {:?}\nmax = 10\ninterval = \"200ms\"\n",
            pg_url(),
            pg_url()
        ),
    )
    .unwrap();
    let held = |dir: &Path| {
        let out = run_in(dir, &["leases", "-c", "sluice.toml", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["leases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["expires_in_s"].as_f64().unwrap() > 0.0)
            .count()
    };
    let worker = worker(dir.path(), true);
    poll(Duration::from_secs(15), "the worker's first lease", || {
        held(dir.path()) > 0
    });
    psql(&format!("update {knob} set v = 100"));
    let at = Instant::now();
    poll(
        Duration::from_secs(8),
        "the held worker to give its leases back",
        || held(dir.path()) == 0,
    );
    let released = at.elapsed();
    psql(&format!("update {knob} set v = 0"));
    let at = Instant::now();
    poll(Duration::from_secs(8), "a lease again once writing", || {
        held(dir.path()) > 0
    });
    eprintln!(
        "leases: given back {:.1} s after the probe went over max (idle_grace 2 s), taken again {:.1} s after it fell back",
        released.as_secs_f64(),
        at.elapsed().as_secs_f64()
    );
    assert!(released >= Duration::from_millis(1500), "{released:?}");
    let _ = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status();
    let out = finish(worker, Duration::from_secs(20));
    assert!(out.status.success(), "{}", stderr(&out));
    psql(&format!("drop table {knob}"));
}
