//! TLS on every connection, against real servers with a throw-away PKI
//! (scripts/tls-certs.sh, started by scripts/services.sh): PostgreSQL (the local server's
//! own TLS, and a TLS-only cluster that wants a client certificate), the emulator served
//! over HTTPS, RabbitMQ and Kafka behind stunnel. Each connection drains; a wrong CA, a
//! wrong host name, an expired certificate and a missing client certificate each fail
//! `check` (exit 1) and `run` (exit 1) with a message naming the cause, within a bound.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use sluice::sim_sink::{SimSink, SimSinkSettings};
use sqlx::Connection;

/// No run or check may take longer than this, however loaded the machine: a TLS
/// failure must never become a hang.
const LIMIT: Duration = Duration::from_secs(90);

fn pki(name: &str) -> PathBuf {
    let dir = std::env::var("SLUICE_TEST_TLS_DIR")
        .expect("SLUICE_TEST_TLS_DIR: run eval \"$(scripts/services.sh)\" first");
    Path::new(&dir).join(name)
}

fn pki_str(name: &str) -> String {
    pki(name).display().to_string()
}

/// `sluice ARGS` in `dir`, bounded by [`LIMIT`], with no `SLUICE_*` configuration of ours.
async fn sluice(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.current_dir(dir)
        .args(args)
        .env("SLUICE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, _) in std::env::vars() {
        if name.starts_with("SLUICE_") && name != "SLUICE_LOG" {
            cmd.env_remove(name);
        }
    }
    tokio::time::timeout(LIMIT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("sluice {args:?} did not finish within {LIMIT:?}"))
        .expect("sluice runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

async fn check(dir: &Path) -> Output {
    sluice(dir, &["check", "-c", "sluice.toml"]).await
}

async fn drain(dir: &Path) -> Output {
    sluice(dir, common::DRAIN).await
}

fn written(o: &Output) -> i64 {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().last().unwrap_or_default();
    let summary: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("summary {line:?}: {e}; {}", text(o)));
    summary["written"].as_i64().unwrap()
}

/// Expects `check` and `run` to fail with exit 1, both saying `why`.
async fn both_fail(dir: &Path, why: &str) {
    let o = check(dir).await;
    assert_eq!(o.status.code(), Some(1), "check: {}", text(&o));
    assert!(
        text(&o).contains(why),
        "check should say {why:?}: {}",
        text(&o)
    );
    let o = drain(dir).await;
    assert_eq!(o.status.code(), Some(1), "run: {}", text(&o));
    assert!(
        text(&o).contains(why),
        "run should say {why:?}: {}",
        text(&o)
    );
}

fn write_input(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join("in.ndjson");
    common::write_records(&path, n, &[]);
    path
}

fn file_to_postgres(dir: &Path, url: &str, table: &str, extra: &str) {
    let input = write_input(dir, 40);
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = {input:?}\n[sink]\nkind = \"postgres\"\nurl = {url:?}\ntable = \"{table}\"\nkey = \"/id\"\n[rate]\nrecords_per_second = 2000\n{extra}"
        ),
    )
    .unwrap();
}

/// The TLS-only cluster, as libpq users write it.
fn tls_cluster_url(host: &str, ca: &str, client_cert: bool) -> String {
    let port = std::env::var("SLUICE_TEST_PG_TLS_PORT").unwrap_or_else(|_| "55432".into());
    let mut url = format!(
        "postgres://postgres@{host}:{port}/sluice_test?sslmode=verify-full&sslrootcert={}",
        pki_str(ca)
    );
    if client_cert {
        url.push_str(&format!(
            "&sslcert={}&sslkey={}",
            pki_str("client.pem"),
            pki_str("client.key")
        ));
    }
    url
}

async fn pg_count(url: &str, table: &str) -> i64 {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let sql = format!("SELECT count(*) FROM {table}");
    let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let drop = format!("DROP TABLE IF EXISTS {table}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
        .execute(&mut conn)
        .await
        .unwrap();
    n
}

#[tokio::test]
async fn postgres_sslmode_require_on_the_local_server_drains() {
    let dir = tempfile::tempdir().unwrap();
    let table = common::unique("tls_require");
    let url = format!("{}?sslmode=require", common::pg_url());
    file_to_postgres(dir.path(), &url, &table, "");
    let o = drain(dir.path()).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(written(&o), 40);
    let o = check(dir.path()).await;
    assert!(
        text(&o).contains("over TLS (TLSv1") && text(&o).contains("NOT verified"),
        "{}",
        text(&o)
    );
    assert_eq!(pg_count(&url, &table).await, 40);
}

#[tokio::test]
async fn postgres_verify_full_with_a_client_certificate_drains_and_holds_leases() {
    let dir = tempfile::tempdir().unwrap();
    let table = common::unique("tls_full");
    let url = tls_cluster_url("localhost", "ca.pem", true);
    let leases =
        format!("[leases]\nstore = {url:?}\npool = \"{table}\"\ncapacity = 2000\npartitions = 2\n");
    file_to_postgres(dir.path(), &url, &table, &leases);
    let o = check(dir.path()).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("over TLS (TLSv1.3, certificate verified for the host name)"),
        "{}",
        text(&o)
    );
    let o = drain(dir.path()).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(written(&o), 40);
    assert_eq!(pg_count(&url, &table).await, 40);
}

#[tokio::test]
async fn postgres_wrong_ca_wrong_host_and_no_client_certificate_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let table = common::unique("tls_bad");
    let cases = [
        (
            tls_cluster_url("localhost", "other-ca.pem", true),
            "not signed by a trusted CA",
        ),
        (
            tls_cluster_url("127.0.0.1", "ca.pem", true),
            "not valid for the host name",
        ),
        (
            tls_cluster_url("localhost", "ca.pem", false),
            "requires a valid client certificate",
        ),
    ];
    for (url, why) in cases {
        file_to_postgres(dir.path(), &url, &table, "");
        both_fail(dir.path(), why).await;
    }
    // A certificate file that is not there is a configuration mistake: exit 2.
    let url = tls_cluster_url("localhost", "no-such-ca.pem", true);
    file_to_postgres(dir.path(), &url, &table, "");
    let o = check(dir.path()).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("sink.url") && text(&o).contains("no-such-ca.pem"));
}

fn file_to_https(dir: &Path, url: &str, tls: &str) {
    let input = write_input(dir, 30);
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = {input:?}\n[sink]\nkind = \"http\"\nurl = {url:?}\nkey = \"/id\"\ntimeout = \"5s\"\n[sink.dead_letters]\npath = \"dead.ndjson\"\n[sink.tls]\n{tls}\n[rate]\nrecords_per_second = 2000\n"
        ),
    )
    .unwrap();
}

async fn https_sim_sink(cert: &str, key: &str) -> SimSink {
    let tls = sluice::tls::server_config(&pki(cert), &pki(key)).unwrap();
    let config = SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), 100_000.0);
    SimSink::start_tls(config, tls).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_sink_with_a_private_ca_drains_and_refuses_what_it_cannot_verify() {
    let dir = tempfile::tempdir().unwrap();
    let sim = https_sim_sink("server.pem", "server.key").await;
    let port = sim.addr().port();
    let good = format!("https://localhost:{port}/ingest");
    let ca = format!("ca_file = {:?}", pki_str("ca.pem"));

    file_to_https(dir.path(), &good, &ca);
    let o = check(dir.path()).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("over TLS, certificate verified"),
        "{}",
        text(&o)
    );
    let o = drain(dir.path()).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(written(&o), 30);
    assert_eq!(sim.stats().inserted, 30);

    let other = format!("ca_file = {:?}", pki_str("other-ca.pem"));
    file_to_https(dir.path(), &good, &other);
    both_fail(dir.path(), "not signed by a trusted CA").await;
    let by_address = format!("https://127.0.0.1:{port}/ingest");
    file_to_https(dir.path(), &by_address, &ca);
    both_fail(dir.path(), "not valid for the host name").await;
    assert_eq!(sim.stats().inserted, 30, "nothing more reached the sink");
    sim.stop().await.unwrap();

    let expired = https_sim_sink("expired.pem", "expired.key").await;
    let url = format!("https://localhost:{}/ingest", expired.addr().port());
    file_to_https(dir.path(), &url, &ca);
    both_fail(dir.path(), "has expired").await;
    // Skipping verification is possible, and said loudly.
    file_to_https(dir.path(), &url, "insecure_skip_verify = true");
    let o = drain(dir.path()).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(written(&o), 30);
    assert!(text(&o).contains("ANY certificate"), "{}", text(&o));
    expired.stop().await.unwrap();

    // Only a written-out `true` skips verification.
    file_to_https(dir.path(), &url, "insecure_skip_verify = \"yes\"");
    let o = check(dir.path()).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("insecure_skip_verify"), "{}", text(&o));
}

fn amqps_to_sqlite(dir: &Path, queue: &str, tls: &str) {
    let port = std::env::var("SLUICE_TEST_AMQPS_PORT").unwrap_or_else(|_| "15671".into());
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"amqp\"\nurl = \"amqps://guest:guest@localhost:{port}/%2f\"\nqueue = \"{queue}\"\n[source.tls]\n{tls}\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\nkey = \"/id\"\n[rate]\nrecords_per_second = 2000\n"
        ),
    )
    .unwrap();
}

#[tokio::test]
async fn amqps_with_a_private_ca_and_a_client_certificate_drains() {
    let dir = tempfile::tempdir().unwrap();
    let queue = common::unique("tls_amqps");
    tokio::task::spawn_blocking({
        let queue = queue.clone();
        move || common::amqp_publish(&queue, 30)
    })
    .await
    .unwrap();
    let full = format!(
        "ca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}",
        pki_str("ca.pem"),
        pki_str("client.pem"),
        pki_str("client.key")
    );
    amqps_to_sqlite(dir.path(), &queue, &full);
    let o = check(dir.path()).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("over TLS"), "{}", text(&o));
    let o = drain(dir.path()).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(written(&o), 30);

    let other = full.replace("ca.pem", "other-ca.pem");
    amqps_to_sqlite(dir.path(), &queue, &other);
    both_fail(dir.path(), "not signed by a trusted CA").await;
    let no_client = format!("ca_file = {:?}", pki_str("ca.pem"));
    amqps_to_sqlite(dir.path(), &queue, &no_client);
    let o = check(dir.path()).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

fn kafka_ssl_to_sqlite(dir: &Path, topic: &str, ca: &str) {
    let brokers =
        std::env::var("SLUICE_TEST_KAFKA_TLS_BROKERS").unwrap_or_else(|_| "localhost:19093".into());
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"kafka\"\nbrokers = \"{brokers}\"\ntopic = \"{topic}\"\ngroup = \"{topic}\"\nassignment_timeout = \"30s\"\n[source.properties]\n\"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = {:?}\n\"broker.address.family\" = \"v4\"\n\"session.timeout.ms\" = 2000\n\"heartbeat.interval.ms\" = 500\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\nkey = \"/id\"\n[rate]\nrecords_per_second = 2000\n",
            pki_str(ca)
        ),
    )
    .unwrap();
}

/// Kafka over TLS: a second broker advertises stunnel's port, so the bootstrap and every
/// connection after it go through TLS (a proxy in front of a broker that advertises its
/// own address would be bypassed after the first metadata answer).
#[tokio::test]
async fn kafka_over_tls_produces_drains_and_refuses_a_wrong_ca() {
    let dir = tempfile::tempdir().unwrap();
    let topic = common::unique("tls_kafka");
    let tansu = std::env::var("SLUICE_TEST_TANSU").unwrap_or_else(|_| "tansu".into());
    let behind = std::env::var("SLUICE_TEST_KAFKA_TLS_BROKERS")
        .ok()
        .and_then(|b| b.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()))
        .unwrap_or(19093)
        + 1;
    let created = std::process::Command::new(&tansu)
        .args(["topic", "create", "--broker"])
        .arg(format!("tcp://127.0.0.1:{behind}"))
        .args(["--partitions", "1", &topic])
        .output()
        .expect("tansu runs (see scripts/services.sh)");
    assert!(created.status.success(), "{}", text(&created));

    kafka_ssl_to_sqlite(dir.path(), &topic, "ca.pem");
    let input = write_input(dir.path(), 30);
    let o = sluice(
        dir.path(),
        &["produce", "-c", "sluice.toml", input.to_str().unwrap()],
    )
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = check(dir.path()).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("TLS handshake ok"), "{}", text(&o));
    let o = drain(dir.path()).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(written(&o), 30);

    kafka_ssl_to_sqlite(dir.path(), &topic, "other-ca.pem");
    let o = check(dir.path()).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("certificate verify failed"),
        "{}",
        text(&o)
    );
}
