//! While a worker runs: a producer that keeps writing to the topic, and the worker's log
//! read as it goes (what it said, and how often a line came).

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use super::brokers;

/// Generous: two cores are shared with other builds; counts are asserted, not speed.
pub const LIMIT: Duration = Duration::from_secs(120);

/// Writes `{"id": n}` records to `topic` at about `per_second` (round-robin over the
/// partitions by key) until stopped, ids from `first`; returns how many were acknowledged.
pub struct KafkaFlood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KafkaFlood {
    pub fn start(topic: &str, first: u64, per_second: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (topic, s, n) = (topic.to_string(), stop.clone(), sent.clone());
        let thread = std::thread::spawn(move || {
            let producer: BaseProducer = ClientConfig::new()
                .set("bootstrap.servers", brokers())
                .set("linger.ms", "5")
                .create()
                .unwrap();
            let started = Instant::now();
            let mut id = first;
            while !s.load(Ordering::Relaxed) {
                let due = first + started.elapsed().as_millis() as u64 * per_second / 1000;
                while id < due {
                    let body = format!("{{\"id\":{id},\"late\":true}}");
                    let key = id.to_string();
                    if producer
                        .send(BaseRecord::to(&topic).key(&key).payload(&body))
                        .is_ok()
                    {
                        id += 1;
                    } else {
                        producer.poll(Duration::from_millis(5));
                    }
                }
                producer.poll(Duration::from_millis(10));
            }
            producer.flush(Duration::from_secs(30)).unwrap();
            n.store(id - first, Ordering::Relaxed);
        });
        KafkaFlood {
            stop,
            sent,
            thread: Some(thread),
        }
    }

    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        self.sent.load(Ordering::Relaxed)
    }
}

/// Reads a worker's stderr on a thread: lines are kept, and lines containing the pattern
/// are counted.
pub fn watch_stderr(
    stderr: impl std::io::Read + Send + 'static,
    pattern: &'static str,
) -> (Arc<AtomicU64>, std::thread::JoinHandle<String>) {
    let seen = Arc::new(AtomicU64::new(0));
    let flag = seen.clone();
    let thread = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap_or_default();
            if line.contains(pattern) {
                flag.fetch_add(1, Ordering::SeqCst);
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    (seen, thread)
}

pub async fn wait_for(count: &AtomicU64, n: u64, what: &str) {
    let started = Instant::now();
    while count.load(Ordering::SeqCst) < n {
        assert!(started.elapsed() < LIMIT, "never saw: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each partition's bound as the worker logged it (`partition=0 end=1500`).
pub fn logged_ends(log: &str, partitions: usize) -> Vec<u64> {
    let mut ends = vec![None; partitions];
    for line in log
        .lines()
        .filter(|l| l.contains("up to its end as of now"))
    {
        let field = |name: &str| -> u64 {
            let at = line.find(&format!(" {name}=")).unwrap() + name.len() + 2;
            line[at..]
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        ends[field("partition") as usize] = Some(field("end"));
    }
    ends.into_iter()
        .map(|e| e.unwrap_or_else(|| panic!("a bound not logged: {log}")))
        .collect()
}

pub fn run_worker(config: &std::path::Path, args: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .current_dir(config.parent().unwrap())
        .env("SLUICE_LOG", "warn,sluice::source=info")
        .env_remove("SLUICE_RATE__RECORDS_PER_SECOND")
        .arg("run")
        .arg("--config")
        .arg(config)
        .args(["--summary", "json"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for the child off the async threads: its exit, stdout, and stderr if it was not
/// taken already.
pub async fn exit_of(mut child: std::process::Child) -> (std::process::ExitStatus, String) {
    let mut stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take();
    let (status, out, err) = tokio::time::timeout(
        LIMIT,
        tokio::task::spawn_blocking(move || {
            let err = std::thread::spawn(move || {
                let mut err = String::new();
                if let Some(mut e) = stderr {
                    std::io::Read::read_to_string(&mut e, &mut err).unwrap();
                }
                err
            });
            let mut out = String::new();
            std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
            (child.wait().unwrap(), out, err.join().unwrap())
        }),
    )
    .await
    .expect("the run ended")
    .unwrap();
    if !status.success() {
        eprintln!("{err}");
    }
    (status, out)
}

pub fn json_summary(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout.lines().last().expect("a summary")).unwrap()
}
