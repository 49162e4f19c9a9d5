//! What a MySQL / MariaDB sink needs to reach and may do there, told before a run: `check`
//! tests the rights a run uses (and `run` creates only what is missing, so a role allowed
//! to write existing tables can run), an unreachable server is said so at once, a URL
//! parameter sqlx would ignore is refused (exit 2), and `check` says whether each
//! connection uses TLS.

use crate::common;
use crate::mysql_support;

use std::time::{Duration, Instant};

use mysql_support::{ScratchServer, TestUser, check, count, drain, execute, mysql_url};

fn lines(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("{{\"id\":\"k{i}\"}}")).collect()
}

/// A SELECT-only user fails `check` naming INSERT (and `run` at start); a user with
/// SELECT, INSERT and UPDATE on the two existing tables passes `check` and runs; that
/// user's `check` of a table that does not exist fails naming CREATE, and anyone's of a
/// missing mapped table fails (run would not create it).
#[test]
fn check_tests_the_rights_a_run_uses_and_run_creates_only_what_is_missing() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let table = common::unique("my_rights");
    // The tables, created by the test's own user, as a first run would.
    let out = drain(&mysql_url(), &table, "", &lines(1));
    assert!(out.status.success(), "{}", common::stderr(&out));
    let on = |right: &str| {
        [table.as_str(), "sluice_dead_letters"]
            .map(|t| format!("GRANT {right} ON sluice_test.{t} TO {{user}}"))
    };
    let select = on("SELECT");
    let reader = TestUser::create("sl_select", &select.each_ref().map(String::as_str));
    let write = on("SELECT, INSERT, UPDATE");
    let writer = TestUser::create("sl_write", &write.each_ref().map(String::as_str));

    let out = check(&reader.url(), &table, "");
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    let said = common::stderr(&out);
    assert!(
        said.contains("FAIL")
            && said.contains("may not insert")
            && said.contains("INSERT, UPDATE command denied"),
        "{said}"
    );
    let out = drain(&reader.url(), &table, "", &lines(3));
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("INSERT, UPDATE command denied"),
        "{}",
        common::stderr(&out)
    );

    let out = check(&writer.url(), &table, "");
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("tables present; this user may insert into them"),
        "{}",
        common::stderr(&out)
    );
    let out = drain(&writer.url(), &table, "", &lines(20));
    assert!(out.status.success(), "{}", common::stderr(&out));
    let s = common::summary(&out);
    assert_eq!(
        (s["written"].as_i64(), s["duplicates"].as_i64()),
        (Some(19), Some(1)),
        "{s}"
    );

    let missing = common::unique("my_absent");
    let out = check(&writer.url(), &missing, "");
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("may not create")
            && common::stderr(&out).contains("CREATE command denied"),
        "{}",
        common::stderr(&out)
    );
    // A mapped table must exist: run refuses to create one, and so does check.
    let mapped = "key_column = \"id\"\n\n[sink.columns]\nn = \"/n\"";
    let out = check(&mysql_url(), &missing, mapped);
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains(&format!("table {missing} does not exist")),
        "{}",
        common::stderr(&out)
    );
    // check creates nothing, and neither did the refused run.
    rt.block_on(async {
        let absent = format!(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = '{missing}'"
        );
        assert_eq!(count(&absent).await, 0);
        assert_eq!(count(&format!("SELECT COUNT(*) FROM {table}")).await, 20);
        execute(&format!("DROP TABLE {table}")).await;
    });
}

/// Nothing listens on the port: `run` says "Connection refused" at once, not "pool timed
/// out" after the pool's 10 s.
#[test]
fn an_unreachable_server_is_said_so_at_once() {
    let url = format!(
        "mysql://sluice:sluice@127.0.0.1:{}/sluice_test",
        common::free_port()
    );
    let started = Instant::now();
    let out = drain(&url, "records", "", &lines(1));
    let took = started.elapsed();
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("Connection refused"), "{err}");
    assert!(!err.contains("timed out"), "{err}");
    assert!(took < Duration::from_secs(5), "took {took:?}: {err}");
}

/// Other drivers' TLS parameters are not sqlx's: each is refused before anything starts,
/// naming it and the parameter meant.
#[test]
fn url_parameters_sqlx_would_ignore_exit_2_naming_the_nearest_known_one() {
    for (query, named, near) in [
        ("ssl_mode=REQUIRED", "ssl_mode", "ssl-mode"),
        ("sslMode=REQUIRED", "sslMode", "sslmode"),
        ("tls=true", "tls", "ssl-mode"),
        ("useSSL=true", "useSSL", "ssl-mode"),
    ] {
        let url = format!("{}?{query}", mysql_url());
        let table = common::unique("my_params");
        for out in [drain(&url, &table, "", &lines(1)), check(&url, &table, "")] {
            let err = common::stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{query}: {err}");
            assert!(
                err.contains("sink.url")
                    && err.contains(&format!(
                        "unknown URL parameter {named:?} (did you mean {near:?}?)"
                    )),
                "{query}: {err}"
            );
        }
    }
}

/// A scratch server with the test PKI's certificate (for `localhost`): `check` says the
/// connection is over TLS with the certificate verified; the shared server (no TLS) is
/// said to be without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_whether_each_connection_uses_tls() {
    let pki = std::path::PathBuf::from(
        std::env::var("SLUICE_TEST_TLS_DIR").unwrap_or_else(|_| "/tmp/sluice-test-tls/pki".into()),
    );
    let file = |name: &str| pki.join(name).display().to_string();
    let server = ScratchServer::create_with(&[
        &format!("--ssl-cert={}", file("server.pem")),
        &format!("--ssl-key={}", file("server.key")),
        &format!("--ssl-ca={}", file("ca.pem")),
    ])
    .await;
    let url = format!(
        "mysql://root@localhost:{}/sluice_test?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        server.port,
        file("ca.pem")
    );
    let out = check(&url, "records", "");
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("answers over TLS (TLSv1.3, ")
            && common::stderr(&out).contains("certificate verified for the host name)"),
        "{}",
        common::stderr(&out)
    );
    let wrong = format!(
        "mysql://root@localhost:{}/sluice_test?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        server.port,
        file("other-ca.pem")
    );
    let out = check(&wrong, "records", "");
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("TLS handshake failed"),
        "{}",
        common::stderr(&out)
    );

    let out = check(&mysql_url(), &common::unique("my_plain"), "");
    assert!(
        common::stderr(&out).contains("answers without TLS"),
        "{}",
        common::stderr(&out)
    );
}
