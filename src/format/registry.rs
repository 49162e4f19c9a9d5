//! A Confluent-compatible schema registry's REST API, as far as a reader needs it: a
//! schema by id, a subject's version (for references), and registering (for `sluice
//! produce`). The endpoints called are the ones Confluent, Redpanda, Apicurio (ccompat) and
//! Karapace share: `GET /schemas/ids/{id}`, `GET /subjects/{subject}/versions/{version}`,
//! `POST /subjects/{subject}/versions`, and `GET /subjects` to check the credentials.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use reqwest::{StatusCode, Url};
use serde::Deserialize;

use super::settings::{REGISTRY_TLS_KEYS, RegistrySettings};

/// What a registry answer means for the records waiting on it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    /// Unreachable, timing out, 5xx, 429, a body cut short: wait and ask again; nothing
    /// that needs it is acknowledged meanwhile.
    #[error("schema registry unavailable: {0}")]
    Outage(String),
    /// The registry does not have it (404) or refuses the request as malformed (4xx): the
    /// records that need it are dead letters.
    #[error("{0}")]
    Missing(String),
    /// 401/403 (the credentials are wrong or lack a permission), or a certificate refused
    /// either way: waiting will not help. The message names the key to fix.
    #[error("{0}")]
    Refused(String),
}

/// A schema as the registry returns it.
#[derive(Debug, Clone, Deserialize)]
pub struct RegisteredSchema {
    pub schema: String,
    /// `AVRO` when absent, `PROTOBUF`, `JSON`.
    #[serde(rename = "schemaType", default)]
    pub schema_type: Option<String>,
    #[serde(default)]
    pub references: Vec<Reference>,
}

impl RegisteredSchema {
    pub fn kind(&self) -> &str {
        self.schema_type.as_deref().unwrap_or("AVRO")
    }
}

/// Another subject's version that a schema imports (Protobuf) or names (Avro).
#[derive(Debug, Clone, Deserialize)]
pub struct Reference {
    pub name: String,
    pub subject: String,
    pub version: i64,
}

#[derive(Deserialize)]
struct Registered {
    id: u32,
}

pub struct SchemaRegistry {
    client: reqwest::Client,
    urls: Vec<Url>,
    /// The URL that answered last: asked first.
    current: std::sync::atomic::AtomicUsize,
    username: Option<String>,
    password: String,
    token: String,
    limiter: DefaultDirectRateLimiter,
}

impl SchemaRegistry {
    pub fn new(settings: &RegistrySettings) -> Result<Self, String> {
        let urls = settings
            .url
            .list()
            .iter()
            .map(|u| {
                let mut url =
                    Url::parse(u).map_err(|e| format!("source.schema_registry.url: {e}"))?;
                // Paths are joined below: the base must end with a slash.
                if !url.path().ends_with('/') {
                    url.set_path(&format!("{}/", url.path()));
                }
                Ok(url)
            })
            .collect::<Result<Vec<_>, String>>()?;
        let builder = crate::tls::http_client()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(5)));
        let client = settings
            .tls
            .apply_to_reqwest(builder)
            .map_err(|e| format!("source.schema_registry.tls: {e}"))?
            .build()
            .map_err(|e| format!("source.schema_registry: {e}"))?;
        settings
            .tls
            .warn_if_insecure(&REGISTRY_TLS_KEYS, "the schema registry");
        let per_second = NonZeroU32::new(settings.requests_per_second.max(1)).expect("≥ 1");
        Ok(SchemaRegistry {
            client,
            urls,
            current: Default::default(),
            username: settings.username.clone(),
            password: settings.password.clone(),
            token: settings.token.clone(),
            limiter: RateLimiter::direct(Quota::per_second(per_second)),
        })
    }

    /// The schema with this id.
    pub async fn schema(&self, id: u32) -> Result<RegisteredSchema, RegistryError> {
        self.json(
            reqwest::Method::GET,
            &["schemas", "ids", &id.to_string()],
            None,
        )
        .await
        .map_err(|e| match e {
            RegistryError::Missing(why) => {
                RegistryError::Missing(format!("schema id {id} is not in the registry ({why})"))
            }
            e => e,
        })
    }

    /// A subject's version (a reference's target).
    pub async fn version(
        &self,
        subject: &str,
        version: i64,
    ) -> Result<RegisteredSchema, RegistryError> {
        let v = if version < 0 {
            "latest".to_string()
        } else {
            version.to_string()
        };
        self.json(
            reqwest::Method::GET,
            &["subjects", subject, "versions", &v],
            None,
        )
        .await
        .map_err(|e| match e {
            RegistryError::Missing(why) => RegistryError::Missing(format!(
                "referenced subject {subject:?} version {v} is not in the registry ({why})"
            )),
            e => e,
        })
    }

    /// Registers `schema` under `subject` (or finds it there) and returns its id.
    pub async fn register(
        &self,
        subject: &str,
        schema: &str,
        schema_type: &str,
    ) -> Result<u32, RegistryError> {
        let mut body = serde_json::json!({ "schema": schema });
        if schema_type != "AVRO" {
            body["schemaType"] = schema_type.into();
        }
        let answer: serde_json::Value = self
            .json(
                reqwest::Method::POST,
                &["subjects", subject, "versions"],
                Some(body),
            )
            .await?;
        serde_json::from_value::<Registered>(answer)
            .map(|r| r.id)
            .map_err(|e| RegistryError::Outage(format!("an answer without an id: {e}")))
    }

    /// Whether the registry answers and takes the credentials (`GET /subjects`).
    pub async fn check(&self) -> Result<(), RegistryError> {
        self.json::<serde_json::Value>(reqwest::Method::GET, &["subjects"], None)
            .await
            .map(drop)
    }

    /// One request, to each URL in turn from the one that answered last, until one answers
    /// with something other than an outage.
    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &[&str],
        body: Option<serde_json::Value>,
    ) -> Result<T, RegistryError> {
        use std::sync::atomic::Ordering::Relaxed;
        let first = self.current.load(Relaxed);
        let mut last = RegistryError::Outage("no URL".into());
        for turn in 0..self.urls.len() {
            let at = (first + turn) % self.urls.len();
            self.limiter.until_ready().await;
            match self
                .ask(&self.urls[at], method.clone(), path, body.as_ref())
                .await
            {
                Err(e @ RegistryError::Outage(_)) => last = e,
                answer => {
                    self.current.store(at, Relaxed);
                    return answer;
                }
            }
        }
        Err(last)
    }

    async fn ask<T: serde::de::DeserializeOwned>(
        &self,
        base: &Url,
        method: reqwest::Method,
        path: &[&str],
        body: Option<&serde_json::Value>,
    ) -> Result<T, RegistryError> {
        let mut url = base.clone();
        url.path_segments_mut()
            .map_err(|()| {
                RegistryError::Refused("source.schema_registry.url cannot take a path".into())
            })?
            .pop_if_empty()
            .extend(path);
        let shown = crate::redact::redact(url.as_str());
        let mut request = self.client.request(method, url).header(
            "Accept",
            "application/vnd.schemaregistry.v1+json, application/json",
        );
        if let Some(body) = body {
            request = request
                .header("Content-Type", "application/vnd.schemaregistry.v1+json")
                .body(body.to_string());
        }
        if !self.token.is_empty() {
            request = request.bearer_auth(&self.token);
        } else if let Some(user) = &self.username {
            request = request.basic_auth(user, Some(&self.password));
        }
        let response =
            request
                .send()
                .await
                .map_err(|e| match crate::tls::certificate_refused(&e) {
                    Some(why) => RegistryError::Refused(format!(
                        "source.schema_registry.tls: {shown}: the certificate was refused: {why}"
                    )),
                    None => RegistryError::Outage(format!("{shown}: {}", chain(&e))),
                })?;
        let status = response.status();
        let text = response.text().await.map_err(|e| {
            RegistryError::Outage(format!("{shown}: {status}, body cut short: {}", chain(&e)))
        })?;
        let excerpt: String = text.chars().take(200).collect();
        match status {
            s if s.is_success() => serde_json::from_str(&text).map_err(|e| {
                RegistryError::Outage(format!(
                    "{shown}: {s} with a body that is not the expected JSON ({e}): {excerpt:?}"
                ))
            }),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                Err(RegistryError::Refused(format!(
                    "the schema registry refused the credentials of source.schema_registry: {shown}: {status} {excerpt}"
                )))
            }
            StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS => {
                Err(RegistryError::Outage(format!("{shown}: {status}")))
            }
            s if s.is_client_error() => Err(RegistryError::Missing(format!("{status} {excerpt}"))),
            s => Err(RegistryError::Outage(format!("{shown}: {s} {excerpt}"))),
        }
    }
}

/// An error with its causes, which reqwest keeps apart ("error sending request" alone says
/// nothing).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}
