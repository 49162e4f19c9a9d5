//! `sluice check`: reaches everything `run` will need — the source, the sink (every
//! endpoint), the dead-letter store, the lease store, the checkpoint directory and the
//! telemetry address — each within a timeout, and changes nothing: no file, table or
//! queue is created (what `run` would create is checked for the right to create it).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::PgConnection;

use crate::config::{Config, SinkKind, SourceKind};
use crate::redact::redact;

/// One thing `run` needs, and whether it is there.
#[derive(Debug)]
pub struct Probe {
    /// What was probed, endpoint included (masked).
    pub what: String,
    /// What was found: Ok with a note, or Err with the reason.
    pub result: Result<String, String>,
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match &self.result {
            Ok(note) => format!("ok    {}: {note}", self.what),
            Err(why) => format!("FAIL  {}: {why}", self.what),
        };
        f.write_str(&redact(&text))
    }
}

/// Runs every probe the configuration calls for, each bounded by `timeout`.
pub async fn probe_all(config: &Config, timeout: Duration) -> Vec<Probe> {
    let mut probes = Vec::new();
    probes.extend(source(config, timeout).await);
    probes.extend(sink(config, timeout).await);
    if let Some(l) = &config.leases {
        let what = format!("lease store {}", l.store);
        let result = if l.by_assignment() {
            Ok("the capacity follows the Kafka group's assignment".into())
        } else {
            within(
                timeout,
                postgres(&l.store, &["sluice_leases", "sluice_lease_members"]),
            )
            .await
        };
        probes.push(Probe { what, result });
    }
    for probe in &config.health.probe {
        // Reached and read: ok, whatever the value (over max holds writes, it is no fault).
        let task = crate::health::probe::ProbeTask::new(probe, &config.sink);
        let mut conns: Vec<_> = task.targets.iter().map(|_| None).collect();
        let reading = within(timeout, async {
            match task.run_once(&mut conns).await {
                crate::control::health::Reading::Value(v) => {
                    Ok(format!("reads {v} (max {})", probe.max()))
                }
                crate::control::health::Reading::Failed(e) => Err(e),
            }
        })
        .await;
        probes.push(Probe {
            what: format!("health probe {}", probe.name()),
            result: reading,
        });
    }
    if let Some(listen) = config.telemetry.listen {
        let result = match std::net::TcpListener::bind(listen) {
            Ok(_) => Ok("free".into()),
            Err(e) => Err(format!("cannot listen: {e}")),
        };
        probes.push(Probe {
            what: format!("telemetry.listen {listen}"),
            result,
        });
    }
    probes
}

async fn within<F>(timeout: Duration, probe: F) -> Result<String, String>
where
    F: Future<Output = Result<String, String>>,
{
    match tokio::time::timeout(timeout, probe).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        )),
    }
}

async fn source(config: &Config, timeout: Duration) -> Vec<Probe> {
    let s = &config.source;
    match s.kind {
        SourceKind::File => {
            let path = s.path.clone().unwrap_or_default();
            if path.as_os_str() == "-" {
                return vec![Probe {
                    what: "source stdin".into(),
                    result: Ok("read as it comes".into()),
                }];
            }
            let mut probes = vec![Probe {
                what: format!("source file {}", path.display()),
                result: std::fs::File::open(&path)
                    .and_then(|f| f.metadata())
                    .map(|m| format!("readable, {} bytes", m.len()))
                    .map_err(|e| e.to_string()),
            }];
            if let Some(cp) = config.checkpoint_path() {
                probes.push(Probe {
                    what: format!("checkpoint {}", cp.display()),
                    result: writable(&cp).map(|()| "writable".into()),
                });
            }
            probes
        }
        SourceKind::Amqp => {
            let url = s.url.clone().unwrap_or_default();
            let queue = s.queue.clone().unwrap_or_default();
            vec![Probe {
                what: format!("source {url} queue {queue}"),
                result: within(timeout, amqp(&url, s.tls.as_ref(), &queue, s.declare)).await,
            }]
        }
        SourceKind::Kafka => {
            let brokers = s.brokers.clone().unwrap_or_default();
            let topic = s.topic.clone().unwrap_or_default();
            let settings = s.clone();
            let blocking = tokio::task::spawn_blocking(move || kafka(&settings, timeout));
            let result = within(timeout + Duration::from_millis(500), async {
                blocking.await.map_err(|e| e.to_string())?
            })
            .await;
            vec![Probe {
                what: format!("source kafka {brokers} topic {topic}"),
                result,
            }]
        }
    }
}

async fn amqp(
    url: &str,
    tls: Option<&crate::tls::TlsConfig>,
    queue: &str,
    declare: bool,
) -> Result<String, String> {
    use lapin::options::QueueDeclareOptions;
    use lapin::types::FieldTable;
    let properties = lapin::ConnectionProperties::default();
    let connection = crate::source::amqp::connect(url, tls, properties)
        .await
        .map_err(|e| match crate::tls::certificate_refused(&e) {
            Some(why) => format!("cannot connect: TLS handshake failed: {why}"),
            None => format!("cannot connect: {e}"),
        })?;
    let over = if url.starts_with("amqps:") {
        "over TLS, certificate verified; "
    } else {
        ""
    };
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| format!("cannot open a channel: {e}"))?;
    // Passive: asks whether the queue exists without declaring it.
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let answer = channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await;
    let _ = connection.close(200, "sluice check".into()).await;
    match answer {
        Ok(q) => Ok(format!("{over}{} messages ready", q.message_count())),
        Err(_) if declare => Ok(format!(
            "{over}the queue does not exist yet; run declares it"
        )),
        Err(e) => Err(format!(
            "queue {queue:?} does not exist and source.declare = false: {e}"
        )),
    }
}

/// Keeps librdkafka's last complaint: a failed metadata request says only "transport
/// failure", the complaint says why (a TLS handshake, SASL authentication).
#[derive(Default)]
struct KafkaCheckContext {
    last_error: std::sync::Mutex<Option<String>>,
}

impl rdkafka::client::ClientContext for KafkaCheckContext {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        let mut last = crate::lock::lock(&self.last_error);
        *last = Some(format!("{error}: {reason}"));
    }
}

impl rdkafka::consumer::ConsumerContext for KafkaCheckContext {}

fn kafka(source: &crate::config::SourceConfig, timeout: Duration) -> Result<String, String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let topic = source.topic.clone().unwrap_or_default();
    // A consumer that never subscribes: no group join, no rebalance of live workers.
    let consumer: BaseConsumer<KafkaCheckContext> =
        crate::source::kafka::settings::consumer(source)
            .create_with_context(KafkaCheckContext::default())
            .map_err(|e| format!("cannot create a consumer: {e}"))?;
    let metadata = consumer
        .fetch_metadata(Some(&topic), timeout)
        .map_err(|e| {
            // Error events reach the context only when the client is polled.
            for _ in 0..3 {
                let _ = consumer.poll(Duration::from_millis(100));
            }
            let last = consumer
                .context()
                .last_error
                .lock()
                .ok()
                .and_then(|l| l.clone());
            match last {
                Some(why) => format!("cannot reach the brokers: {e}; {why}"),
                None => format!("cannot reach the brokers: {e}"),
            }
        })?;
    let security = kafka_security(source);
    match metadata.topics().iter().find(|t| t.name() == topic) {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
            Ok(format!("{security}{} partitions", t.partitions().len()))
        }
        _ => Err(format!("{security}topic {topic:?} does not exist")),
    }
}

/// How the brokers were reached, as `security.protocol` and `sasl.mechanism` say (a
/// metadata answer over SSL means the handshake succeeded).
fn kafka_security(source: &crate::config::SourceConfig) -> String {
    let property = |name: &str| {
        source
            .properties
            .get(name)
            .map(|v| v.to_string())
            .unwrap_or_default()
    };
    let protocol = property("security.protocol").to_ascii_uppercase();
    let mechanism = match property("sasl.mechanism") {
        m if m.is_empty() => property("sasl.mechanisms"),
        m => m,
    };
    let mechanism = if mechanism.is_empty() {
        "GSSAPI".to_string()
    } else {
        mechanism.to_ascii_uppercase()
    };
    let verified = match property("enable.ssl.certificate.verification").as_str() {
        "false" => "certificate NOT verified",
        _ => "certificate verified",
    };
    match protocol.as_str() {
        "SSL" => format!("TLS handshake ok, {verified}; "),
        "SASL_SSL" => format!("TLS handshake ok, {verified}; SASL {mechanism} authenticated; "),
        "SASL_PLAINTEXT" => format!("without TLS; SASL {mechanism} authenticated; "),
        _ => "without TLS; ".to_string(),
    }
}

async fn sink(config: &Config, timeout: Duration) -> Vec<Probe> {
    let sink = &config.sink;
    let urls: Vec<String> = if sink.urls.is_empty() && sink.discovery.file.is_none() {
        vec![sink.url.clone()]
    } else {
        // The endpoints discovery finds now: names resolved, the file read.
        let found = match crate::sink::discovery::Discovery::new(sink) {
            Ok(mut d) => Ok(d.resolve().await),
            Err(e) => Err(e.to_string()),
        };
        match found {
            Ok(found) if !found.is_empty() => found.into_iter().map(|w| w.url).collect(),
            Ok(_) => {
                return vec![Probe {
                    what: "sink discovery".into(),
                    result: Err("found no endpoint".into()),
                }];
            }
            Err(e) => {
                return vec![Probe {
                    what: "sink discovery".into(),
                    result: Err(e),
                }];
            }
        }
    };
    let mut probes = Vec::new();
    for url in urls {
        let result = match sink.kind {
            SinkKind::Sqlite => sqlite(&url),
            SinkKind::Postgres => {
                let tables = [sink.table.as_str(), "sluice_dead_letters"];
                within(timeout, postgres(&url, &tables)).await
            }
            SinkKind::Http | SinkKind::Elasticsearch => {
                within(timeout, http(config, &url, timeout)).await
            }
            SinkKind::Mysql => {
                let tables = [sink.table.as_str(), "sluice_dead_letters"];
                within(timeout, crate::sink::mysql::check(&url, &tables)).await
            }
        };
        probes.push(Probe {
            what: format!("sink {url}"),
            result,
        });
    }
    // A mapped table must take the statement every batch runs. Opening the sink prepares
    // it, and creates only the dead-letter table: so only once that exists.
    let mapped =
        matches!(sink.kind, SinkKind::Postgres | SinkKind::Mysql) && sink.columns.is_some();
    if mapped
        && probes.iter().all(|p| {
            p.result
                .as_deref()
                .is_ok_and(|n| n.contains("tables present"))
        })
    {
        let result = within(timeout, async {
            crate::sink::open(config)
                .await
                .map(|_| "the insert statement prepares".to_string())
                .map_err(|e| e.to_string())
        })
        .await;
        probes.push(Probe {
            what: format!("sink table {}", sink.table),
            result,
        });
    }
    if let Some(dl) = &sink.dead_letters {
        let (what, result) = match (&dl.url, &dl.path) {
            (Some(url), _) if url.starts_with("sqlite:") => (url.clone(), sqlite(url)),
            (Some(url), _) => (
                url.clone(),
                within(timeout, postgres(url, &["sluice_dead_letters"])).await,
            ),
            (None, Some(path)) => (
                path.display().to_string(),
                writable(path).map(|()| "writable".into()),
            ),
            (None, None) => (String::new(), Err("set url or path".into())),
        };
        probes.push(Probe {
            what: format!("dead-letter store {what}"),
            result,
        });
    }
    probes
}

/// A SQLite database: an existing file must be a database we may write; a missing one
/// must be creatable (its directory writable). Nothing is opened through SQLite, which
/// would create the file, its journal or its tables.
fn sqlite(url: &str) -> Result<String, String> {
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url).map_err(|e| e.to_string())?;
    let path = options.get_filename().to_path_buf();
    if path.as_os_str() == ":memory:" {
        return Ok("in memory".into());
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
    {
        Ok(mut file) => {
            use std::io::Read;
            let mut head = [0u8; 16];
            let n = file.read(&mut head).map_err(|e| e.to_string())?;
            if n == 0 || head.starts_with(b"SQLite format 3\0") {
                Ok(format!("{} is a writable database", path.display()))
            } else {
                Err(format!("{} is not a SQLite database", path.display()))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            writable(&path).map(|()| format!("{} will be created (mode 0600)", path.display()))
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Connects (no pool, one connection), then checks that each table exists or may be
/// created in the current schema.
async fn postgres(url: &str, tables: &[&str]) -> Result<String, String> {
    let options = crate::sink::postgres::tls::connect_options(url)
        .map_err(|e| e.to_string())?
        .application_name("sluice check");
    let mut conn = PgConnection::connect_with(&options).await.map_err(|e| {
        match crate::tls::certificate_refused(&e) {
            Some(why) => format!("cannot connect: TLS handshake failed: {why}"),
            None => format!("cannot connect: {e}"),
        }
    })?;
    // What the connection's TLS is, from the server's side.
    let (tls_version,): (Option<String>,) = sqlx::query_as(
        "SELECT CASE WHEN ssl THEN version END FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    )
    .fetch_one(&mut conn)
    .await
    .map_err(|e| e.to_string())?;
    let tls = match tls_version {
        Some(version) => format!(
            "over TLS ({version}, {})",
            crate::sink::postgres::tls::verification(&options)
        ),
        None => "without TLS".to_string(),
    };
    let mut missing = Vec::new();
    for table in tables {
        let (exists,): (bool,) = sqlx::query_as("SELECT to_regclass($1) IS NOT NULL")
            .bind(crate::sink::identifier::quote(table))
            .fetch_one(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        if !exists {
            missing.push(*table);
        }
    }
    let note = if missing.is_empty() {
        format!("answers {tls}; tables present")
    } else {
        let (may_create,): (bool,) =
            sqlx::query_as("SELECT has_schema_privilege(current_schema(), 'CREATE')")
                .fetch_one(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
        if !may_create {
            let _ = conn.close().await;
            return Err(format!(
                "{} missing and this user may not create tables in the current schema",
                missing.join(", ")
            ));
        }
        format!("answers {tls}; run creates {}", missing.join(", "))
    };
    let _ = conn.close().await;
    Ok(note)
}

/// An HTTP endpoint answers (HEAD, with the configured headers); refused credentials fail.
async fn http(config: &Config, url: &str, timeout: Duration) -> Result<String, String> {
    let headers =
        crate::sink::http::headers::build(&config.sink.headers, |v| std::env::var(v).ok())
            .map_err(|e| e.to_string())?;
    let builder = reqwest::Client::builder()
        .default_headers(headers)
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none());
    let tls = config.sink.tls.clone().unwrap_or_default();
    let client = tls
        .apply_to_reqwest(builder)?
        .build()
        .map_err(|e| e.to_string())?;
    let answer = client.head(url).send().await.map_err(|e| {
        if let Some(why) = crate::tls::certificate_refused(&e) {
            return format!("TLS handshake failed: {why}");
        }
        let e = e.without_url();
        let mut text = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            text.push_str(": ");
            text.push_str(&c.to_string());
            cause = c.source();
        }
        text
    })?;
    let status = answer.status();
    match status.as_u16() {
        401 | 403 | 407 => Err(format!("credentials refused (HTTP {status})")),
        _ if url.starts_with("https:") && tls.insecure_skip_verify => Ok(format!(
            "answers over TLS, certificate NOT verified (insecure_skip_verify) (HTTP {status} to HEAD)"
        )),
        _ if url.starts_with("https:") => Ok(format!(
            "answers over TLS, certificate verified (HTTP {status} to HEAD)"
        )),
        _ => Ok(format!("answers (HTTP {status} to HEAD)")),
    }
}

/// Whether `path` can be written: an existing file opened for writing (not truncated),
/// or a probe file created and removed at once in its directory.
pub fn writable(path: &Path) -> Result<(), String> {
    match std::fs::OpenOptions::new().append(true).open(path) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot write {}: {e}", path.display()));
        }
        Err(_) => {}
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let probe = dir.join(format!(
        ".sluice-probe-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(format!("cannot create files in {}: {e}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writable_leaves_nothing_behind_and_names_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        writable(&dir.path().join("cp")).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let e = writable(&dir.path().join("no/such/dir/cp")).unwrap_err();
        assert!(e.contains("no/such/dir"), "{e}");
    }

    #[test]
    fn sqlite_probe_creates_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("out.db").display());
        let note = sqlite(&url).unwrap();
        assert!(note.contains("will be created"), "{note}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        std::fs::write(dir.path().join("out.db"), "not a database, clearly").unwrap();
        assert!(sqlite(&url).unwrap_err().contains("not a SQLite database"));
    }
}
