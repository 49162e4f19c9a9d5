//! Loading whole configurations: the file, the environment and the flags together, and
//! the problems a load names.

use std::io::Write;
use std::time::Duration;

use super::*;
use crate::sink::http::settings::HttpFormat;

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    path
}

fn base(dir: &Path, extra: &str) -> PathBuf {
    let input = write(dir, "in.ndjson", "{\"id\":1}\n");
    let body = format!(
        "[source]\nkind = \"file\"\npath = {:?}\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://x.db\"\nkey = \"/id\"\n{extra}",
        input
    );
    write(dir, "c.toml", &body)
}

#[test]
fn good_config_loads_with_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::load(&base(dir.path(), ""), &Overrides::default()).unwrap();
    assert_eq!(cfg.rate.tick, Duration::from_millis(200));
    assert_eq!(cfg.sink.table, "records");
    assert_eq!(cfg.retry.max_attempts, 8);
}

fn error_of(extra: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    Config::load(&base(dir.path(), extra), &Overrides::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn unknown_key_is_named() {
    assert!(error_of("[rate]\nrecords_per_secnd = 5\n").contains("records_per_secnd"));
}

#[test]
fn bad_duration_is_named() {
    let e = error_of("[rate]\nrecords_per_second = 5\ntick = \"200 msx\"\n");
    assert!(e.contains("rate.tick"), "{e}");
}

#[test]
fn non_positive_rate_is_named() {
    let e = error_of("[rate]\nrecords_per_second = 0\ntick = \"200ms\"\n");
    assert!(e.contains("rate.records_per_second"), "{e}");
}

fn http_error_of(sink_extra: &str, extra: &str) -> Result<Config, String> {
    let dir = tempfile::tempdir().unwrap();
    let input = write(dir.path(), "in.ndjson", "{\"id\":1}\n");
    let body = format!(
        "[source]\nkind = \"file\"\npath = {input:?}\n[sink]\nkind = \"http\"\nurl = \"http://127.0.0.1:8080/ingest\"\nkey = \"/id\"\n{sink_extra}\n{extra}"
    );
    let path = write(dir.path(), "c.toml", &body);
    Config::load(&path, &Overrides::default()).map_err(|e| e.to_string())
}

#[test]
fn http_sink_loads_with_its_keys() {
    let cfg = http_error_of(
        "format = \"ndjson\"\ntimeout = \"2s\"\n[sink.headers]\nX-Api = \"a$$b\"\n[sink.dead_letters]\npath = \"dead.ndjson\"",
        "[throttle]\nhold = 0.9",
    )
    .unwrap();
    let http = cfg.sink.http().unwrap();
    assert_eq!(http.format, HttpFormat::Ndjson);
    assert_eq!(http.transport.timeout, Duration::from_secs(2));
    assert_eq!(http.transport.headers["X-Api"], "a$$b");
    assert_eq!(cfg.throttle.hold, 0.9);
    assert_eq!(cfg.throttle.beta, 0.7, "unset keys keep their defaults");
    assert_eq!(cfg.retry.budget_ratio, 0.2);
}

#[test]
fn http_sink_mistakes_are_named() {
    let e = http_error_of("", "").unwrap_err();
    assert!(e.contains("sink.dead_letters"), "{e}");
    let e = http_error_of("[sink.dead_letters]\nurl = \"mysql://x\"", "").unwrap_err();
    assert!(e.contains("sink.dead_letters.url"), "{e}");
    let e = http_error_of(
        "[sink.dead_letters]\nurl = \"sqlite://d.db\"\npath = \"d.ndjson\"",
        "",
    )
    .unwrap_err();
    assert!(e.contains("exactly one"), "{e}");
    let e = http_error_of(
        "[sink.headers]\nAuthorization = \"Bearer ${SLUICE_TEST_SURELY_UNSET_VAR}\"\n[sink.dead_letters]\npath = \"d.ndjson\"",
        "",
    )
    .unwrap_err();
    assert!(
        e.contains("sink.headers") && e.contains("SLUICE_TEST_SURELY_UNSET_VAR"),
        "{e}"
    );
    let e = http_error_of(
        "[sink.dead_letters]\npath = \"d.ndjson\"",
        "[throttle]\nbeta = 1.5",
    )
    .unwrap_err();
    assert!(e.contains("throttle.beta"), "{e}");
    let e = http_error_of(
        "[sink.dead_letters]\npath = \"d.ndjson\"",
        "[throttle]\nmax_pause = \"0s\"",
    )
    .unwrap_err();
    assert!(e.contains("throttle.max_pause"), "{e}");
    let e = http_error_of(
        "[sink.dead_letters]\npath = \"d.ndjson\"",
        "[throttle]\nrecovery = \"linear\"",
    )
    .unwrap_err();
    assert!(e.contains("recovery"), "{e}");
    let e = http_error_of(
        "[sink.dead_letters]\npath = \"d.ndjson\"",
        "[throttle]\nprobe_gain = 0.5",
    )
    .unwrap_err();
    assert!(e.contains("throttle.probe_gain"), "{e}");
}

#[test]
fn tls_settings_that_cannot_apply_are_named() {
    let dl = "[sink.dead_letters]\npath = \"d.ndjson\"";
    let e = http_error_of(
        &format!("{dl}\n[sink.tls]\ninsecure_skip_verify = true"),
        "",
    )
    .unwrap_err();
    assert!(e.contains("sink.tls") && e.contains("https://"), "{e}");
    let e = http_error_of(
        &format!("{dl}\n[sink.tls]\ninsecure_skip_verify = \"yes\""),
        "",
    )
    .unwrap_err();
    assert!(e.contains("insecure_skip_verify"), "{e}");
    let e = error_of_sink("[sink.tls]\nca_file = \"ca.pem\"\n");
    assert!(e.contains("sink.tls"), "{e}");
}

#[test]
fn the_http_example_config_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/http-sim.toml");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/records.ndjson");
    let over = Overrides {
        input: Some(source),
        ..Default::default()
    };
    let cfg = Config::load(&path, &over).unwrap();
    assert_eq!(cfg.sink.kind(), SinkKind::Http);
    assert_eq!(cfg.throttle.hold, 0.97);
    assert!(cfg.sink.headers().unwrap().is_empty());
}

#[test]
fn dead_letters_are_refused_for_a_database_sink() {
    assert!(error_of("[sink.dead_letters]\npath = \"d.ndjson\"\n").contains("sink.dead_letters"));
}

#[test]
fn keys_of_another_kind_are_named() {
    let e = error_of_sink("timeout = \"5s\"\n");
    assert!(e.contains("sink.timeout") && e.contains("sqlite"), "{e}");
    let e = error_of_sink("coerce = \"lenient\"\n");
    assert!(e.contains("sink.coerce"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let path = base(dir.path(), "");
    let body = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, body.replace("[sink]", "topic = \"orders\"\n[sink]")).unwrap();
    let e = Config::load(&path, &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("source.topic") && e.contains("file"), "{e}");
}

/// Loads a file source into a sink of `kind` at `url` with `extra` keys.
fn load_sink(kind: &str, url: &str, extra: &str) -> Result<Config, String> {
    let dir = tempfile::tempdir().unwrap();
    let input = write(dir.path(), "in.ndjson", "{\"id\":1}\n");
    let body =
        format!("[source]\npath = {input:?}\n[sink]\nkind = \"{kind}\"\nurl = \"{url}\"\n{extra}");
    let path = write(dir.path(), "c.toml", &body);
    Config::load(&path, &Overrides::default()).map_err(|e| e.to_string())
}

#[test]
fn each_sink_kind_reads_its_own_keys_and_names_the_others() {
    let pg = "postgres://u@127.0.0.1/db";
    let http = "http://127.0.0.1:9/in\n[sink.dead_letters]\npath = \"d.ndjson\"";
    let cfg = load_sink(
        "postgres",
        pg,
        "throttle_sqlstates = [\"53300\"]\nmax_connections = 3\n",
    )
    .unwrap();
    let own = cfg.sink.postgres().unwrap();
    assert_eq!(own.throttle_sqlstates, ["53300"]);
    assert_eq!(own.max_connections, Some(3));
    assert!(load_sink("mysql", "mysql://u@h/db", "throttle_errors = [1040]\n").is_ok());
    for (kind, url, extra, key, why) in [
        (
            "postgres",
            pg,
            "format = \"ndjson\"\n",
            "sink.format",
            "does not apply to kind = \"postgres\"",
        ),
        (
            "mysql",
            "mysql://u@h/db",
            "coerce = \"lenient\"\n",
            "sink.coerce",
            "does not apply",
        ),
        (
            "mysql",
            "mysql://u@h/db",
            "urls = [\"mysql://h/db\"]\n",
            "sink.urls",
            "does not apply",
        ),
        (
            "sqlite",
            "sqlite://x.db",
            "[sink.balance]\nzone = \"a\"\n",
            "sink.balance",
            "does not apply",
        ),
        (
            "postgres",
            pg,
            "surely_not_a_key = 1\n",
            "sink.surely_not_a_key",
            "unknown key",
        ),
        (
            "postgres",
            pg,
            "max_connections = \"x\"\n",
            "sink.max_connections",
            "invalid type",
        ),
        (
            "sqlite",
            "sqlite://x.db",
            "max_batch = \"x\"\n",
            "sink.max_batch",
            "invalid type",
        ),
    ] {
        let e = load_sink(kind, url, extra).unwrap_err();
        assert!(e.contains(key) && e.contains(why), "{kind} {extra}: {e}");
    }
    let (http, extra) = http.split_once('\n').unwrap();
    for (more, key, why) in [
        (
            "throttle_errors = [1040]\n",
            "sink.throttle_errors",
            "does not apply",
        ),
        (
            "[sink.elasticsearch]\nindex = \"i\"\n",
            "sink.elasticsearch",
            "does not apply",
        ),
        ("timeout = 5\n", "sink.timeout", "invalid type"),
    ] {
        let e = load_sink("http", http, &format!("{more}{extra}\n")).unwrap_err();
        assert!(e.contains(key) && e.contains(why), "{more}: {e}");
    }
}

fn error_of_sink(sink_extra: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let input = write(dir.path(), "in.ndjson", "{\"id\":1}\n");
    let body = format!(
        "[source]\nkind = \"file\"\npath = {input:?}\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://x.db\"\n{sink_extra}"
    );
    let path = write(dir.path(), "c.toml", &body);
    Config::load(&path, &Overrides::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn flags_win_over_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = base(
        dir.path(),
        "[rate]\nrecords_per_second = 5\ntick = \"1s\"\n",
    );
    let over = Overrides {
        records_per_second: Some(50.0.into()),
        ..Default::default()
    };
    assert_eq!(
        Config::load(&path, &over).unwrap().rate.records_per_second,
        50.0.into()
    );
}

#[test]
fn bad_lease_settings_name_their_key() {
    let store = "[leases]\nstore = \"postgres://u@h/db\"\npool = \"p\"\n";
    let e = error_of(&format!("{store}capacity = 600\n"));
    assert!(e.contains("leases.partitions"), "{e}");
    let e = error_of(&format!("{store}capacity = 0\npartitions = 6\n"));
    assert!(e.contains("leases.capacity"), "{e}");
    let e = error_of(&format!(
        "{store}capacity = 6\npartitions = 6\nreserved = -1\n"
    ));
    assert!(e.contains("leases.reserved"), "{e}");
    let e = error_of(&format!(
        "{store}capacity = 6\npartitions = 6\nttl = \"10ms\"\n"
    ));
    assert!(e.contains("leases.ttl"), "{e}");
    let e = error_of("[leases]\nstore = \"kafka\"\ncapacity = 600\n");
    assert!(e.contains("leases.store"), "{e}");
    for store in ["mysql://h", "redis://h:notaport"] {
        let e = error_of(&format!(
            "[leases]\nstore = {store:?}\npool = \"p\"\ncapacity = 600\npartitions = 6\n"
        ));
        assert!(e.contains("leases.store"), "{store}: {e}");
    }
}

#[test]
fn the_rate_is_a_ceiling_only_where_it_was_set() {
    let dir = tempfile::tempdir().unwrap();
    let leases =
        "[leases]\nstore = \"postgres://u@h/db\"\npool = \"p\"\ncapacity = 600\npartitions = 6\n";
    let path = base(dir.path(), leases);
    let none = Overrides::default();
    assert_eq!(Config::load(&path, &none).unwrap().rate_ceiling(), None);
    let flag = Overrides {
        records_per_second: Some(50.0.into()),
        ..Default::default()
    };
    assert_eq!(
        Config::load(&path, &flag).unwrap().rate_ceiling(),
        Some(50.0)
    );
    let path = base(
        dir.path(),
        &format!("[rate]\nrecords_per_second = 70\n{leases}"),
    );
    assert_eq!(
        Config::load(&path, &none).unwrap().rate_ceiling(),
        Some(70.0)
    );
}

/// `throttle.remember` is rewritten whole: the input, its checkpoint, a directory or a
/// file holding anything but a remembered limit are refused naming the key; a missing
/// file, or one of its own, is taken.
#[test]
fn a_remembered_limit_never_overwrites_another_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = write(d, "data.json", "{\"id\":1}\n");
    let load = |remember: &Path| {
        let extra = format!("[throttle]\nremember = {:?}\n", remember);
        Config::load(&base(d, &extra), &Overrides::default()).map_err(|e| e.to_string())
    };
    for (path, why) in [
        (d.join("in.ndjson"), "is also source.path"),
        (
            d.join("in.ndjson.sluice-checkpoint"),
            "is also source.checkpoint",
        ),
        (data.clone(), "is not a remembered limit"),
        (d.to_path_buf(), "must name a file"),
        (d.join("missing").join("limit"), "does not exist"),
    ] {
        let e = load(&path).unwrap_err();
        assert!(
            e.contains("throttle.remember") && e.contains(why),
            "{path:?}: {e}"
        );
    }
    assert!(load(&d.join("limit")).is_ok());
    std::fs::write(d.join("empty"), "").unwrap();
    assert!(load(&d.join("empty")).is_ok());
    assert_eq!(std::fs::read_to_string(&data).unwrap(), "{\"id\":1}\n");
}
