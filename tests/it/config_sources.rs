//! Where the configuration comes from and what the environment may say: `--config`, then
//! ./sluice.toml, the user's and the system's config directories, then the built-in
//! default (each run says which); `sluice init`; librdkafka's dotted properties from the
//! environment; warnings for misspelt SLUICE_LOG and SLUICE_* variables; keys of another
//! kind refused; credentials given twice refused.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

/// `sluice` in `dir` with a home of its own, so no config of the machine's user is found.
fn isolated(dir: &Path, home: &Path) -> Command {
    let mut cmd = sluice();
    cmd.current_dir(dir)
        .env("SLUICE_LOG", "info")
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME");
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

#[test]
fn without_config_the_built_in_default_is_used_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = run(isolated(dir.path(), home.path()).args(["run", "--until-empty"]));
    let err = stderr(&out);
    // The built-in default reads examples/records.ndjson, which is not here.
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("built-in default"), "{err}");
    assert!(err.contains("examples/records.ndjson"), "{err}");
}

#[test]
fn the_working_directory_then_the_user_directory() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 5, &[]);
    let user = home.path().join(".config/sluice");
    std::fs::create_dir_all(&user).unwrap();
    let input = dir.path().join("in.ndjson");
    write_config(&user, input.to_str().unwrap(), 1000.0, "");
    let out =
        run(isolated(dir.path(), home.path()).args(["run", "--until-empty", "--summary", "json"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("found in the user's config directory"),
        "{}",
        stderr(&out)
    );
    assert_eq!(summary(&out)["written"], 5);

    write_config(dir.path(), "in.ndjson", 1000.0, "");
    let out =
        run(isolated(dir.path(), home.path()).args(["run", "--until-empty", "--summary", "json"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("sluice.toml (found in the working directory)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn init_writes_a_starter_that_runs_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = run(isolated(dir.path(), home.path()).arg("init"));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(dir.path().join("sluice.toml")).unwrap();
    assert!(
        text.lines()
            .filter(|l| l.trim_start().starts_with('#'))
            .count()
            > 20
    );
    let out = run(isolated(dir.path(), home.path()).arg("init"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--force"));
    write_records(&dir.path().join("records.ndjson"), 7, &[]);
    let out =
        run(isolated(dir.path(), home.path()).args(["run", "--until-empty", "--summary", "json"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["written"], 7);
}

#[test]
fn librdkafka_properties_come_from_the_environment_with_underscores_for_dots() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("sluice.toml"),
        "[source]\nkind = \"kafka\"\nbrokers = \"127.0.0.1:1\"\ntopic = \"t\"\ngroup = \"g\"\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\n",
    )
    .unwrap();
    // librdkafka itself refuses the value: proof that it arrived as session.timeout.ms.
    let out = sluice()
        .current_dir(dir.path())
        .env(
            "SLUICE_SOURCE__PROPERTIES__SESSION_TIMEOUT_MS",
            "not-a-number",
        )
        .args(["check", "-c", "sluice.toml"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("source.properties") && err.contains("session.timeout.ms"),
        "{err}"
    );
}

#[test]
fn misspelt_log_levels_and_variables_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    write_config(dir.path(), "in.ndjson", 1000.0, "");
    let out = sluice()
        .current_dir(dir.path())
        .env("SLUICE_LOG", "warnn")
        .env("SLUICE_SINK_URL", "sqlite://elsewhere.db")
        .args(["run", "-c", "sluice.toml", "--until-empty"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("SLUICE_LOG=\"warnn\"") && err.contains("logging at info"),
        "{err}"
    );
    assert!(
        err.contains("configuration: sluice.toml"),
        "info lines are shown: {err}"
    );
    assert!(
        err.contains("SLUICE_SINK_URL is not a sluice variable"),
        "{err}"
    );
}

fn refused(config: &str, key: &str) {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 3, &[]);
    std::fs::write(dir.path().join("sluice.toml"), config).unwrap();
    let out = run_in(dir.path(), &["run", "-c", "sluice.toml", "--until-empty"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(key), "should name {key}: {err}");
}

#[test]
fn keys_of_another_kind_are_refused() {
    refused(
        "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://o.db\"\ntimeout = \"5s\"\n",
        "sink.timeout",
    );
    refused(
        "[source]\nkind = \"amqp\"\nurl = \"amqp://127.0.0.1:1/%2f\"\nqueue = \"q\"\npath = \"in.ndjson\"\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://o.db\"\n",
        "source.path",
    );
    refused(
        "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://o.db\"\n[leases]\nstore = \"mongodb://127.0.0.1:27017\"\ncapacity = 5\npartitions = 1\npool = \"p\"\n",
        "leases.store",
    );
}

#[test]
fn a_password_in_the_url_and_an_authorization_header_are_refused_together() {
    refused(
        "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"http\"\nurl = \"http://u:p@127.0.0.1:1/in\"\n[sink.headers]\nAuthorization = \"Bearer x\"\n[sink.dead_letters]\npath = \"d.ndjson\"\n",
        "sink.headers",
    );
}

#[test]
fn a_url_may_come_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 4, &[]);
    std::fs::write(dir.path().join("sink-url"), "sqlite://from-file.db\n").unwrap();
    std::fs::write(
        dir.path().join("sluice.toml"),
        "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"sqlite\"\nurl_file = \"sink-url\"\nkey = \"/id\"\n",
    )
    .unwrap();
    let out = run_in(dir.path(), DRAIN);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        sqlite_count(
            &dir.path().join("from-file.db"),
            "SELECT count(*) FROM records"
        ),
        4
    );
}
