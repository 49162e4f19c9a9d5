//! A Confluent-compatible schema registry in the test process, for the Kafka tests of the
//! Avro, Protobuf and JSON Schema formats: the REST endpoints the real registries share
//! (Confluent, Redpanda, Apicurio's ccompat API, Karapace), and the ones the Python
//! serializers of `confluent-kafka` call, answered as Confluent answers them.
//!
//! It runs on a thread of its own with a runtime of its own, so a test can [`stop`] it
//! (the port refuses connections, open ones are cut) and [`start`] it again on the same
//! port mid-run; what was registered survives the restart, as in a real registry.
//!
//! - Schemas are stored exactly as registered (no canonical form): the same text, type and
//!   references under a subject answers the id it has; the same schema under another
//!   subject gets the same global id (as Confluent does); ids start at
//!   [`RegistryOptions::first_id`].
//! - `GET /schemas/ids/{id}` answers `{"schema"}` plus `"schemaType"` unless it is AVRO and
//!   `"references"` unless there are none (Confluent leaves both out then).
//! - Query strings (`?normalize=false`, `?format=serialized`, `?deleted=true`, …) are
//!   ignored: a Protobuf schema registered as base64 comes back as base64.
//! - Every request is counted by its path (no query) — [`requests`] — and logged with its
//!   method and query — [`log`]; a route it does not serve is answered 404 and kept in
//!   [`unknown`] (and printed), so a test sees what a client asked that it lacks.
//! - Optional basic or bearer auth: a request without the credentials gets 401 with
//!   Confluent's body; [`fail_with`] answers every request with a status (a 503 outage).
//!
//! [`stop`]: TestRegistry::stop
//! [`start`]: TestRegistry::start
//! [`requests`]: TestRegistry::requests
//! [`log`]: TestRegistry::log
//! [`unknown`]: TestRegistry::unknown
//! [`fail_with`]: TestRegistry::fail_with

use std::collections::{BTreeMap, HashMap};
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What the registry's responses carry.
pub const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// Credentials every request must carry.
#[derive(Debug, Clone)]
pub enum Auth {
    Basic { user: String, password: String },
    Bearer(String),
}

#[derive(Debug, Clone)]
pub struct RegistryOptions {
    pub auth: Option<Auth>,
    /// The id the first schema registered gets (then +1 each).
    pub first_id: u32,
    /// HTTPS with this certificate and key (PEM files), instead of HTTP.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            auth: None,
            first_id: 1,
            tls: None,
        }
    }
}

/// Another subject's version a schema refers to (Protobuf imports, Avro named types).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    pub name: String,
    pub subject: String,
    pub version: i64,
}

/// A schema as registered: its text exactly, its type (`AVRO`, `PROTOBUF`, `JSON`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSchema {
    pub schema: String,
    pub schema_type: String,
    pub references: Vec<Reference>,
}

#[derive(Default)]
struct Store {
    next_id: u32,
    schemas: BTreeMap<u32, StoredSchema>,
    /// Subject → the id of each version (version n at index n - 1).
    subjects: BTreeMap<String, Vec<u32>>,
    requests: HashMap<String, u64>,
    log: Vec<String>,
    unknown: Vec<String>,
    fail_with: Option<u16>,
}

struct Shared {
    /// Serves HTTPS with this configuration when set.
    tls: Option<Arc<rustls::ServerConfig>>,
    auth: Option<Auth>,
    state: Mutex<Store>,
}

struct Server {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

pub struct TestRegistry {
    port: u16,
    shared: Arc<Shared>,
    server: Mutex<Option<Server>>,
}

impl TestRegistry {
    /// A registry without auth, ids from 1, listening on a free loopback port.
    pub fn spawn() -> TestRegistry {
        Self::spawn_with(RegistryOptions::default())
    }

    pub fn spawn_with(options: RegistryOptions) -> TestRegistry {
        let tls = options.tls.as_ref().map(|(cert, key)| {
            sluice::tls::server_config(cert, key).expect("the test certificate loads")
        });
        let shared = Arc::new(Shared {
            tls,
            auth: options.auth,
            state: Mutex::new(Store {
                next_id: options.first_id,
                ..Store::default()
            }),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let registry = TestRegistry {
            port,
            shared,
            server: Mutex::new(None),
        };
        *registry.server.lock().unwrap() = Some(serve(registry.shared.clone(), listener));
        registry
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        match self.shared.tls {
            // The test certificate names localhost.
            Some(_) => format!("https://localhost:{}", self.port),
            None => format!("http://127.0.0.1:{}", self.port),
        }
    }

    /// Stops answering: the port refuses connections, open ones are closed. Idempotent.
    pub fn stop(&self) {
        let server = self.server.lock().unwrap().take();
        if let Some(server) = server {
            let _ = server.stop.send(());
            server.thread.join().unwrap();
        }
    }

    /// Answers again on the same port, with everything registered before. Idempotent.
    pub fn start(&self) {
        let mut server = self.server.lock().unwrap();
        if server.is_some() {
            return;
        }
        let mut tries = 0;
        let listener = loop {
            match std::net::TcpListener::bind(("127.0.0.1", self.port)) {
                Ok(listener) => break listener,
                Err(e) if tries < 100 => {
                    tries += 1;
                    eprintln!("test registry: rebinding port {}: {e}", self.port);
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("test registry: cannot bind port {} again: {e}", self.port),
            }
        };
        *server = Some(serve(self.shared.clone(), listener));
    }

    pub fn is_running(&self) -> bool {
        self.server.lock().unwrap().is_some()
    }

    /// Registers directly (as `POST /subjects/{subject}/versions` would); returns the id.
    pub fn register(
        &self,
        subject: &str,
        schema_type: &str,
        schema: &str,
        references: &[Reference],
    ) -> u32 {
        let mut state = self.shared.state.lock().unwrap();
        register(
            &mut state,
            subject,
            StoredSchema {
                schema: schema.to_string(),
                schema_type: schema_type.to_ascii_uppercase(),
                references: references.to_vec(),
            },
        )
        .0
    }

    /// The schema registered under `id`.
    pub fn schema(&self, id: u32) -> Option<StoredSchema> {
        self.shared.state.lock().unwrap().schemas.get(&id).cloned()
    }

    /// The ids of a subject's versions, oldest first.
    pub fn versions(&self, subject: &str) -> Vec<u32> {
        let state = self.shared.state.lock().unwrap();
        state.subjects.get(subject).cloned().unwrap_or_default()
    }

    /// Every subject, sorted.
    pub fn subjects(&self) -> Vec<String> {
        let state = self.shared.state.lock().unwrap();
        state.subjects.keys().cloned().collect()
    }

    /// How many requests came for `path` (`/schemas/ids/1`: as sent, percent-encoded, without
    /// the query), whatever was answered.
    pub fn requests(&self, path: &str) -> u64 {
        let state = self.shared.state.lock().unwrap();
        state.requests.get(path).copied().unwrap_or(0)
    }

    /// Requests per path, every path asked.
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        let state = self.shared.state.lock().unwrap();
        state
            .requests
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Every request so far, in order: `GET /schemas/ids/1?subject=x`.
    pub fn log(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().log.clone()
    }

    /// The requests for routes it does not serve (answered 404), in order.
    pub fn unknown(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().unknown.clone()
    }

    /// Answers every request with `status` (e.g. 503) until called with None.
    pub fn fail_with(&self, status: Option<u16>) {
        self.shared.state.lock().unwrap().fail_with = status;
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(shared: Arc<Shared>, listener: std::net::TcpListener) -> Server {
    listener.set_nonblocking(true).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("test-registry".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let tls = shared.tls.clone();
                let app = Router::new().fallback(handle).with_state(shared);
                match tls {
                    Some(config) => {
                        let listener =
                            sluice::sim_sink::tls::TlsListener::new(listener, config).unwrap();
                        tokio::select! {
                            _ = axum::serve(listener, app).into_future() => {}
                            _ = stopped => {}
                        }
                    }
                    None => tokio::select! {
                        served = axum::serve(listener, app).into_future() => {
                            if let Err(e) = served {
                                eprintln!("test registry: {e}");
                            }
                        }
                        _ = stopped => {}
                    },
                }
            });
            // Dropping the runtime drops every connection task: open connections close.
            drop(runtime);
        })
        .unwrap();
    Server { stop, thread }
}

fn answer(status: StatusCode, body: Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    response
}

fn error(status: StatusCode, code: u32, message: &str) -> Response {
    answer(status, json!({"error_code": code, "message": message}))
}

fn not_found_subject(subject: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        40401,
        &format!("Subject '{subject}' not found."),
    )
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let line = match uri.query() {
        Some(q) => format!("{method} {path}?{q}"),
        None => format!("{method} {path}"),
    };
    let mut state = shared.state.lock().unwrap();
    *state.requests.entry(path.clone()).or_default() += 1;
    state.log.push(line.clone());
    if let Some(status) = state.fail_with {
        let status = StatusCode::from_u16(status).unwrap();
        return error(
            status,
            status.as_u16() as u32 * 100,
            "the test registry is failing on purpose",
        );
    }
    if let Some(auth) = &shared.auth
        && !authorized(auth, &headers)
    {
        let mut response = error(StatusCode::UNAUTHORIZED, 401, "Unauthorized");
        if matches!(auth, Auth::Basic { .. }) {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"SchemaRegistry\""),
            );
        }
        return response;
    }
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let m = &method;
    let response = match segments.as_slice() {
        [] if m == Method::GET => Some(answer(StatusCode::OK, json!({}))),
        ["schemas", "types"] if m == Method::GET => {
            Some(answer(StatusCode::OK, json!(["JSON", "PROTOBUF", "AVRO"])))
        }
        ["schemas", "ids", id, rest @ ..]
            if m == Method::GET
                && matches!(rest, [] | ["versions"] | ["subjects"] | ["schema"]) =>
        {
            Some(
                by_id(&state, id, rest)
                    .unwrap_or_else(|| error(StatusCode::NOT_FOUND, 40403, "Schema not found")),
            )
        }
        ["subjects"] if m == Method::GET => Some(answer(
            StatusCode::OK,
            json!(state.subjects.keys().collect::<Vec<_>>()),
        )),
        ["subjects", subject] if m == Method::POST => Some(lookup(&state, subject, &body)),
        ["subjects", subject, "versions"] if m == Method::GET => {
            Some(match state.subjects.get(*subject) {
                Some(ids) => answer(StatusCode::OK, json!((1..=ids.len()).collect::<Vec<_>>())),
                None => not_found_subject(subject),
            })
        }
        ["subjects", subject, "versions"] if m == Method::POST => Some(match parse_schema(&body) {
            Ok(schema) => {
                let (id, _) = register(&mut state, subject, schema);
                answer(StatusCode::OK, json!({"id": id}))
            }
            Err(response) => response,
        }),
        ["subjects", subject, "versions", version] if m == Method::GET => {
            Some(version_of(&state, subject, version, false))
        }
        ["subjects", subject, "versions", version, "schema"] if m == Method::GET => {
            Some(version_of(&state, subject, version, true))
        }
        ["config"] | ["config", _] if m == Method::GET => Some(answer(
            StatusCode::OK,
            json!({"compatibilityLevel": "BACKWARD"}),
        )),
        ["config"] | ["config", _] if m == Method::PUT => {
            let level = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|b| b["compatibility"].as_str().map(str::to_string))
                .unwrap_or_else(|| "BACKWARD".into());
            Some(answer(StatusCode::OK, json!({"compatibility": level})))
        }
        ["mode"] | ["mode", _] if m == Method::GET => {
            Some(answer(StatusCode::OK, json!({"mode": "READWRITE"})))
        }
        // The Python client (2.13+) asks which subject a topic is associated with before
        // falling back to `<topic>-value`; a registry without associations answers none.
        ["associations", "resources", _, _] if m == Method::GET => {
            Some(answer(StatusCode::OK, json!([])))
        }
        ["compatibility", "subjects", _, "versions", _] if m == Method::POST => {
            Some(answer(StatusCode::OK, json!({"is_compatible": true})))
        }
        _ => None,
    };
    response.unwrap_or_else(|| {
        eprintln!("test registry: no route for {line}");
        state.unknown.push(line);
        error(StatusCode::NOT_FOUND, 404, "HTTP 404 Not Found")
    })
}

fn authorized(auth: &Auth, headers: &HeaderMap) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let wanted = match auth {
        Auth::Basic { user, password } => {
            format!("Basic {}", base64(format!("{user}:{password}").as_bytes()))
        }
        Auth::Bearer(token) => format!("Bearer {token}"),
    };
    given == Some(wanted.as_str())
}

/// `GET /schemas/ids/{id}` (`rest` empty), `/versions`, `/subjects`, `/schema`.
fn by_id(state: &Store, id: &str, rest: &[&str]) -> Option<Response> {
    let id: u32 = id.parse().ok()?;
    let stored = state.schemas.get(&id)?;
    let uses = || {
        state.subjects.iter().flat_map(move |(subject, ids)| {
            ids.iter()
                .enumerate()
                .filter(move |(_, i)| **i == id)
                .map(move |(n, _)| (subject.clone(), n + 1))
        })
    };
    Some(match rest {
        [] => answer(StatusCode::OK, schema_json(stored, Map::new())),
        ["versions"] => answer(
            StatusCode::OK,
            Value::Array(
                uses()
                    .map(|(subject, version)| json!({"subject": subject, "version": version}))
                    .collect(),
            ),
        ),
        ["subjects"] => answer(
            StatusCode::OK,
            json!(uses().map(|(s, _)| s).collect::<Vec<_>>()),
        ),
        ["schema"] => answer(StatusCode::OK, raw_schema(stored)),
        _ => return None,
    })
}

type Map = serde_json::Map<String, Value>;

/// A schema's fields as Confluent answers them, after `head`: `schemaType` unless AVRO,
/// `references` unless none, `schema`.
fn schema_json(stored: &StoredSchema, mut head: Map) -> Value {
    if stored.schema_type != "AVRO" {
        head.insert("schemaType".into(), json!(stored.schema_type));
    }
    if !stored.references.is_empty() {
        head.insert("references".into(), json!(stored.references));
    }
    head.insert("schema".into(), json!(stored.schema));
    Value::Object(head)
}

/// `.../schema`: the schema itself, as JSON when it is JSON (Avro, JSON Schema), else as
/// a JSON string.
fn raw_schema(stored: &StoredSchema) -> Value {
    serde_json::from_str(&stored.schema).unwrap_or_else(|_| json!(stored.schema))
}

fn version_of(state: &Store, subject: &str, version: &str, raw: bool) -> Response {
    let Some(ids) = state.subjects.get(subject) else {
        return not_found_subject(subject);
    };
    let n = match version {
        "latest" | "-1" => ids.len(),
        v => match v.parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    42202,
                    "The specified version is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"",
                );
            }
        },
    };
    let Some(&id) = ids.get(n - 1) else {
        return error(StatusCode::NOT_FOUND, 40402, "Version not found.");
    };
    let stored = &state.schemas[&id];
    if raw {
        return answer(StatusCode::OK, raw_schema(stored));
    }
    let mut head = Map::new();
    head.insert("subject".into(), json!(subject));
    head.insert("version".into(), json!(n));
    head.insert("id".into(), json!(id));
    answer(StatusCode::OK, schema_json(stored, head))
}

/// `POST /subjects/{subject}`: is this schema registered under the subject, and as what.
fn lookup(state: &Store, subject: &str, body: &[u8]) -> Response {
    let schema = match parse_schema(body) {
        Ok(schema) => schema,
        Err(response) => return response,
    };
    let Some(ids) = state.subjects.get(subject) else {
        return not_found_subject(subject);
    };
    match ids.iter().position(|id| state.schemas[id] == schema) {
        Some(n) => {
            let mut head = Map::new();
            head.insert("subject".into(), json!(subject));
            head.insert("version".into(), json!(n + 1));
            head.insert("id".into(), json!(ids[n]));
            answer(StatusCode::OK, schema_json(&schema, head))
        }
        None => error(StatusCode::NOT_FOUND, 40403, "Schema not found"),
    }
}

/// A registration or lookup body: `{"schema", "schemaType"?, "references"?}` (other
/// fields, such as `metadata` or `ruleSet`, ignored). Avro and JSON schemas must be JSON.
#[allow(clippy::result_large_err)]
fn parse_schema(body: &[u8]) -> Result<StoredSchema, Response> {
    #[derive(Deserialize)]
    struct Body {
        schema: Option<String>,
        #[serde(rename = "schemaType")]
        schema_type: Option<String>,
        references: Option<Vec<Reference>>,
    }
    let body: Body = serde_json::from_slice(body).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            400,
            &format!("Unrecognized request body: {e}"),
        )
    })?;
    let schema = body
        .schema
        .filter(|s| !s.is_empty())
        .ok_or_else(|| error(StatusCode::UNPROCESSABLE_ENTITY, 42201, "Empty schema"))?;
    let schema_type = body
        .schema_type
        .unwrap_or_else(|| "AVRO".into())
        .to_ascii_uppercase();
    if schema_type != "PROTOBUF" && serde_json::from_str::<Value>(&schema).is_err() {
        return Err(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            42201,
            &format!("Invalid schema: not JSON, for a {schema_type} schema"),
        ));
    }
    Ok(StoredSchema {
        schema,
        schema_type,
        references: body.references.unwrap_or_default(),
    })
}

/// Registers `schema` under `subject`: the id it has there, else the id it has under any
/// subject (a new version here), else a new id. Returns (id, version).
fn register(state: &mut Store, subject: &str, schema: StoredSchema) -> (u32, usize) {
    if let Some(ids) = state.subjects.get(subject)
        && let Some(n) = ids.iter().position(|id| state.schemas[id] == schema)
    {
        return (ids[n], n + 1);
    }
    let id = match state.schemas.iter().find(|(_, s)| **s == schema) {
        Some((id, _)) => *id,
        None => {
            let id = state.next_id;
            state.next_id += 1;
            state.schemas.insert(id, schema);
            id
        }
    };
    let ids = state.subjects.entry(subject.to_string()).or_default();
    ids.push(id);
    (id, ids.len())
}

fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && bytes[i + 1].is_ascii_hexdigit()
            && bytes[i + 2].is_ascii_hexdigit()
        {
            out.push(u8::from_str_radix(&segment[i + 1..i + 3], 16).unwrap());
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Standard base64 with padding (for the expected `Authorization` header).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * k)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_pads_as_the_standard_says() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
    }

    /// `GET path` with HTTP/1.0: (status, body), or None when the port refuses.
    fn get(port: u16, path: &str, auth: Option<&str>) -> Option<(u16, String)> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        let auth = auth
            .map(|a| format!("Authorization: {a}\r\n"))
            .unwrap_or_default();
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n{auth}\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, text.split("\r\n\r\n").nth(1)?.to_string()))
    }

    #[test]
    fn a_stopped_registry_refuses_and_comes_back_on_its_port_with_its_schemas() {
        let registry = TestRegistry::spawn_with(RegistryOptions {
            first_id: 7,
            ..RegistryOptions::default()
        });
        let id = registry.register("t-value", "AVRO", "\"string\"", &[]);
        assert_eq!(id, 7);
        assert_eq!(
            registry.register("other-value", "AVRO", "\"string\"", &[]),
            7
        );
        let (status, body) = get(registry.port(), "/schemas/ids/7?format=x", None).unwrap();
        assert_eq!((status, body.as_str()), (200, r#"{"schema":"\"string\""}"#));
        registry.stop();
        assert!(get(registry.port(), "/schemas/ids/7", None).is_none());
        registry.start();
        let (status, body) =
            get(registry.port(), "/subjects/t-value/versions/latest", None).unwrap();
        assert_eq!(status, 200);
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["id"], 7);
        assert_eq!(body["version"], 1);
        let (status, body) = get(registry.port(), "/schemas/ids/8", None).unwrap();
        assert_eq!(status, 404);
        assert!(body.contains("40403"), "{body}");
        assert_eq!(registry.requests("/schemas/ids/7"), 1);
        assert!(get(registry.port(), "/nothing/here", None).is_some());
        assert_eq!(registry.unknown(), vec!["GET /nothing/here".to_string()]);
        registry.fail_with(Some(503));
        assert_eq!(get(registry.port(), "/subjects", None).unwrap().0, 503);
    }

    #[test]
    fn basic_auth_is_required_when_set() {
        let registry = TestRegistry::spawn_with(RegistryOptions {
            auth: Some(Auth::Basic {
                user: "u".into(),
                password: "p".into(),
            }),
            ..RegistryOptions::default()
        });
        assert_eq!(get(registry.port(), "/subjects", None).unwrap().0, 401);
        let wrong = format!("Basic {}", base64(b"u:q"));
        assert_eq!(
            get(registry.port(), "/subjects", Some(&wrong)).unwrap().0,
            401
        );
        let right = format!("Basic {}", base64(b"u:p"));
        assert_eq!(
            get(registry.port(), "/subjects", Some(&right)).unwrap(),
            (200, "[]".to_string())
        );
    }

    #[test]
    fn percent_decoding_keeps_what_is_not_an_escape() {
        assert_eq!(percent_decode("a%2Fb.proto"), "a/b.proto");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
