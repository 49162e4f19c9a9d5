//! HTTP: each batch is one POST to an ingest endpoint (a bulk API, a managed database's
//! REST front, a vendor's collector). The endpoint cannot be asked to "insert or ignore",
//! so every record travels with its key and the request with an `Idempotency-Key`
//! (see [`envelope`]); the answer is sorted into the pipeline's outcomes by [`response`].
//! A request that gets no complete answer — refused, reset, timed out, or a body cut short
//! — or a gateway's 502/504 means the sink is unreachable: retried without limit and
//! without blaming the records (the idempotency key makes a resend safe). Redirects are not followed except 307/308,
//! which keep the method and body. Rejected records go to the configured dead-letter store.

pub mod contract;
pub mod envelope;
pub mod headers;
pub mod response;
pub mod settings;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use http::StatusCode;
use http::header::CONTENT_TYPE;

use super::dead_letters::{self, DeadLetterStore};
use super::elasticsearch::answer;
use super::elasticsearch::settings::{self as es, BulkOp, ElasticsearchSettings};
use super::{ItemOutcome, Sink, SinkError, WriteOutcome};
use crate::record::{DeadLetter, Row};
use contract::ResponseContract;
use settings::{HttpFormat, HttpSettings};

/// Most of a response body read: plenty for counts or an error message.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// Most of an answer read record by record (a `_bulk` answer runs to ~300 bytes an item).
const MAX_ITEMS_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// What a request carries and how its 2xx answer is read.
enum Protocol {
    /// sluice's envelope; a 2xx answer is read record by record when `[sink.response]`
    /// says how.
    Envelope {
        format: HttpFormat,
        contract: Option<ResponseContract>,
    },
    /// Elasticsearch/OpenSearch `_bulk`.
    Bulk { index: Vec<es::Part>, op: BulkOp },
}

/// What an HTTP sink speaks, from its kind's own settings.
#[derive(Clone, Copy)]
pub enum Wire<'a> {
    /// `kind = "http"`: sluice's envelope.
    Http(&'a HttpSettings),
    /// `kind = "elasticsearch"`: `_bulk` as `[sink.elasticsearch]` says.
    Elasticsearch(&'a ElasticsearchSettings),
}

/// Why an answer read record by record cannot be used: the write's outcome instead.
type Unusable = WriteOutcome;

/// The readiness probe's own limit: `/readyz` answers within 2 s.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);

pub struct HttpSink {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The URL as messages show it: without its password and secret query values.
    shown_url: String,
    protocol: Protocol,
    max_delay: Duration,
    timeout: Duration,
    dead_letters: Arc<dyn DeadLetterStore>,
    /// Why the last write found the sink out of service (no complete answer, a 502, 503,
    /// 504 or 500); None once a write gets any other answer. Readiness reports it.
    outage: Mutex<Option<String>>,
}

impl HttpSink {
    /// Builds the client (headers read from the environment now) and opens the dead-letter
    /// store. `max_delay` caps the waits the endpoint asks for.
    pub async fn open(url: &str, wire: Wire<'_>, max_delay: Duration) -> Result<Self, SinkError> {
        let fail = |message: String| SinkError {
            url: url.to_string(),
            message,
            not_now: false,
        };
        let (transport, bulk, http) = match wire {
            Wire::Http(s) => (&s.transport, None, Some(s)),
            Wire::Elasticsearch(s) => (&s.transport, s.elasticsearch.as_ref(), None),
        };
        let timeout = transport.timeout;
        let headers = headers::build(&transport.headers, |var| std::env::var(var).ok())
            .map_err(|e| fail(e.to_string()))?;
        let builder = crate::tls::http_client()
            .default_headers(headers)
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(redirect_policy());
        let tls = transport.tls.clone().unwrap_or_default();
        let client = tls
            .apply_to_reqwest(builder)
            .map_err(fail)?
            .build()
            .map_err(|e| fail(error_chain(e)))?;
        let mut url = reqwest::Url::parse(url).map_err(|e| fail(e.to_string()))?;
        let protocol = match (bulk, http) {
            (Some(settings), _) => {
                if !url.path().ends_with("/_bulk") {
                    url.path_segments_mut()
                        .map_err(|()| fail("the URL cannot take a path".into()))?
                        .pop_if_empty()
                        .push("_bulk");
                }
                Protocol::Bulk {
                    index: es::parse_index(&settings.index).map_err(fail)?,
                    op: settings.op,
                }
            }
            (None, http) => Protocol::Envelope {
                format: http.map(|h| h.format).unwrap_or_default(),
                contract: http.and_then(|h| h.response.clone()),
            },
        };
        let shown_url = crate::redact::redact(url.as_str());
        let store = transport
            .dead_letters
            .as_ref()
            .ok_or_else(|| fail("sink.dead_letters is required for an http sink".into()))?;
        let dead_letters = dead_letters::open(store, &dead_letter_target(&url)).await?;
        Ok(HttpSink {
            client,
            url,
            shown_url,
            protocol,
            max_delay,
            timeout,
            dead_letters,
            outage: Mutex::new(None),
        })
    }

    fn unavailable(&self, e: reqwest::Error) -> WriteOutcome {
        WriteOutcome::Unavailable(format!("{}: {}", self.shown_url, error_chain(e)))
    }

    /// The whole request: sent, answered, the answer read to its end, and — for a sink
    /// that answers record by record — read item by item.
    async fn send(&self, rows: &[Row]) -> WriteOutcome {
        match &self.protocol {
            Protocol::Envelope { format, contract } => {
                let request = self
                    .client
                    .post(self.url.clone())
                    .header(CONTENT_TYPE, envelope::content_type(*format))
                    .header("idempotency-key", envelope::idempotency_key(rows))
                    .body(envelope::encode(rows, *format));
                let Some(contract) = contract else {
                    return self.exchange(request, rows.len(), None).await;
                };
                let read = |body: &[u8]| {
                    contract.read(body, rows).map_err(|why| {
                        WriteOutcome::Unreadable(format!("{}: {why}", self.shown_url))
                    })
                };
                self.exchange(request, rows.len(), Some(&read)).await
            }
            Protocol::Bulk { index, op } => {
                let encoded = super::elasticsearch::body::encode(rows, index, *op);
                let sent = encoded.left_out.iter().filter(|l| l.is_none()).count();
                let answered = if sent == 0 {
                    WriteOutcome::Written {
                        inserted: 0,
                        duplicates: 0,
                    }
                } else {
                    let request = self
                        .client
                        .post(self.url.clone())
                        .header(CONTENT_TYPE, "application/x-ndjson")
                        .body(encoded.body);
                    let sent_as = answer::Sent {
                        op: *op,
                        targets: &encoded.targets,
                        fixed_index: !index.iter().any(|p| matches!(p, es::Part::Pointer(_))),
                    };
                    let read = |body: &[u8]| {
                        answer::read(body, sent_as).map_err(|e| match e {
                            answer::Unusable::Misplaced(why) => {
                                WriteOutcome::Unreadable(format!("{}: {why}", self.shown_url))
                            }
                            answer::Unusable::Fatal(why) => {
                                WriteOutcome::Fatal(format!("{}: {why}", self.shown_url))
                            }
                        })
                    };
                    self.exchange(request, sent, Some(&read)).await
                };
                with_left_out(answered, encoded.left_out)
            }
        }
    }

    /// Sends `request` carrying `records` and sorts the answer; a 2xx is read by `items`
    /// when given (which says what to make of an answer it cannot use).
    async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
        records: usize,
        items: Option<&ItemReader<'_>>,
    ) -> WriteOutcome {
        let sent = request.send().await;
        let mut answer = match sent {
            Ok(answer) => answer,
            Err(e) if e.is_builder() => {
                return WriteOutcome::Fatal(format!("{}: {}", self.shown_url, error_chain(e)));
            }
            // A certificate refused either way is no outage: waiting cannot fix it.
            Err(e) if crate::tls::certificate_refused(&e).is_some() => {
                let why = crate::tls::certificate_refused(&e).unwrap_or_default();
                return WriteOutcome::Fatal(format!(
                    "{}: TLS handshake failed: {why}",
                    self.shown_url
                ));
            }
            // Refused, reset, timed out, a garbled answer: the sink's state, not the
            // records' fault. Retried without limit, never dead-lettered, never split. (The
            // sink may have stored a batch it did not answer; the idempotency key covers
            // the resend.)
            Err(e) => return self.unavailable(e),
        };
        let status = answer.status();
        let headers = std::mem::take(answer.headers_mut());
        // Read to the end even past what is kept: an answer cut short (a reset before the
        // declared length, a missing last chunk) is no verdict, not even a 200.
        let cap = if items.is_some() {
            MAX_ITEMS_RESPONSE_BYTES
        } else {
            MAX_RESPONSE_BYTES
        };
        let mut body = Vec::new();
        let mut longer = false;
        loop {
            match answer.chunk().await {
                Ok(Some(chunk)) => {
                    let room = cap.saturating_sub(body.len());
                    longer |= chunk.len() > room;
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                Ok(None) => break,
                Err(e) => {
                    return WriteOutcome::Unavailable(format!(
                        "{}: HTTP {status} cut short: {}",
                        self.shown_url,
                        error_chain(e)
                    ));
                }
            }
        }
        let outcome = response::classify(
            status,
            &headers,
            &body,
            records,
            SystemTime::now(),
            self.max_delay,
        );
        let (Some(items), WriteOutcome::Written { .. }) = (items, &outcome) else {
            return outcome;
        };
        if longer {
            return WriteOutcome::Fatal(format!(
                "{}: the answer is longer than {} MiB; lower sink.max_batch",
                self.shown_url,
                cap >> 20
            ));
        }
        match items(&body) {
            Ok(items) => WriteOutcome::from_items(
                items,
                crate::control::retry_after::from_headers(
                    &headers,
                    SystemTime::now(),
                    self.max_delay,
                ),
                crate::control::quota_unit::from_headers(&headers),
            ),
            Err(unusable) => unusable,
        }
    }
}

/// Reads a 2xx answer's body record by record.
type ItemReader<'a> = dyn Fn(&[u8]) -> Result<Vec<ItemOutcome>, Unusable> + Send + Sync + 'a;

/// The answer for the whole batch, given the answer for the records sent and why the
/// others were left out (they are dead-lettered).
fn with_left_out(answered: WriteOutcome, left_out: Vec<Option<String>>) -> WriteOutcome {
    if left_out.iter().all(Option::is_none) {
        return answered;
    }
    let sent = left_out.iter().filter(|l| l.is_none()).count();
    let mut answers: Box<dyn Iterator<Item = ItemOutcome>> = match answered {
        WriteOutcome::Written {
            inserted,
            duplicates,
        } if inserted + duplicates == sent as u64 => Box::new(
            std::iter::repeat_n(ItemOutcome::Written, inserted as usize).chain(
                std::iter::repeat_n(ItemOutcome::Duplicate, duplicates as usize),
            ),
        ),
        WriteOutcome::Items { items, .. } if items.len() == sent => Box::new(items.into_iter()),
        // The request as a whole was not taken: the records sent share its fate, and are
        // sent again with the others left out once more; those only wait for it.
        other => return other,
    };
    let items = left_out
        .into_iter()
        .map(|why| match why {
            Some(why) => ItemOutcome::Rejected(why),
            None => answers.next().expect("one answer per record sent"),
        })
        .collect();
    WriteOutcome::from_items(items, None, None)
}

/// Writes never follow 301/302/303 (they turn the POST into a GET: the batch would be
/// lost however the target answers); 307 and 308 keep the method and body and are followed
/// a few hops. A redirect not followed comes back as the answer and stops the worker.
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT
        );
        if keeps_body && attempt.previous().len() <= response::MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// What a dead letter says it was bound for: the endpoint, without credentials or query.
fn dead_letter_target(url: &reqwest::Url) -> String {
    let mut target = url.clone();
    let _ = target.set_username("");
    let _ = target.set_password(None);
    target.set_query(None);
    target.set_fragment(None);
    target.to_string()
}

#[async_trait]
impl Sink for HttpSink {
    async fn write(&self, rows: &[Row]) -> WriteOutcome {
        let outcome = self.send(rows).await;
        *crate::lock::lock(&self.outage) = match &outcome {
            WriteOutcome::Unavailable(reason) | WriteOutcome::ServerError(reason) => {
                Some(reason.clone())
            }
            WriteOutcome::Throttled { reason, .. } if reason.starts_with("HTTP 503") => {
                Some(reason.clone())
            }
            _ => None,
        };
        outcome
    }

    /// Ready when a write could succeed now: the last write did not find the sink out of
    /// service, and the endpoint answers a HEAD request in time with anything but a 5xx,
    /// a 429 or a redirect (an ingest endpoint may well refuse HEAD itself: it answered).
    async fn ping(&self) -> Result<(), String> {
        if let Some(reason) = crate::lock::lock(&self.outage).clone() {
            return Err(format!("the last write failed: {reason}"));
        }
        let answer = self
            .client
            .head(self.url.clone())
            .timeout(self.timeout.min(PROBE_TIMEOUT))
            .send()
            .await
            .map_err(|e| format!("{}: {}", self.shown_url, error_chain(e)))?;
        let status = answer.status();
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            Err(format!("{}: HTTP {status}", self.shown_url))
        } else if status.is_redirection() {
            Err(response::redirected(status, answer.headers()))
        } else {
            Ok(())
        }
    }

    async fn dead_letter(&self, letters: &[DeadLetter]) -> WriteOutcome {
        self.dead_letters.store(letters).await
    }
}

/// An error and its causes, without reqwest's copy of the URL (it could hold a password).
pub(crate) fn error_chain(e: reqwest::Error) -> String {
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
mod tests;
