//! PostgreSQL URLs as the real server meets them: a parameter the driver would ignore
//! (`?ssl_mode=require` connects in plaintext where the server allows it) exits 2 naming
//! it and the parameter meant, for the sink, the lease store and a probe alike; a bad
//! `sslmode` is said once; `check` says whether each connection uses TLS.

use crate::common;

use std::path::Path;

use common::*;

/// `pg_url()` with `query` appended.
fn with(query: &str) -> String {
    format!("{}?{query}", pg_url())
}

fn config(dir: &Path, sink: &str, leases: &str, probe: &str) {
    write_records(&dir.join("in.ndjson"), 3, &[]);
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"postgres\"\nurl = {sink:?}\ntable = \"pg_urls\"\nkey = \"/id\"\n\n\
             [leases]\nstore = {leases:?}\npool = \"pg_urls\"\ncapacity = 100\npartitions = 1\n\n\
             [[health.probe]]\nname = \"lag\"\nquery = \"SELECT 0\"\nurl = {probe:?}\nmax = 1\n"
        ),
    )
    .unwrap();
}

#[test]
fn a_parameter_the_driver_would_ignore_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    config(
        dir.path(),
        &with("ssl_mode=require"),
        &with("SSLMODE=require"),
        &with("ssl=true"),
    );
    for command in ["check", "run"] {
        let out = run_in(dir.path(), &[command, "-c", "sluice.toml"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{command}: {err}");
        for (key, parameter) in [
            ("sink.url", "ssl_mode"),
            ("leases.store", "SSLMODE"),
            ("health.probe.url", "ssl"),
        ] {
            assert!(
                err.contains(&format!(
                    "{key}: unknown URL parameter {parameter:?}: did you mean sslmode?"
                )),
                "{command}: {key} {parameter}: {err}"
            );
        }
        assert!(!err.contains("ignoring unrecognized"), "{err}");
    }
    config(
        dir.path(),
        &with("target_session_attrs=read-write"),
        &pg_url(),
        &pg_url(),
    );
    let out = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("\"target_session_attrs\" is libpq's"));
}

#[test]
fn a_bad_sslmode_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), &with("sslmode=verify"), &pg_url(), &pg_url());
    let out = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.matches("is not a TLS mode").count(), 1, "{err}");
    assert!(!err.contains("error with configuration"), "{err}");
}

#[test]
fn check_says_whether_each_connection_uses_tls() {
    let dir = tempfile::tempdir().unwrap();
    config(
        dir.path(),
        &with("sslmode=disable"),
        &with("sslmode=require"),
        &with("sslmode=disable"),
    );
    let out = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let line = |what: &str| {
        err.lines()
            .find(|l| l.starts_with(&format!("ok    {what}")))
            .unwrap_or_else(|| panic!("no {what} line: {err}"))
            .to_string()
    };
    assert!(
        line("sink postgres").contains("answers without TLS"),
        "{err}"
    );
    assert!(
        line("lease store").contains("answers over TLS (TLSv1."),
        "{err}"
    );
    assert!(line("health probe lag").contains("without TLS"), "{err}");
    config(dir.path(), &pg_url(), &pg_url(), &with("sslmode=require"));
    let out = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("ok    health probe lag") && l.contains("over TLS (TLSv1.")),
        "{err}"
    );
}
