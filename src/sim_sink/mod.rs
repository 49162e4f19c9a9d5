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
pub mod latency;
pub mod ledger;
pub mod measure;
pub mod outage;
pub mod overload;
mod server;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use clap::{Args, ValueEnum};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use capacity::Unit;
pub use latency::LatencyModel;
pub use ledger::{SimStats, Window};
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
pub struct SimSinkConfig {
    pub listen: SocketAddr,
    /// What the bucket counts: records (the default), requests or body bytes.
    pub unit: Unit,
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
}

impl SimSinkConfig {
    /// On `listen`, at `capacity` records per second with one second's worth of burst,
    /// answering in 5 ms up to 30 concurrent requests.
    pub fn new(listen: SocketAddr, capacity: f64) -> Self {
        SimSinkConfig {
            listen,
            unit: Unit::Records,
            capacity,
            burst: capacity.ceil().max(1.0) as u32,
            latency: LatencyModel::default(),
            concurrency_limit: None,
            reject_field: None,
            retry_after: RetryAfterStyle::Millis,
            bulk: false,
        }
    }
}

/// Counts each connection the listener accepts.
fn counter<Io>(shared: Arc<server::Shared>) -> impl FnMut(&mut Io) + Send + 'static {
    move |_| shared.ledger().connected()
}

/// A running emulator.
pub struct SimSink {
    addr: SocketAddr,
    /// "http", or "https" when started with a certificate.
    scheme: &'static str,
    shared: Arc<server::Shared>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl SimSink {
    pub async fn start(config: SimSinkConfig) -> std::io::Result<SimSink> {
        Self::start_on(config, None).await
    }

    /// Serves HTTPS with `tls` (a certificate and its key).
    pub async fn start_tls(
        config: SimSinkConfig,
        tls: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<SimSink> {
        Self::start_on(config, Some(tls)).await
    }

    async fn start_on(
        config: SimSinkConfig,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> std::io::Result<SimSink> {
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(server::Shared::new(&config));
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

    /// Every key stored, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.shared.ledger().keys()
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
    #[arg(long, value_enum, default_value_t = Unit::Records)]
    unit: Unit,
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
    fn config(&self) -> Result<SimSinkConfig, String> {
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
        if self.bulk && self.unit != Unit::Records {
            return Err("--bulk counts documents: --unit must be records".into());
        }
        let mut config = SimSinkConfig::new(self.listen, self.capacity);
        config.unit = self.unit;
        config.bulk = self.bulk;
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
    let mut shutdown = crate::shutdown::on_signals();
    shutdown.requested().await;
    let stats = sink.stats();
    let _ = sink.stop().await;
    println!(
        "{}",
        serde_json::to_string(&stats).expect("stats serialize")
    );
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A slow refill (one record per second) keeps the arithmetic immune to how long the
    /// requests take on a busy machine.
    async fn start(burst: u32, style: RetryAfterStyle) -> SimSink {
        let mut config = SimSinkConfig::new("127.0.0.1:0".parse().unwrap(), 1.0);
        config.burst = burst;
        config.reject_field = Some("poison".into());
        config.retry_after = style;
        config.latency.base = Duration::from_millis(1);
        SimSink::start(config).await.unwrap()
    }

    fn batch(keys: &[&str]) -> Value {
        Value::Array(
            keys.iter()
                .map(|k| json!({"key": k, "source": "t", "record": {"id": k}}))
                .collect(),
        )
    }

    #[tokio::test]
    async fn stores_by_key_throttles_beyond_capacity_and_reports() {
        let sim = start(10, RetryAfterStyle::Millis).await;
        let http = reqwest::Client::new();
        let post = |body: Value| http.post(sim.ingest_url()).json(&body).send();
        let poison = json!([{"key": "p", "record": {"poison": true}}]);
        // Body bytes of the readable requests, in the order sent.
        let sizes: Vec<u64> = [
            batch(&["a", "b", "c"]),
            batch(&["c", "d"]),
            batch(&["e", "f", "g", "h", "i", "j"]),
            poison.clone(),
        ]
        .iter()
        .map(|b| serde_json::to_vec(b).unwrap().len() as u64)
        .collect();

        let r = post(batch(&["a", "b", "c"])).await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            json!({"inserted": 3, "duplicates": 0})
        );
        let r = post(batch(&["c", "d"])).await.unwrap();
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            json!({"inserted": 1, "duplicates": 1})
        );
        // Five records of the ten-record bucket are spent: six do not fit.
        let r = post(batch(&["e", "f", "g", "h", "i", "j"])).await.unwrap();
        assert_eq!(r.status(), 429);
        let ms: u64 = r.headers()["x-ms-retry-after-ms"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            (500..=1000).contains(&ms),
            "{ms} ms for one missing record at 1 rec/s"
        );
        assert_eq!(r.headers()["retry-after"], "1");

        let r = post(poison).await.unwrap();
        assert_eq!(r.status(), 422);
        let r = http
            .post(sim.ingest_url())
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let r = post(json!([{"record": {}}])).await.unwrap();
        assert_eq!(r.status(), 422);

        let s: SimStats = http
            .get(format!("http://{}/stats", sim.addr()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(s, sim.stats());
        assert_eq!(
            (s.requests, s.accepted, s.inserted, s.duplicates),
            (6, 5, 4, 1)
        );
        assert_eq!((s.rejected, s.rejected_records, s.malformed), (1, 6, 3));
        assert_eq!(s.records_received, 3 + 2 + 6 + 1);
        assert_eq!(
            (s.requests_accepted, s.bytes_accepted),
            (2, sizes[0] + sizes[1])
        );
        assert_eq!(s.bytes_received, sizes.iter().sum::<u64>());
        assert_eq!(s.windows.iter().map(|w| w.accepted).sum::<u64>(), 5);
        assert_eq!(s.windows.iter().map(|w| w.requests).sum::<u64>(), 6);
        assert_eq!(sim.keys(), ["a", "b", "c", "d"]);
        sim.stop().await.unwrap();
    }

    #[tokio::test]
    async fn ndjson_bodies_and_ratelimit_answers() {
        let sim = start(2, RetryAfterStyle::Ratelimit).await;
        let http = reqwest::Client::new();
        let body = "{\"key\":\"1\",\"record\":{}}\n{\"key\":\"2\",\"record\":{}}\n";
        let send = || {
            http.post(sim.ingest_url())
                .header("content-type", "application/x-ndjson")
                .body(body)
                .send()
        };
        assert_eq!(send().await.unwrap().status(), 200);
        let r = send().await.unwrap();
        assert_eq!(r.status(), 429);
        // Two records missing at one per second.
        assert_eq!(r.headers()["ratelimit"], "\"sim\";r=0;t=2");
        assert_eq!(
            r.headers()["ratelimit-policy"],
            "\"sim\";q=1;w=1;qu=\"records\""
        );
        assert!(r.headers().get("retry-after").is_none());
        sim.stop().await.unwrap();
    }

    /// Requests of `keys.len()` records each until the first 429; returns the requests
    /// taken and the 429's headers.
    async fn until_throttled(sim: &SimSink, keys: usize) -> (u64, reqwest::header::HeaderMap) {
        let http = reqwest::Client::new();
        for taken in 0.. {
            let ids: Vec<String> = (0..keys).map(|k| format!("{taken:04}-{k:04}")).collect();
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            let r = http
                .post(sim.ingest_url())
                .json(&batch(&ids))
                .send()
                .await
                .unwrap();
            if r.status() == 429 {
                return (taken, r.headers().clone());
            }
            assert_eq!(r.status(), 200);
        }
        unreachable!()
    }

    #[tokio::test]
    async fn the_bucket_counts_requests_or_body_bytes_and_the_policy_names_it() {
        // Requests: a burst of 3 takes three requests however many records they carry.
        let mut config = SimSinkConfig::new("127.0.0.1:0".parse().unwrap(), 1.0);
        config.unit = Unit::Requests;
        config.burst = 3;
        config.retry_after = RetryAfterStyle::Ratelimit;
        let sim = SimSink::start(config.clone()).await.unwrap();
        let (taken, headers) = until_throttled(&sim, 50).await;
        assert_eq!(taken, 3);
        assert_eq!(headers["ratelimit"], "\"sim\";r=0;t=1");
        assert_eq!(
            headers["ratelimit-policy"],
            "\"sim\";q=1;w=1;qu=\"requests\""
        );
        let s = sim.stats();
        assert_eq!((s.requests_accepted, s.accepted, s.rejected), (3, 150, 1));
        sim.stop().await.unwrap();

        // Bytes: a burst of 1,000 body bytes at 2 B/s.
        let one_record = serde_json::to_vec(&batch(&["0000-0000"])).unwrap().len() as u64;
        config.unit = Unit::Bytes;
        config.capacity = 2.0;
        config.burst = 1000;
        let sim = SimSink::start(config.clone()).await.unwrap();
        let (taken, headers) = until_throttled(&sim, 1).await;
        assert_eq!(taken, 1000 / one_record);
        assert_eq!(
            headers["ratelimit-policy"],
            "\"sim\";q=2;w=1;qu=\"content-bytes\""
        );
        let s = sim.stats();
        assert_eq!(s.bytes_accepted, taken * one_record);
        assert_eq!(s.bytes_received, (taken + 1) * one_record);
        // A body over the burst is refused with the time to fill the bucket: the bytes
        // taken so far, at 2 B/s.
        let big: Vec<String> = (0..100).map(|k| format!("big-{k:05}")).collect();
        let big: Vec<&str> = big.iter().map(String::as_str).collect();
        let r = reqwest::Client::new()
            .post(sim.ingest_url())
            .json(&batch(&big))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 429);
        let fill = (taken * one_record).div_ceil(2);
        assert_eq!(
            r.headers()["ratelimit"],
            format!("\"sim\";r=0;t={fill}").as_str()
        );
        sim.stop().await.unwrap();
    }

    #[test]
    fn the_unit_flag_defaults_to_records() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: SimSinkArgs,
        }
        let config = |argv: &[&str]| {
            let cli = Cli::try_parse_from([&["sim-sink"], argv].concat()).unwrap();
            cli.args.config().unwrap()
        };
        assert_eq!(config(&[]).unit, Unit::Records);
        let c = config(&["--unit", "requests", "--capacity", "20", "--burst", "10"]);
        assert_eq!((c.unit, c.capacity, c.burst), (Unit::Requests, 20.0, 10));
        assert_eq!(config(&["--unit", "bytes"]).unit, Unit::Bytes);
    }

    #[tokio::test]
    async fn outages_answer_503_or_hold_the_request() {
        let sim = start(100, RetryAfterStyle::None).await;
        let http = reqwest::Client::new();
        let switch = |seconds: f64, mode: &str| {
            http.post(format!("http://{}/outage", sim.addr()))
                .json(&json!({"seconds": seconds, "mode": mode}))
                .send()
        };
        assert_eq!(switch(30.0, "503").await.unwrap().status(), 200);
        let r = http
            .post(sim.ingest_url())
            .json(&batch(&["a"]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
        assert!(r.headers().get("retry-after").is_none());
        switch(0.3, "hang").await.unwrap();
        let started = std::time::Instant::now();
        let r = http
            .post(sim.ingest_url())
            .json(&batch(&["a"]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
        assert!(started.elapsed() >= Duration::from_millis(250));
        switch(0.0, "503").await.unwrap();
        let r = http
            .post(sim.ingest_url())
            .json(&batch(&["a"]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!((sim.stats().unavailable, sim.stats().inserted), (2, 1));
        sim.stop().await.unwrap();
    }
}
