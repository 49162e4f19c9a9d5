//! Bad configuration exits 2 before anything starts, naming the key.

use crate::common;

use std::process::Command;

use common::*;

fn check_refused(extra_env: &[(&str, &str)], config_tail: &str, input: &str, key: &str) {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    write_config(dir.path(), input, 100.0, config_tail);
    let mut cmd = sluice();
    cmd.current_dir(dir.path())
        .args(["run", "-c", "sluice.toml", "--until-empty"]);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(key), "message should name {key}: {err}");
    assert!(!dir.path().join("out.db").exists(), "nothing started");
}

#[test]
fn unknown_key() {
    check_refused(
        &[],
        "[retry]\nmax_atempts = 3\n",
        "in.ndjson",
        "max_atempts",
    );
}

#[test]
fn misspelled_duration() {
    let dir_tail = "[shutdown]\ngrace = \"30 sec onds\"\n";
    check_refused(&[], dir_tail, "in.ndjson", "shutdown.grace");
}

#[test]
fn non_positive_rate_from_the_environment() {
    check_refused(
        &[("SLUICE_RATE__RECORDS_PER_SECOND", "-5")],
        "",
        "in.ndjson",
        "rate.records_per_second",
    );
}

#[test]
fn zero_tick() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    let cfg = write_config(dir.path(), "in.ndjson", 100.0, "");
    let body = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("tick = \"200ms\"", "tick = \"0s\"");
    std::fs::write(&cfg, body).unwrap();
    let out = run_in(dir.path(), &["run", "-c", "sluice.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("rate.tick"), "{}", stderr(&out));
}

#[test]
fn missing_input_file() {
    check_refused(&[], "", "no-such-file.ndjson", "source.path");
}

#[test]
fn injected_table_name() {
    check_refused(
        &[("SLUICE_SINK__TABLE", "records; drop table x")],
        "",
        "in.ndjson",
        "sink.table",
    );
}

#[test]
fn missing_config_file_and_bad_usage() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(dir.path(), &["run", "-c", "nope.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("nope.toml"));
    let out = run_in(dir.path(), &["run", "--frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn check_accepts_a_good_config() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    write_config(dir.path(), "in.ndjson", 100.0, "");
    let out = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_lease_store_without_partitions_or_with_too_many() {
    check_refused(
        &[],
        "[leases]\nstore = \"postgres://u@127.0.0.1/db\"\ncapacity = 100\n",
        "in.ndjson",
        "leases.partitions",
    );
    // A typo of a few zeros would have every acquire loop over them in the shared store.
    check_refused(
        &[],
        "[leases]\nstore = \"redis://127.0.0.1:6379/\"\npool = \"p\"\ncapacity = 100\npartitions = 80000000\n",
        "in.ndjson",
        "100000",
    );
}

#[test]
fn a_lease_store_of_no_known_kind_or_a_malformed_redis_url() {
    for store in [
        "mysql://u@127.0.0.1/db",
        "redis://127.0.0.1:notaport/",
        "redis://[::1/",
    ] {
        check_refused(
            &[],
            &format!("[leases]\nstore = {store:?}\npool = \"p\"\ncapacity = 100\npartitions = 4\n"),
            "in.ndjson",
            "leases.store",
        );
    }
    check_refused(
        &[],
        "[leases]\nstore = \"redis://127.0.0.1:6379/\"\npool = \"p\"\ncapacity = 100\n",
        "in.ndjson",
        "leases.partitions",
    );
}

#[test]
fn a_lease_ttl_shorter_than_a_renewal() {
    check_refused(
        &[],
        "[leases]\nstore = \"postgres://u@127.0.0.1/db\"\ncapacity = 100\npartitions = 4\nttl = \"100ms\"\n",
        "in.ndjson",
        "leases.ttl",
    );
}

#[test]
fn a_concurrency_floor_above_its_ceiling() {
    check_refused(
        &[],
        "[concurrency]\nmin = 10\nmax = 4\n",
        "in.ndjson",
        "concurrency.min",
    );
    check_refused(
        &[],
        "[concurrency]\nalgorithm = \"aimd\"\nmax = 8\ninitial = 9\n",
        "in.ndjson",
        "concurrency.initial",
    );
}

#[test]
fn a_postgres_dead_letter_store_for_an_http_sink() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    std::fs::write(
        dir.path().join("sluice.toml"),
        "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n[sink]\nkind = \"http\"\nurl = \"http://127.0.0.1:9/ingest\"\nkey = \"/id\"\n\n[sink.dead_letters]\nurl = \"postgres://u@127.0.0.1/db\"\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["run", "-c", "sluice.toml", "--until-empty"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("sink.dead_letters.url"), "{err}");
}

#[test]
fn check_reports_every_problem_at_once() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    write_config(
        dir.path(),
        "in.ndjson",
        100.0,
        "[retry]\nfactor = 0.5\n[concurrency]\nmin = 10\nmax = 4\n[throttle]\nbeta = 2.0\n",
    );
    let body = std::fs::read_to_string(dir.path().join("sluice.toml"))
        .unwrap()
        .replace("[sink]\n", "[sink]\ntimeout = \"5s\"\n");
    std::fs::write(dir.path().join("sluice.toml"), body).unwrap();
    let out = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for key in [
        "sink.timeout",
        "retry.factor",
        "concurrency.min",
        "throttle.beta",
    ] {
        assert!(err.contains(key), "{key} missing: {err}");
    }
    assert!(err.contains("4 problems"), "{err}");
}

#[test]
fn upsert_into_mysql_is_not_implemented_yet() {
    check_refused(
        &[
            ("SLUICE_SINK__KIND", "mysql"),
            ("SLUICE_SINK__URL", "mysql://sluice@127.0.0.1/sluice_test"),
            ("SLUICE_SINK__MODE", "upsert"),
            ("SLUICE_SINK__VERSION", "/n"),
        ],
        "",
        "in.ndjson",
        "sink.mode",
    );
}

#[test]
fn aperture_settings_that_cannot_hold() {
    // An HTTP sink over two endpoints; each case breaks one aperture setting.
    let cases = [
        ("min = 4\nmax = 2\n", &[][..], "sink.balance.aperture.min"),
        (
            "mode = \"nearest\"\n",
            &[][..],
            "sink.balance.aperture.mode",
        ),
        (
            "mode = \"deterministic\"\n",
            &[("SLUICE_WORKER_INDEX", "3"), ("SLUICE_WORKER_COUNT", "3")][..],
            "sink.balance.aperture.worker_index",
        ),
    ];
    for (aperture, env, key) in cases {
        let dir = tempfile::tempdir().unwrap();
        write_records(&dir.path().join("in.ndjson"), 3, &[]);
        std::fs::write(
            dir.path().join("sluice.toml"),
            format!(
                "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
                 [sink]\nkind = \"http\"\nurls = [\"http://127.0.0.1:9/a\", \"http://127.0.0.1:10/a\"]\n\n\
                 [sink.balance]\nstrategy = \"aperture\"\n\n[sink.balance.aperture]\n{aperture}\n\
                 [sink.dead_letters]\npath = \"dead.ndjson\"\n"
            ),
        )
        .unwrap();
        let mut cmd = sluice();
        cmd.current_dir(dir.path())
            .args(["run", "-c", "sluice.toml", "--until-empty"])
            .envs(env.iter().copied());
        let out = cmd.output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{aperture}: {err}");
        assert!(err.contains(key), "{aperture}: should name {key}: {err}");
    }
}

#[test]
fn an_amqp_queue_name_longer_than_amqp_carries() {
    let dir = tempfile::tempdir().unwrap();
    let queue = "q".repeat(256);
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"amqp\"\nurl = \"amqp://guest:guest@127.0.0.1:5672/%2f\"\nqueue = \"{queue}\"\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\n"
        ),
    )
    .unwrap();
    for command in ["check", "run", "plan", "produce"] {
        let out = run_in(dir.path(), &[command, "-c", "sluice.toml"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{command}: {err}");
        assert!(
            err.contains("source.queue") && err.contains("255"),
            "{command}: {err}"
        );
    }
}

#[test]
fn an_empty_lease_pool_name() {
    for pool in ["pool = \"\"\n", "pool = \"  \"\n", ""] {
        check_refused(
            &[],
            &format!(
                "[leases]\nstore = \"postgres://u@127.0.0.1/db\"\n{pool}capacity = 100\npartitions = 4\n"
            ),
            "in.ndjson",
            "leases.pool",
        );
    }
}

#[test]
fn a_tick_too_short_to_smooth_anything() {
    for tick in ["1ns", "9ms"] {
        check_refused(&[("SLUICE_RATE__TICK", tick)], "", "in.ndjson", "rate.tick");
    }
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    write_config(dir.path(), "in.ndjson", 100.0, "");
    let out = sluice()
        .current_dir(dir.path())
        .args(["run", "-c", "sluice.toml", "--until-empty"])
        .env("SLUICE_RATE__TICK", "10ms")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "10ms is taken: {}",
        stderr(&out)
    );
}

/// A string key takes digits (or `true`) from the environment as the text they are, as the
/// The book (docs/security.md) promises for SLUICE_TELEMETRY__TOKEN; numeric keys still read numbers.
#[test]
fn string_keys_take_digits_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    write_config(dir.path(), "in.ndjson", 100.0, "");
    let out = sluice()
        .current_dir(dir.path())
        .args(["run", "-c", "sluice.toml", "--until-empty"])
        .env("SLUICE_TELEMETRY__TOKEN", "123456")
        .env("SLUICE_SINK__TABLE", "t_2024")
        .env("SLUICE_RATE__RECORDS_PER_SECOND", "500")
        .env("SLUICE_SINK__MAX_BATCH", "2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        sqlite_count(&dir.path().join("out.db"), "select count(*) from t_2024"),
        3
    );
    // Digits reach the key's own check as text, not a type error.
    let out = sluice()
        .current_dir(dir.path())
        .args(["check", "-c", "sluice.toml"])
        .env("SLUICE_SINK__TABLE", "2024")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(err.contains("\"2024\" is not a plain identifier"), "{err}");
    let out = sluice()
        .current_dir(dir.path())
        .args(["check", "-c", "sluice.toml"])
        .env("SLUICE_RATE__RECORDS_PER_SECOND", "fast")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("rate.records_per_second") && err.contains("SLUICE_RATE__RECORDS_PER_SECOND"),
        "the key and the variable are named: {err}"
    );
}

/// Each reason a file cannot be read is told as itself, naming the file.
#[test]
fn files_that_cannot_be_read_say_why() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("conf.d")).unwrap();
    let out = run_in(dir.path(), &["check", "-c", "conf.d"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("conf.d is a directory"), "{err}");

    std::fs::write(dir.path().join("latin1.toml"), b"# caf\xe9\n").unwrap();
    let out = run_in(dir.path(), &["check", "-c", "latin1.toml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("latin1.toml cannot be read") && err.contains("UTF-8"),
        "{err}"
    );
    assert!(!err.contains("source:"), "not blamed on [source]: {err}");

    std::fs::create_dir(dir.path().join("in.ndjson")).unwrap();
    write_config(dir.path(), "in.ndjson", 100.0, "");
    let out = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("source.path") && err.contains("in.ndjson is a directory"),
        "{err}"
    );
}

/// A configuration file the user may not read: "Permission denied", naming the file. Root
/// reads every file, so the binary runs as nobody (setpriv) when the tests run as root.
#[test]
fn an_unreadable_config_file_is_named() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    let config = write_config(dir.path(), "in.ndjson", 100.0, "");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_sluice"));
        c
    } else {
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o000)).unwrap();
        sluice()
    };
    let out = cmd
        .current_dir(dir.path())
        .args(["check", "-c", "sluice.toml"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("configuration file sluice.toml cannot be read: Permission denied"),
        "{err}"
    );
}

/// A Kafka source's wire formats: each mistake exits 2 naming its key, for every command.
#[test]
fn wire_formats_that_cannot_be_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.avsc"), "{\"type\": \"recrod\"}").unwrap();
    let head =
        "[source]\nkind = \"kafka\"\nbrokers = \"127.0.0.1:1\"\ntopic = \"t\"\ngroup = \"g\"\n";
    let sink = "\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\n";
    for (tail, key, words) in [
        (
            "[source.value]\nformat = \"text\"\n",
            "source.value.format",
            "for keys",
        ),
        (
            "[source.value]\nformat = \"avro\"\n",
            "source.schema_registry",
            "schema_file",
        ),
        (
            "[source.key]\nformat = \"protobuf\"\n",
            "source.schema_registry",
            "required",
        ),
        (
            "[source.value]\nformat = \"avro\"\nschema_file = \"bad.avsc\"\n",
            "source.value.schema_file",
            "not an Avro schema",
        ),
        (
            "[source.value]\nformat = \"avro\"\nschema_file = \"missing.avsc\"\n",
            "source.value.schema_file",
            "cannot read",
        ),
        (
            "[source.value]\nformat = \"protobuf\"\nschema_file = \"bad.avsc\"\n",
            "source.value.schema_file",
            "format = \"avro\"",
        ),
        (
            "[source.value]\nformat = \"avro\"\n[source.schema_registry]\nurl = \"ftp://registry\"\n",
            "source.schema_registry.url",
            "http",
        ),
        (
            "[source.value]\nformat = \"avro\"\n[source.schema_registry]\nurl = \"http://r:8081\"\ntoken = \"t\"\nusername = \"u\"\n",
            "source.schema_registry.token",
            "not both",
        ),
        (
            "[source.value]\nformat = \"avro\"\n[source.schema_registry]\nurl = \"http://r:8081\"\npassword_file = \"nowhere\"\n",
            "source.schema_registry.password_file",
            "cannot read",
        ),
        (
            "[source.value]\nformat = \"avro\"\n[source.schema_registry]\nurl = \"http://r:8081\"\nrequests_per_second = 0\n",
            "source.schema_registry.requests_per_second",
            "at least 1",
        ),
        (
            "[source.value]\nformat = \"avro\"\n[source.schema_registry]\nurl = \"http://r:8081\"\ntimeout = \"2000y\"\n",
            "source.schema_registry.timeout",
            "365 days",
        ),
    ] {
        std::fs::write(
            dir.path().join("sluice.toml"),
            format!("{head}{tail}{sink}"),
        )
        .unwrap();
        for command in ["check", "run"] {
            let out = run_in(dir.path(), &[command, "-c", "sluice.toml"]);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{tail} {command}: {err}");
            assert!(
                err.contains(key) && err.contains(words),
                "{tail} {command}: should name {key} and say {words:?}: {err}"
            );
            assert!(!err.contains("panicked"), "{err}");
        }
    }
}
