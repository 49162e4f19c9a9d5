//! `sluice sim-sink`: an HTTP endpoint that behaves like a capacity-limited database, to
//! rehearse a configuration before pointing it at production, and for tests. It takes
//! `capacity` records, requests or body bytes per second (`unit`; a server-side token
//! bucket of `burst` of them); a batch that does not fit is answered 429 with the time
//! until it would; answers slow down
//! exponentially beyond a knee of concurrent requests, and beyond a hard concurrency limit
//! requests can be deferred (429) or dropped (never answered); an outage can be switched on; keys
//! are deduplicated; records carrying `reject_field` are refused (422) so the dead-letter
//! path can be exercised. Also a library: [`SimSink::start`] on port 0 in tests.

mod bulk;
pub mod capacity;
pub mod documents;
pub mod latency;
pub mod ledger;
pub mod measure;
pub mod outage;
pub mod overload;
mod server;
pub mod tls;

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use clap::{Args, ValueEnum};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use capacity::BucketUnit;
pub use latency::LatencyModel;
pub use ledger::{LedgerWindow, SimStats};
pub use outage::OutageMode;
pub use overload::{Action, Overload};

/// How a 429 says when to come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RetryAfterStyle {
    /// `Retry-After` in whole seconds and `x-ms-retry-after-ms` (as Azure Cosmos DB).
    Millis,
    /// `Retry-After` in whole seconds only.
    Seconds,
    /// The IETF draft's (draft-ietf-httpapi-ratelimit-headers) `RateLimit: "sim";r=0;t=…`
    /// with `RateLimit-Policy: "sim";q=<capacity>;w=1;qu="<unit>"`: the only style that
    /// says which unit is limited (`qu` "requests", "content-bytes", or "records").
    Ratelimit,
    /// Nothing: the client must guess.
    None,
}

#[derive(Debug, Clone)]
pub struct SimSinkSettings {
    pub listen: SocketAddr,
    /// What the bucket counts: records (the default), requests or body bytes.
    pub unit: BucketUnit,
    /// `unit`s per second.
    pub capacity: f64,
    /// `unit`s the bucket holds: the most one request may cost.
    pub burst: u32,
    pub latency: LatencyModel,
    /// More concurrent requests than this are deferred or dropped.
    pub concurrency_limit: Option<(u32, Action)>,
    pub reject_field: Option<String>,
    pub retry_after: RetryAfterStyle,
    /// Answer as Elasticsearch `_bulk` (`POST /_bulk`, `POST /<index>/_bulk`) instead of
    /// `/ingest`: `capacity` and `burst` are the write queue's drain rate and size.
    pub bulk: bool,
    /// Keep every stored document (`GET /documents`, [`SimSink::documents`]).
    pub keep_documents: bool,
    /// `bulk`: the share of documents refused 429 at random, whatever the room (one busy
    /// node among many, a shard's queue full while the rest are idle).
    pub refuse_share: f64,
}

impl SimSinkSettings {
    /// On `listen`, at `capacity` records per second with one second's worth of burst,
    /// answering in 5 ms up to 30 concurrent requests.
    pub fn new(listen: SocketAddr, capacity: f64) -> Self {
        SimSinkSettings {
            listen,
            unit: BucketUnit::Records,
            capacity,
            burst: capacity.ceil().max(1.0) as u32,
            latency: LatencyModel::default(),
            concurrency_limit: None,
            reject_field: None,
            retry_after: RetryAfterStyle::Millis,
            bulk: false,
            keep_documents: false,
            refuse_share: 0.0,
        }
    }
}

/// Counts each connection the listener accepts.
fn counter<Io>(shared: Arc<server::SinkState>) -> impl FnMut(&mut Io) + Send + 'static {
    move |_| shared.ledger().connected()
}

/// A running emulator.
pub struct SimSink {
    addr: SocketAddr,
    /// "http", or "https" when started with a certificate.
    scheme: &'static str,
    shared: Arc<server::SinkState>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl SimSink {
    pub async fn start(config: SimSinkSettings) -> std::io::Result<SimSink> {
        Self::start_on(config, None).await
    }

    /// Serves HTTPS with `tls` (a certificate and its key).
    pub async fn start_tls(
        config: SimSinkSettings,
        tls: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<SimSink> {
        Self::start_on(config, Some(tls)).await
    }

    async fn start_on(
        config: SimSinkSettings,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> std::io::Result<SimSink> {
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(server::SinkState::new(&config));
        let app = server::router(shared.clone(), config.bulk);
        let (stop, stopped) = oneshot::channel::<()>();
        let stopped = async {
            let _ = stopped.await;
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let task = match tls {
            None => {
                let listener = listener.tap_io(counter(shared.clone()));
                tokio::spawn(async move {
                    axum::serve(listener, app)
                        .with_graceful_shutdown(stopped)
                        .await
                })
            }
            Some(tls) => {
                let listener =
                    tls::TlsListener::new(listener, tls)?.tap_io(counter(shared.clone()));
                tokio::spawn(async move {
                    axum::serve(listener, app)
                        .with_graceful_shutdown(stopped)
                        .await
                })
            }
        };
        Ok(SimSink {
            addr,
            scheme,
            shared,
            stop,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to configure as `sink.url`.
    pub fn ingest_url(&self) -> String {
        format!("{}://{}/ingest", self.scheme, self.addr)
    }

    /// The cluster's URL, for `sink.url` of `kind = "elasticsearch"` (`--bulk`).
    pub fn base_url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    pub fn stats(&self) -> SimStats {
        self.shared.ledger().stats()
    }

    /// Time since the start, on the clock the stats' windows are counted by.
    pub fn uptime(&self) -> Duration {
        self.shared.now()
    }

    /// Every document stored, by key (empty unless `keep_documents`).
    pub fn documents(&self) -> Vec<documents::Stored> {
        self.shared.documents().map_or_else(Vec::new, |d| d.all())
    }

    /// Keys stored, counted by `group` (e.g. the writer a key names), without copying
    /// them: a fleet test reads this mid-run, and copying 100,000 keys under the ledger's
    /// lock stalled the requests of a whole window.
    pub fn count_keys<K: Ord>(
        &self,
        group: impl Fn(&str) -> K,
    ) -> std::collections::BTreeMap<K, u64> {
        let mut counts = std::collections::BTreeMap::new();
        for key in self.shared.ledger().key_set() {
            *counts.entry(group(key)).or_default() += 1;
        }
        counts
    }

    /// Every key stored, sorted.
    pub fn keys(&self) -> Vec<String> {
        let mut keys = self.shared.ledger().keys();
        keys.sort();
        keys
    }

    /// Takes `rate` per second (in its unit) from now on (the burst stays), as a database
    /// that slows down.
    pub fn set_capacity(&self, rate: f64) {
        self.shared.set_capacity(rate);
    }

    /// Starts an outage now (a zero length ends one).
    pub fn outage(&self, length: Duration, mode: OutageMode) {
        self.shared.set_outage(length, mode);
    }

    /// Stops accepting connections and waits for requests in progress to finish.
    /// Stops serving once the requests in progress are answered; returns the stats as they
    /// then stand (a request answered during the stop counts).
    pub async fn stop(self) -> std::io::Result<SimStats> {
        let _ = self.stop.send(());
        self.shared.release_dropped();
        self.task.await.map_err(std::io::Error::other)??;
        Ok(self.shared.ledger().stats())
    }
}

/// `sluice sim-sink` flags.
#[derive(Debug, Args)]
pub struct SimSinkArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// What the capacity counts: records, requests, or request-body bytes.
    #[arg(long, value_enum, default_value_t = BucketUnit::Records)]
    unit: BucketUnit,
    /// Units (`--unit`) per second the emulated database takes.
    #[arg(long, default_value_t = 800.0)]
    capacity: f64,
    /// Units the capacity bucket holds (the costliest request that can ever pass);
    /// default: one second of capacity.
    #[arg(long)]
    burst: Option<u32>,
    /// Answer time while the database is not crowded.
    #[arg(long, default_value = "5ms", value_parser = humantime::parse_duration)]
    latency: Duration,
    /// Concurrent requests beyond which answers slow down…
    #[arg(long, default_value_t = 30)]
    knee: u32,
    /// …by this factor…
    #[arg(long, default_value_t = 2.0)]
    latency_factor: f64,
    /// …for every this many more concurrent requests.
    #[arg(long, default_value_t = 10.0)]
    latency_k: f64,
    /// Each concurrent request beyond the first adds this share of `--latency` (a link
    /// whose throughput does not grow with concurrency).
    #[arg(long, default_value_t = 0.0)]
    latency_linear: f64,
    /// Adds an exponentially distributed time averaging this share of `--latency`.
    #[arg(long, default_value_t = 0.0)]
    jitter: f64,
    /// Answer 429 (no Retry-After, after `--latency`) to requests beyond this many in
    /// progress.
    #[arg(long, value_name = "N", conflicts_with = "drop_above")]
    defer_above: Option<u32>,
    /// Never answer requests beyond this many in progress.
    #[arg(long, value_name = "N")]
    drop_above: Option<u32>,
    /// Refuse (422) any request holding a record with this top-level field; with
    /// `--bulk`, answer such documents 400 `mapper_parsing_exception` (the rest are taken).
    #[arg(long, value_name = "FIELD")]
    reject_field: Option<String>,
    /// Answer as Elasticsearch/OpenSearch `_bulk` (`POST /_bulk`): per-document statuses in
    /// a 200; documents beyond the write queue's free room (`--burst`, drained at
    /// `--capacity` per second) get 429 inside it. Records only.
    #[arg(long)]
    bulk: bool,
    /// Keep every document stored, served at `GET /documents` (memory grows with them).
    #[arg(long)]
    keep_documents: bool,
    /// With `--bulk`: refuse this share of documents (0 to 1) with 429 at random, whatever
    /// the room, as a cluster with one busy node does.
    #[arg(long, value_name = "SHARE", default_value_t = 0.0, requires = "bulk")]
    refuse_share: f64,
    /// How a 429 says when to come back.
    #[arg(long, value_enum, default_value_t = RetryAfterStyle::Millis)]
    retry_after: RetryAfterStyle,
    /// Serve HTTPS with this certificate (PEM chain); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
}

impl SimSinkArgs {
    fn config(&self) -> Result<SimSinkSettings, String> {
        if !(self.capacity.is_finite() && self.capacity > 0.0) {
            return Err("--capacity must be a positive number".into());
        }
        if self.burst == Some(0) {
            return Err("--burst must be at least 1".into());
        }
        if !(self.latency_factor.is_finite() && self.latency_factor >= 1.0) {
            return Err("--latency-factor must be at least 1".into());
        }
        if !(self.latency_k.is_finite() && self.latency_k > 0.0) {
            return Err("--latency-k must be positive".into());
        }
        if !(self.latency_linear.is_finite() && self.latency_linear >= 0.0) {
            return Err("--latency-linear must not be negative".into());
        }
        if !(self.jitter.is_finite() && self.jitter >= 0.0) {
            return Err("--jitter must not be negative".into());
        }
        if !(self.refuse_share.is_finite() && (0.0..=1.0).contains(&self.refuse_share)) {
            return Err("--refuse-share must be between 0 and 1".into());
        }
        if self.bulk && self.unit != BucketUnit::Records {
            return Err("--bulk counts documents: --unit must be records".into());
        }
        let mut config = SimSinkSettings::new(self.listen, self.capacity);
        config.unit = self.unit;
        config.bulk = self.bulk;
        config.keep_documents = self.keep_documents;
        config.refuse_share = self.refuse_share;
        if let Some(burst) = self.burst {
            config.burst = burst;
        }
        config.latency = LatencyModel {
            base: self.latency,
            knee: self.knee,
            factor: self.latency_factor,
            k: self.latency_k,
            linear: self.latency_linear,
            jitter: self.jitter,
        };
        config.concurrency_limit = match (self.defer_above, self.drop_above) {
            (Some(n), _) => Some((n, Action::Defer)),
            (None, Some(n)) => Some((n, Action::Drop)),
            (None, None) => None,
        };
        config.reject_field = self.reject_field.clone();
        config.retry_after = self.retry_after;
        Ok(config)
    }
}

/// Runs the emulator until SIGINT/SIGTERM, then prints its stats as JSON on stdout.
/// Returns the exit code: 0, 1 when it cannot listen, 2 for bad flags.
pub async fn run(args: SimSinkArgs) -> u8 {
    let config = match args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice sim-sink: {e}");
            return 2;
        }
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => match crate::tls::server_config(cert, key) {
            Ok(tls) => Some(tls),
            Err(e) => {
                eprintln!("sluice sim-sink: --tls-cert/--tls-key: {e}");
                return 2;
            }
        },
        _ => None,
    };
    let sink = match SimSink::start_on(config.clone(), tls).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice sim-sink: cannot listen on {}: {e}", config.listen);
            return 1;
        }
    };
    let url = if config.bulk {
        format!("{}/_bulk", sink.base_url())
    } else {
        sink.ingest_url()
    };
    eprintln!(
        "sluice sim-sink: {} {} (burst {}) at {url}; GET /stats, POST /outage",
        config.capacity,
        config.unit.per_second(),
        config.burst,
    );
    let shutdown = crate::shutdown::on_signals();
    shutdown.cancelled().await;
    let stats = sink.stats();
    let _ = sink.stop().await;
    // Whoever started it may be gone by now: nothing to tell then, and no panic.
    let _ = writeln!(
        std::io::stdout(),
        "{}",
        serde_json::to_string(&stats).expect("stats serialize")
    );
    0
}

#[cfg(test)]
mod tests;
