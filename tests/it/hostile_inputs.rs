//! No input to any command or control reaches a panic (exit 101): every flag of every
//! command, and every operator control of a running worker, given hostile values (huge,
//! negative, NaN, empty, non-UTF-8, very long), either does its job or refuses with a
//! message — exit 2 for a command, 400 for a control — and a worker sent them keeps
//! draining to the end.

use crate::common;

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Values no flag should panic on.
fn hostile() -> Vec<OsString> {
    let mut values: Vec<OsString> = [
        "",
        " ",
        "0",
        "-0",
        "-1",
        "1",
        "nan",
        "NaN",
        "inf",
        "-inf",
        "1e-300",
        "1e-20",
        "5e-324",
        "1e308",
        "1e400",
        "18446744073709551616",
        "9223372036854775807",
        "-9223372036854775808",
        "0.5",
        "1ns",
        "584942417355years",
        "off",
        "http://",
        "://x",
        "http://[::1",
        "postgres://u:p@/db?sslmode=",
        "-",
        "/",
        "..",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    values.push(OsString::from("9".repeat(5000)));
    values.push(OsString::from("x".repeat(100_000)));
    values.push(OsString::from_vec(vec![0xff, 0xfe, b'1']));
    values
}

/// Runs `sluice` with `args` in `dir` for at most `within` (a command that takes a good
/// value may serve or drain on: it is stopped, which is no panic).
fn run_for(dir: &Path, args: &[OsString], within: Duration) -> Option<Output> {
    let mut child = sluice()
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert!(
        !stderr(&out).contains("panicked"),
        "{args:?}: {}",
        stderr(&out)
    );
    None
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

#[test]
fn no_flag_of_any_command_reaches_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    write_config(dir.path(), "in.ndjson", 1000.0, "");
    let closed = format!("http://127.0.0.1:{}", free_port());
    // `leases resize` against the real lease store, on a pool of its own.
    let leases_dir = tempfile::tempdir().unwrap();
    write_records(&leases_dir.path().join("in.ndjson"), 3, &[]);
    write_config(
        leases_dir.path(),
        "in.ndjson",
        1000.0,
        &format!(
            "[leases]\nstore = \"{}\"\npool = \"{}\"\ncapacity = 100\npartitions = 2\n",
            pg_url(),
            unique("hostile")
        ),
    );
    // Each: the arguments before the value, and those after it.
    let flags: Vec<(Vec<OsString>, Vec<OsString>)> = vec![
        (os(&["run", "--until-empty", "--rate"]), vec![]),
        (os(&["run", "--until-empty", "--max-records"]), vec![]),
        (os(&["run", "--until-empty", "--deadline"]), vec![]),
        (os(&["run", "--until-empty", "--input"]), vec![]),
        (os(&["run", "--until-empty", "--sink-url"]), vec![]),
        (os(&["run", "--summary"]), vec![]),
        (os(&["run", "-c"]), vec![]),
        (os(&["check", "--timeout"]), vec![]),
        (os(&["plan", "-c"]), vec![]),
        (os(&["produce"]), vec![]),
        (os(&["leases", "resize", "--capacity"]), vec![]),
        (os(&["leases", "resize", "--partitions"]), vec![]),
        (os(&["ctl", "--url", &closed, "rate"]), vec![]),
        (os(&["ctl", "--url", &closed, "batch"]), vec![]),
        (os(&["ctl", "--url"]), os(&["status"])),
        (os(&["init", "--force"]), vec![]),
        (
            os(&["sim-sink", "--listen", "127.0.0.1:0", "--capacity"]),
            vec![],
        ),
        (
            os(&["sim-sink", "--listen", "127.0.0.1:0", "--burst"]),
            vec![],
        ),
        (
            os(&["sim-sink", "--listen", "127.0.0.1:0", "--latency"]),
            vec![],
        ),
        (
            os(&["sim-sink", "--listen", "127.0.0.1:0", "--knee"]),
            vec![],
        ),
        (
            os(&["sim-sink", "--listen", "127.0.0.1:0", "--latency-factor"]),
            vec![],
        ),
        (
            os(&["sim-sink", "--listen", "127.0.0.1:0", "--jitter"]),
            vec![],
        ),
        (
            os(&["sim-sink", "--listen", "127.0.0.1:0", "--retry-after"]),
            vec![],
        ),
        (
            os(&["sim-sink", "--listen", "127.0.0.1:0", "--drop-above"]),
            vec![],
        ),
        (os(&["sim-sink", "--listen"]), vec![]),
    ];
    // Four flags at a time: each run is mostly the start of a process.
    std::thread::scope(|scope| {
        for group in flags.chunks(flags.len().div_ceil(4)) {
            let dir = dir.path();
            let leases_dir = leases_dir.path();
            scope.spawn(move || {
                for (before, after) in group {
                    // `init` writes where it is told: in a directory of its own.
                    let own = tempfile::tempdir().unwrap();
                    let at = match before[0].to_str() {
                        Some("init") => own.path(),
                        Some("leases") => leases_dir,
                        _ => dir,
                    };
                    for value in hostile() {
                        let mut args = before.clone();
                        args.push(value.clone());
                        args.extend(after.iter().cloned());
                        // A sim-sink that takes its value serves on: a panic comes at start.
                        // A run that takes it drains on: a panic comes at start or at the
                        // first ticks, 200 ms apart.
                        let within = if before[0] == "sim-sink" { 500 } else { 2000 };
                        if let Some(out) = run_for(at, &args, Duration::from_millis(within)) {
                            let err = stderr(&out);
                            assert_ne!(out.status.code(), Some(101), "{args:?}: {err}");
                            assert!(!err.contains("panicked"), "{args:?}: {err}");
                        }
                    }
                }
            });
        }
    });
}

/// `leases resize` stores what every worker of the pool reads: it takes the bounds the
/// configuration holds `leases.capacity` and `leases.partitions` to.
#[test]
fn leases_resize_takes_the_configuration_bounds() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    write_config(
        dir.path(),
        "in.ndjson",
        1000.0,
        &format!(
            "[leases]\nstore = \"{}\"\npool = \"{}\"\ncapacity = 100\npartitions = 2\n",
            pg_url(),
            unique("resize_bounds")
        ),
    );
    for (flag, value) in [
        ("--capacity", "1e-300"),
        ("--capacity", "1e300"),
        ("--partitions", "4294967295"),
    ] {
        let out = run_in(
            dir.path(),
            &["leases", "resize", "-c", "sluice.toml", flag, value],
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
}

/// The same values as environment variables for a few keys of each type.
#[test]
fn no_environment_value_reaches_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    write_config(dir.path(), "in.ndjson", 1000.0, "");
    let keys = [
        "SLUICE_RATE__RECORDS_PER_SECOND",
        "SLUICE_RATE__TICK",
        "SLUICE_SINK__TABLE",
        "SLUICE_SINK__URL",
        "SLUICE_SINK__KEY",
        "SLUICE_SINK__MAX_BATCH",
        "SLUICE_TELEMETRY__TOKEN",
        "SLUICE_TELEMETRY__LISTEN",
        "SLUICE_RETRY__MAX_ATTEMPTS",
        "SLUICE_CONCURRENCY__MAX",
    ];
    std::thread::scope(|scope| {
        for group in keys.chunks(keys.len().div_ceil(4)) {
            let dir = dir.path();
            scope.spawn(move || {
                for key in group {
                    for value in hostile() {
                        let out = sluice()
                            .current_dir(dir)
                            .args(["check", "-c", "sluice.toml", "--timeout", "1s"])
                            .env(key, &value)
                            .output()
                            .unwrap();
                        let err = stderr(&out);
                        assert_ne!(out.status.code(), Some(101), "{key}={value:?}: {err}");
                        assert!(!err.contains("panicked"), "{key}={value:?}: {err}");
                    }
                }
            });
        }
    });
}

fn control(port: u16, path: &str, body: Vec<u8>) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = crate::common::http()
            .post(format!("http://127.0.0.1:{port}/control/{path}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    })
}

/// A running worker's controls answered with hostile values: each refused with 400 (or
/// 4xx for a body that is not the JSON asked for), the worker drains on to the end, and
/// `sluice ctl` refuses the same values itself (exit 2) — from a directory without a
/// configuration, by `--url` alone.
#[test]
fn hostile_controls_are_refused_and_the_worker_drains_on() {
    let dir = tempfile::tempdir().unwrap();
    let n = 300;
    write_records(&dir.path().join("in.ndjson"), n, &[]);
    let port = free_port();
    write_config(
        dir.path(),
        "in.ndjson",
        60.0,
        &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    let worker = worker(dir.path(), true);
    let elsewhere = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let ctl = |args: &[&str]| run_in(elsewhere.path(), &[&["ctl", "--url", &url], args].concat());
    let started = Instant::now();
    loop {
        let out = ctl(&["status", "--json"]);
        if out.status.success() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "ctl --url without a sluice.toml reaches the worker: {}",
            stderr(&out)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for value in ["1e-300", "1e-20", "-1", "1e300", "nan", "inf", "0.0001"] {
        let out = ctl(&["rate", value]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "rate {value}: {err}");
        assert!(
            err.contains("0.001"),
            "rate {value}: names the bounds: {err}"
        );
    }
    for value in ["0", "1.5", "1e300", "-1", "nan"] {
        let out = ctl(&["batch", value]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "batch {value}: {}",
            stderr(&out)
        );
    }
    for value in ["1e-300", "1e-20", "-1", "1e300", "5e-324", "1e9"] {
        let body = format!("{{\"value\":{value}}}").into_bytes();
        let (code, answer) = control(port, "rate", body);
        if value == "1e9" {
            assert_eq!(code, 200, "the most a rate may be: {answer}");
        } else {
            assert_eq!(code, 400, "rate {value}: {answer}");
        }
    }
    for value in ["0", "0.5", "-1", "1e300", "2000000"] {
        let body = format!("{{\"value\":{value}}}").into_bytes();
        let (code, answer) = control(port, "batch", body);
        assert_eq!(code, 400, "batch {value}: {answer}");
    }
    let bodies: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"{".to_vec(),
        b"{\"value\":1e400}".to_vec(),
        b"{\"value\":\"fast\"}".to_vec(),
        b"[]".to_vec(),
        vec![0xff, 0xfe],
        format!("{{\"value\":{}}}", "9".repeat(100_000)).into_bytes(),
    ];
    for path in ["rate", "batch"] {
        for body in &bodies {
            let (code, answer) = control(port, path, body.clone());
            assert!(
                (400..500).contains(&code),
                "{path} {body:?}: {code} {answer}"
            );
        }
    }
    let out = ctl(&["rate", "off"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = finish(worker, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        sqlite_count(&dir.path().join("out.db"), "select count(*) from records"),
        n as i64
    );
}
