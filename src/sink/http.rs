//! HTTP: each batch is one POST to an ingest endpoint (a bulk API, a managed database's
//! REST front, a vendor's collector). The endpoint cannot be asked to "insert or ignore",
//! so every record travels with its key and the request with an `Idempotency-Key`
//! (see [`envelope`]); the answer is sorted into the pipeline's outcomes by [`response`].
//! Connection failures mean the sink is unreachable (retried without blaming the records);
//! a timeout may be the batch's doing (transient). Rejected records go to the configured
//! dead-letter store.

pub mod envelope;
pub mod headers;
pub mod response;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use http::header::CONTENT_TYPE;

use super::dead_letters::{self, DeadLetterStore};
use super::{Sink, SinkError, WriteOutcome};
use crate::config::{HttpFormat, SinkConfig};
use crate::record::{DeadLetter, Row};

/// Most of a response body read: plenty for counts or an error message.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

pub struct HttpSink {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The URL as messages show it: without a password.
    shown_url: String,
    format: HttpFormat,
    max_delay: Duration,
    dead_letters: Arc<dyn DeadLetterStore>,
}

impl HttpSink {
    /// Builds the client (headers read from the environment now) and opens the dead-letter
    /// store. `max_delay` caps the waits the endpoint asks for.
    pub async fn open(config: &SinkConfig, max_delay: Duration) -> Result<Self, SinkError> {
        let fail = |message: String| SinkError {
            url: config.url.clone(),
            message,
        };
        let headers = headers::build(&config.headers, |var| std::env::var(var).ok())
            .map_err(|e| fail(e.to_string()))?;
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .build()
            .map_err(|e| fail(chain(e)))?;
        let url = reqwest::Url::parse(&config.url).map_err(|e| fail(e.to_string()))?;
        let mut shown_url = url.clone();
        if shown_url.password().is_some() {
            let _ = shown_url.set_password(Some("***"));
        }
        let store = config
            .dead_letters
            .as_ref()
            .ok_or_else(|| fail("sink.dead_letters is required for an http sink".into()))?;
        Ok(HttpSink {
            client,
            url,
            shown_url: shown_url.to_string(),
            format: config.format,
            max_delay,
            dead_letters: dead_letters::open(store).await?,
        })
    }
}

#[async_trait]
impl Sink for HttpSink {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        let sent = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, envelope::content_type(self.format))
            .header("idempotency-key", envelope::idempotency_key(rows))
            .body(envelope::encode(rows, self.format))
            .send()
            .await;
        let mut answer = match sent {
            Ok(answer) => answer,
            // A refused connection and an answer that never came are the sink's state, not
            // the records' fault: retried without limit, never dead-lettered. (The sink may
            // have stored a batch it did not answer; the idempotency key covers the resend.)
            Err(e) if e.is_connect() || e.is_timeout() => {
                return WriteOutcome::Unavailable(format!("{}: {}", self.shown_url, chain(e)));
            }
            Err(e) => return WriteOutcome::Transient(format!("{}: {}", self.shown_url, chain(e))),
        };
        let status = answer.status();
        let headers = std::mem::take(answer.headers_mut());
        // The status is the verdict; a body cut short only loses the counts or the message.
        let mut body = Vec::new();
        while let Ok(Some(chunk)) = answer.chunk().await {
            body.extend_from_slice(&chunk);
            if body.len() >= MAX_RESPONSE_BYTES {
                break;
            }
        }
        response::classify(
            status,
            &headers,
            &body,
            rows.len(),
            SystemTime::now(),
            self.max_delay,
        )
    }

    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        self.dead_letters.store(letters).await
    }
}

/// An error and its causes, without reqwest's copy of the URL (it could hold a password).
fn chain(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DeadLetterConfig, SinkKind};
    use crate::sim_sink::{OutageMode, RetryAfterStyle, SimSink, SimSinkConfig};
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    fn rows(keys: &[&str]) -> Vec<Row> {
        keys.iter()
            .map(|k| Row {
                key: k.to_string(),
                payload: format!("{{\"id\":\"{k}\"}}"),
                origin: format!("t:{k}"),
            })
            .collect()
    }

    fn config(url: String, dir: &std::path::Path) -> SinkConfig {
        SinkConfig {
            kind: SinkKind::Http,
            url,
            timeout: Duration::from_millis(300),
            dead_letters: Some(DeadLetterConfig {
                url: None,
                path: Some(dir.join("dead.ndjson")),
            }),
            ..Default::default()
        }
    }

    async fn sim(burst: u32) -> SimSink {
        let mut c = SimSinkConfig::new("127.0.0.1:0".parse().unwrap(), 2.0);
        c.burst = burst;
        c.reject_field = Some("poison".into());
        c.retry_after = RetryAfterStyle::Millis;
        SimSink::start(c).await.unwrap()
    }

    #[tokio::test]
    async fn outcomes_against_the_emulator() {
        let dir = tempfile::tempdir().unwrap();
        let sim = sim(5).await;
        let sink = HttpSink::open(
            &config(sim.ingest_url(), dir.path()),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
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
        sim.outage(Duration::from_secs(30), OutageMode::Hang);
        assert!(matches!(
            sink.write(&rows(&["x"])).await,
            WriteOutcome::Unavailable(reason) if reason.contains("timed out")
        ));
        sim.outage(Duration::ZERO, OutageMode::Unavailable);
        sim.stop().await.unwrap();
    }

    #[tokio::test]
    async fn unreachable_endpoint_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let sink = HttpSink::open(
            &config(format!("http://{addr}/ingest"), dir.path()),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert!(matches!(
            sink.write(&rows(&["a"])).await,
            WriteOutcome::Unavailable(_)
        ));
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
        let mut cfg = config(format!("http://{addr}/in"), dir.path());
        cfg.format = HttpFormat::Ndjson;
        cfg.headers = BTreeMap::from([("Authorization".into(), "Bearer t0k$$".into())]);
        let sink = HttpSink::open(&cfg, Duration::from_secs(30)).await.unwrap();
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
        let sink = HttpSink::open(
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
}
