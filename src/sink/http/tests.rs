use super::settings::{HttpSettings, HttpTransport};
use super::*;
use crate::sim_sink::{OutageMode, RetryAfterStyle, SimSink, SimSinkSettings};
use crate::sink::dead_letters::settings::DeadLetterSettings;
use crate::sink::settings::{SinkBackend, SinkSettings};
use std::collections::BTreeMap;
use std::sync::Mutex;

fn rows(keys: &[&str]) -> Vec<Row> {
    keys.iter()
        .map(|k| Row {
            key: k.to_string(),
            payload: format!("{{\"id\":\"{k}\"}}"),
            origin: format!("t:{k}"),
            ..Default::default()
        })
        .collect()
}

/// An HTTP sink of `cfg`, as the one match on the kind opens it.
async fn open(cfg: &SinkSettings, max_delay: Duration) -> Result<HttpSink, SinkError> {
    let own = cfg.http().expect("an http sink");
    HttpSink::open(&cfg.url, Wire::Http(own), max_delay).await
}

fn config(url: String, dir: &std::path::Path) -> SinkSettings {
    config_with(url, dir, HttpSettings::default())
}

fn config_with(url: String, dir: &std::path::Path, http: HttpSettings) -> SinkSettings {
    let http = HttpSettings {
        transport: HttpTransport {
            timeout: Duration::from_millis(300),
            dead_letters: Some(DeadLetterSettings {
                url: None,
                path: Some(dir.join("dead.ndjson")),
            }),
            ..http.transport
        },
        ..http
    };
    SinkSettings::new(url, SinkBackend::Http(http))
}

async fn sim(burst: u32) -> SimSink {
    let mut c = SimSinkSettings::new("127.0.0.1:0".parse().unwrap(), 2.0);
    c.burst = burst;
    c.reject_field = Some("poison".into());
    c.retry_after = RetryAfterStyle::Millis;
    SimSink::start(c).await.unwrap()
}

#[tokio::test]
async fn outcomes_against_the_emulator() {
    let dir = tempfile::tempdir().unwrap();
    let sim = sim(5).await;
    let sink = open(
        &config(sim.ingest_url(), dir.path()),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(sink.ping().await, Ok(()), "HEAD answered (405): ready");
    assert_eq!(
        sink.write(&rows(&["a", "b", "c"])).await,
        WriteOutcome::Written {
            inserted: 3,
            duplicates: 0
        }
    );
    assert_eq!(
        sink.write(&rows(&["c", "d"])).await,
        WriteOutcome::Written {
            inserted: 1,
            duplicates: 1
        }
    );
    // The five-record bucket is spent (2 rec/s refill): throttled, with the wait for
    // the two records in milliseconds.
    let WriteOutcome::Throttled {
        retry_after: Some(wait),
        ..
    } = sink.write(&rows(&["e", "f"])).await
    else {
        panic!("expected a throttle")
    };
    assert!(
        wait > Duration::from_millis(500) && wait <= Duration::from_secs(1),
        "{wait:?}"
    );

    let mut poisoned = rows(&["p"]);
    poisoned[0].payload = r#"{"poison":1}"#.into();
    assert!(matches!(
        sink.write(&poisoned).await,
        WriteOutcome::Rejected { rows: None, reason } if reason.starts_with("HTTP 422")
    ));

    sim.outage(Duration::from_secs(30), OutageMode::Unavailable);
    assert!(matches!(
        sink.write(&rows(&["x"])).await,
        WriteOutcome::Throttled {
            retry_after: None,
            ..
        }
    ));
    let not_ready = sink.ping().await.unwrap_err();
    assert!(not_ready.contains("HTTP 503"), "{not_ready}");
    sim.outage(Duration::from_secs(30), OutageMode::Hang);
    assert!(matches!(
        sink.write(&rows(&["x"])).await,
        WriteOutcome::Unavailable(reason) if reason.contains("timed out")
    ));
    assert!(sink.ping().await.is_err(), "hung: not ready");
    sim.outage(Duration::ZERO, OutageMode::Unavailable);
    sim.stop().await.unwrap();
}

#[tokio::test]
async fn unreachable_endpoint_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let sink = open(
        &config(format!("http://{addr}/ingest"), dir.path()),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(sink.ping().await.is_err(), "refused: not ready");
    assert!(matches!(
        sink.write(&rows(&["a"])).await,
        WriteOutcome::Unavailable(_)
    ));
    assert!(sink.ping().await.is_err());
}

#[tokio::test]
async fn sends_configured_headers_an_idempotency_key_and_ndjson() {
    type Seen = Arc<Mutex<Vec<(http::HeaderMap, String)>>>;
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route(
            "/in",
            axum::routing::post(
                |axum::extract::State(seen): axum::extract::State<Seen>,
                 headers: http::HeaderMap,
                 body: String| async move {
                    seen.lock().unwrap().push((headers, body));
                    "ok"
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().unwrap();
    let cfg = config_with(
        format!("http://{addr}/in"),
        dir.path(),
        HttpSettings {
            format: HttpFormat::Ndjson,
            transport: HttpTransport {
                headers: BTreeMap::from([("Authorization".into(), "Bearer t0k$$".into())]),
                ..HttpTransport::default()
            },
            ..HttpSettings::default()
        },
    );
    let sink = open(&cfg, Duration::from_secs(30)).await.unwrap();
    assert!(matches!(
        sink.write(&rows(&["k1"])).await,
        WriteOutcome::Written { inserted: 1, .. }
    ));
    assert!(matches!(
        sink.write(&rows(&["k1", "k2"])).await,
        WriteOutcome::Written { inserted: 2, .. }
    ));
    let seen = seen.lock().unwrap();
    let (h, body) = &seen[0];
    assert_eq!(h["authorization"], "Bearer t0k$");
    assert_eq!(h["content-type"], "application/x-ndjson");
    assert_eq!(h["idempotency-key"], "k1");
    assert_eq!(
        body,
        "{\"key\":\"k1\",\"source\":\"t:k1\",\"record\":{\"id\":\"k1\"}}\n"
    );
    let (h, body) = &seen[1];
    assert_eq!(
        h["idempotency-key"],
        envelope::idempotency_key(&rows(&["k1", "k2"]))
    );
    assert_eq!(body.lines().count(), 2);
    server.abort();
}

#[tokio::test]
async fn dead_letters_go_to_the_configured_store() {
    let dir = tempfile::tempdir().unwrap();
    let sink = open(
        &config("http://127.0.0.1:9/ingest".into(), dir.path()),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let letter = DeadLetter::from_row(&rows(&["bad"])[0], "HTTP 422", 1);
    assert!(matches!(
        sink.dead_letter(&[letter]).await,
        WriteOutcome::Written { inserted: 1, .. }
    ));
    let text = std::fs::read_to_string(dir.path().join("dead.ndjson")).unwrap();
    assert!(text.contains("\"key\":\"bad\"") && text.contains("HTTP 422"));
}
