//! `[sink]` with `kind = "http"`: how a batch is encoded and its answer read, and what
//! both HTTP kinds (`http`, `elasticsearch`) read of the connection — headers, timeout,
//! TLS, where rejected records go — with the checks of their URLs.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::contract::ResponseContract;
use crate::settings::{HumanDuration, Problems};
use crate::sink::balanced::settings::EndpointSettings;
use crate::sink::dead_letters::settings::DeadLetterSettings;
use crate::sink::discovery::settings::DNS_PREFIX;
use crate::sink::settings::SinkSettings;
use crate::tls::TlsSettings;

/// How an http sink encodes a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum HttpFormat {
    /// One JSON array of `{"key", "source", "record"}` objects.
    #[default]
    JsonArray,
    /// One such object per line (`application/x-ndjson`).
    Ndjson,
}

/// `[sink]` with `kind = "http"`.
#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
pub struct HttpSettings {
    /// How a batch is encoded in the request body.
    #[serde(default)]
    pub format: HttpFormat,
    /// How a 2xx answer says which records were taken (`sink::http::contract`).
    pub response: Option<ResponseContract>,
    #[serde(flatten)]
    pub transport: HttpTransport,
}

impl HttpSettings {
    pub(crate) fn validate(&self, sink: &SinkSettings, p: &mut Problems) {
        p.check(super::contract::validate(self.response.as_ref()));
        self.transport.validate(sink, p);
    }
}

/// What both HTTP kinds (`http`, `elasticsearch`) read of the connection.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct HttpTransport {
    /// Extra request headers; `${VAR}` in a value is read from the environment.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A private CA, a client certificate (PostgreSQL takes libpq's `sslmode`,
    /// `sslrootcert`, `sslcert`, `sslkey` in its URL instead).
    pub tls: Option<TlsSettings>,
    /// The longest one request may take before it counts as a transient failure.
    #[schemars(with = "HumanDuration")]
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Where records the endpoint rejects go (required: an endpoint keeps none).
    pub dead_letters: Option<DeadLetterSettings>,
}

impl Default for HttpTransport {
    fn default() -> Self {
        HttpTransport {
            headers: BTreeMap::new(),
            tls: None,
            timeout: default_timeout(),
            dead_letters: None,
        }
    }
}

/// The longest one request may take unless `timeout` says otherwise.
fn default_timeout() -> Duration {
    Duration::from_secs(30)
}

impl HttpTransport {
    /// Checks the URLs, headers, timeout and dead-letter store of an HTTP kind.
    pub(crate) fn validate(&self, sink: &SinkSettings, p: &mut Problems) {
        validate_transport(sink, self, p);
    }
}

fn validate_transport(sink: &SinkSettings, t: &HttpTransport, p: &mut Problems) {
    let kind = format!("{:?}", sink.kind()).to_ascii_lowercase();
    let (key, urls): (&'static str, Vec<&str>) =
        if sink.urls.is_empty() && sink.discovery.file.is_none() {
            ("sink.url", vec![sink.url.as_str()])
        } else {
            (
                "sink.urls",
                sink.urls.iter().map(EndpointSettings::url).collect(),
            )
        };
    let resolved = |u: &&str| u.starts_with(DNS_PREFIX);
    for text in urls.into_iter().filter(|u| !resolved(u)) {
        match reqwest::Url::parse(text) {
            Err(e) => p.add(key, format!("{text:?} is not a URL: {e}")),
            Ok(url) if !matches!(url.scheme(), "http" | "https") => p.add(
                key,
                format!("kind = \"{kind}\" needs an http(s):// URL, got {text:?}"),
            ),
            Ok(_) => {}
        }
    }
    p.positive_duration("sink.timeout", t.timeout);
    if let Err(e) = super::headers::build(&t.headers, |name| std::env::var(name).ok()) {
        p.add("sink.headers", e.to_string());
    }
    // reqwest sends a URL's user:password as Basic auth in place of a configured
    // Authorization header, silently: one of them would be ignored.
    let authorization = t
        .headers
        .keys()
        .any(|h| h.eq_ignore_ascii_case("authorization"));
    let credentials = sink
        .endpoint_urls()
        .filter_map(|u| reqwest::Url::parse(u).ok())
        .any(|u| !u.username().is_empty() || u.password().is_some());
    if authorization && credentials {
        p.add(
            "sink.headers",
            "Authorization is set and the sink URL carries user:password@, which would replace it: keep one",
        );
    }
    match &t.dead_letters {
        None => p.add(
            "sink.dead_letters",
            format!(
                "required for kind = \"{kind}\": set url = \"sqlite://…\" or path = \"….ndjson\""
            ),
        ),
        Some(dl) => dl.validate(p),
    }
}
