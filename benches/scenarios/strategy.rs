//! The ways a user could drain a backlog into a throttled endpoint: four baselines written
//! as a user would write them, and sluice itself. Each runs in a process of its own (the
//! baselines re-execute this bench binary with `--strategy NAME`), so its peak RSS is its
//! own and it cannot borrow the emulator's runtime.
//!
//! Every baseline posts batches of `BATCH` records in sluice's envelope, all batches at
//! once (one task each), and differs only in what it does when a request fails. How each
//! is told the capacity in the sink's unit: see `limit.rs`.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use governor::{Quota, RateLimiter};
use rand::RngExt;
use serde_json::{Value, json};
use sluice::stats::LatencyHistogram;

use crate::limit::Limit;

/// Records per request of the baselines (a common choice; sluice sends a tick's worth).
pub const BATCH: usize = 100;
/// The fixed-interval baseline's pause.
const FIXED_INTERVAL: Duration = Duration::from_secs(1);
/// The exponential baseline: full jitter over 100 ms doubling, at most 10 s.
const BACKOFF_BASE: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Everything at once; a refused request is sent again at once.
    Naive,
    /// Everything at once; a refused request is sent again after a fixed second.
    FixedInterval,
    /// Everything at once; a refused request waits out a full-jitter exponential backoff
    /// (Retry-After ignored, as most hand-written retry loops do).
    Exponential,
    /// A client-side token bucket (governor) at the sink's capacity in the sink's unit,
    /// one second of burst; a refused request goes back through the bucket.
    TokenBucket,
    /// `sluice run` told the sink's capacity (as records per second, see `limit.rs`),
    /// every other setting left at its default.
    Sluice,
    /// `sluice run` asking for four times the capacity: it has to learn the real one
    /// from the 429s and their Retry-After.
    SluiceOverAsked,
}

impl Strategy {
    pub const ALL: [Strategy; 6] = [
        Strategy::Naive,
        Strategy::FixedInterval,
        Strategy::Exponential,
        Strategy::TokenBucket,
        Strategy::Sluice,
        Strategy::SluiceOverAsked,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::FixedInterval => "fixed-interval",
            Strategy::Exponential => "exponential",
            Strategy::TokenBucket => "token-bucket",
            Strategy::Sluice => "sluice",
            Strategy::SluiceOverAsked => "sluice-4x",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Strategy::Naive => "(a) naive: all at once, retry at once",
            Strategy::FixedInterval => "(b) retry every 1 s",
            Strategy::Exponential => "(c) exponential backoff, full jitter",
            Strategy::TokenBucket => "(d) token bucket at capacity",
            Strategy::Sluice => "(e) sluice, rate = capacity",
            Strategy::SluiceOverAsked => "(e′) sluice, rate = 4 × capacity",
        }
    }

    /// Those `SLUICE_BENCH_STRATEGIES` names (comma-separated), or all.
    pub fn chosen() -> Vec<Strategy> {
        match std::env::var("SLUICE_BENCH_STRATEGIES") {
            Ok(names) => names
                .split(',')
                .map(|n| {
                    Strategy::from_name(n.trim())
                        .unwrap_or_else(|| panic!("SLUICE_BENCH_STRATEGIES: no strategy {n:?}"))
                })
                .collect(),
            Err(_) => Strategy::ALL.to_vec(),
        }
    }

    fn from_name(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The command that drains `input` (NDJSON with an `id` field) into `url`, a sink
    /// limited by `limit`; `dir` is its scratch folder.
    pub fn command(self, input: &Path, url: &str, limit: &Limit, dir: &Path) -> Command {
        let (rate, max_batch) = (limit.records_per_second, limit.max_batch);
        match self {
            Strategy::Sluice => sluice_run(input, url, rate, max_batch, dir),
            Strategy::SluiceOverAsked => sluice_run(input, url, 4.0 * rate, max_batch, dir),
            _ => {
                let mut cmd = Command::new(std::env::current_exe().expect("own path"));
                cmd.args(["--strategy", self.name(), "--url", url])
                    .args(limit.args())
                    .arg("--input")
                    .arg(input);
                cmd
            }
        }
    }
}

/// `sluice run` at `rate` (and `max_batch`), every key but the source, the sink and the
/// rate at its default.
pub fn sluice_run(
    input: &Path,
    url: &str,
    rate: f64,
    max_batch: Option<usize>,
    dir: &Path,
) -> Command {
    let config = dir.join("sluice.toml");
    let max_batch = max_batch.map_or(String::new(), |n| format!("max_batch = {n}\n"));
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = {input:?}\ncheckpoint = {:?}\n\n\
             [sink]\nkind = \"http\"\nurl = \"{url}\"\nkey = \"/id\"\n{max_batch}\n\
             [sink.dead_letters]\npath = {:?}\n\n\
             [rate]\nrecords_per_second = {rate}\n",
            dir.join("checkpoint"),
            dir.join("dead.ndjson"),
        ),
    )
    .unwrap();
    let mut cmd = crate::process::sluice();
    cmd.args(["run", "--until-empty", "--summary", "json", "--config"])
        .arg(config);
    cmd
}

/// What a baseline saw from its side, printed as JSON on stdout.
fn client_report(requests: u64, latency: &LatencyHistogram) -> Value {
    let ms = |q: f64| latency.quantile(q).map(|d| d.as_secs_f64() * 1000.0);
    json!({"requests": requests, "write_p50_ms": ms(0.5), "write_p95_ms": ms(0.95)})
}

/// Entry point of a baseline's process:
/// `--strategy NAME --url URL --unit UNIT --capacity N --input PATH`.
pub fn child_main(args: &[String]) {
    let flag = |name: &str| {
        let i = args.iter().position(|a| a == name).expect(name);
        args[i + 1].clone()
    };
    let strategy = Strategy::from_name(&flag("--strategy")).expect("a baseline's name");
    let url = flag("--url");
    let capacity: f64 = flag("--capacity").parse().expect("capacity");
    let limit = Limit::from_args(&flag("--unit"), capacity);
    let input = std::fs::read_to_string(flag("--input")).expect("input");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let report = runtime.block_on(drain(strategy, url, limit, &input));
    println!("{report}");
}

struct Client {
    http: reqwest::Client,
    url: String,
    requests: AtomicU64,
    latency: LatencyHistogram,
}

impl Client {
    /// Posts one batch; true if the sink took it.
    async fn post(&self, body: &str) -> bool {
        self.requests.fetch_add(1, Relaxed);
        let began = Instant::now();
        let sent = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await;
        let ok = match sent {
            Ok(response) => {
                let status = response.status();
                let _ = response.bytes().await;
                assert!(
                    status.is_success() || status.as_u16() == 429 || status.is_server_error(),
                    "the sink refused a batch for good: {status}"
                );
                status.is_success()
            }
            Err(_) => false,
        };
        self.latency.record(began.elapsed());
        ok
    }
}

async fn drain(strategy: Strategy, url: String, limit: Limit, input: &str) -> Value {
    let client = Arc::new(Client {
        http: sluice::tls::http_client().build().unwrap(),
        url,
        requests: AtomicU64::new(0),
        latency: LatencyHistogram::default(),
    });
    let per_second =
        std::num::NonZeroU32::new(limit.capacity.round() as u32).expect("capacity ≥ 1");
    let bucket = Arc::new(RateLimiter::direct(Quota::per_second(per_second)));
    let lines: Vec<&str> = input.lines().collect();
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in lines.chunks(BATCH) {
        let body = envelope(chunk);
        let cost = limit.unit.cost(chunk.len() as u64, body.len() as u64);
        let n = std::num::NonZeroU32::new(cost as u32).unwrap();
        let (client, bucket) = (client.clone(), bucket.clone());
        tasks.spawn(async move {
            let mut attempt = 0;
            loop {
                if strategy == Strategy::TokenBucket {
                    bucket
                        .until_n_ready(n)
                        .await
                        .expect("a batch fits the burst");
                }
                if client.post(&body).await {
                    return;
                }
                attempt += 1;
                match strategy {
                    Strategy::FixedInterval => tokio::time::sleep(FIXED_INTERVAL).await,
                    Strategy::Exponential => tokio::time::sleep(full_jitter(attempt)).await,
                    _ => {}
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a batch task");
    }
    client_report(client.requests.load(Relaxed), &client.latency)
}

/// AWS's "full jitter": a uniform pick in [0, min(cap, base × 2^attempt)).
fn full_jitter(attempt: u32) -> Duration {
    let ceiling = BACKOFF_BASE
        .saturating_mul(1 << attempt.min(20))
        .min(BACKOFF_CAP);
    ceiling.mul_f64(rand::rng().random_range(0.0..1.0))
}

/// A JSON array of `{"key", "record"}` objects, keyed by each record's `id`.
fn envelope(lines: &[&str]) -> String {
    let items: Vec<Value> = lines
        .iter()
        .map(|line| {
            let record: Value = serde_json::from_str(line).expect("the backlog is JSON");
            json!({"key": record["id"].as_str().expect("an id"), "record": record})
        })
        .collect();
    Value::Array(items).to_string()
}
