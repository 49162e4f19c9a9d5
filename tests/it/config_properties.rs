//! Property: whatever value a key is given, loading the configuration either refuses it
//! (exit 2) with the key named, or yields a configuration whose parts can all be built —
//! never a panic. Runs in-process against `Config::load`, not by spawning the binary.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use sluice::config::{Config, Overrides};
use sluice::control::cadence::Cadence;
use sluice::control::lease_table::{LeaseTable, PoolDefinition, WorkerLimits};
use sluice::stats::Stats;
use sluice::write::backpressure::Backpressure;

#[derive(Clone, Copy)]
enum Type {
    Float,
    Count,
    Duration,
}

/// Every numeric key, the table it sits in, and which base configurations read it.
const KEYS: &[(&str, Type)] = &[
    ("rate.records_per_second", Type::Float),
    ("rate.tick", Type::Duration),
    ("retry.min_delay", Type::Duration),
    ("retry.max_delay", Type::Duration),
    ("retry.factor", Type::Float),
    ("retry.max_attempts", Type::Count),
    ("retry.budget_ratio", Type::Float),
    ("retry.budget_min_per_second", Type::Float),
    ("retry.budget_window", Type::Duration),
    ("concurrency.max", Type::Count),
    ("concurrency.initial", Type::Count),
    ("concurrency.min", Type::Count),
    ("concurrency.target_latency", Type::Duration),
    ("concurrency.percentile", Type::Float),
    ("concurrency.window", Type::Count),
    ("concurrency.increase", Type::Float),
    ("concurrency.backoff_ratio", Type::Float),
    ("concurrency.smoothing", Type::Float),
    ("concurrency.tolerance", Type::Float),
    ("concurrency.queue", Type::Float),
    ("shutdown.grace", Type::Duration),
    ("throttle.hold", Type::Float),
    ("throttle.beta", Type::Float),
    ("throttle.min_multiplier", Type::Float),
    ("throttle.probe_every", Type::Duration),
    ("throttle.probe_gain", Type::Float),
    ("throttle.pause_jitter", Type::Float),
    ("throttle.max_pause", Type::Duration),
    ("leases.capacity", Type::Float),
    ("leases.partitions", Type::Count),
    ("leases.ttl", Type::Duration),
    ("leases.reserved", Type::Float),
    ("leases.idle_grace", Type::Duration),
    ("source.max_record_bytes", Type::Count),
    ("source.rotate_wait", Type::Duration),
    ("sink.max_batch", Type::Count),
    ("sink.max_batch_bytes", Type::Count),
    ("sink.timeout", Type::Duration),
    ("sink.balance.decay", Type::Duration),
    ("sink.max_connections", Type::Count),
    ("source.assignment_timeout", Type::Duration),
];

/// 0, −1, tiny, huge, NaN/inf where a float, empty string, wrong type.
fn values(t: Type) -> &'static [&'static str] {
    match t {
        Type::Float => &[
            "0",
            "-1",
            "1e-300",
            "5e-324",
            "1e300",
            "nan",
            "inf",
            "-inf",
            "\"\"",
            "true",
            "[1]",
            "0.5",
            "2",
            "0.99999999",
        ],
        Type::Count => &[
            "0",
            "-1",
            "1",
            "9223372036854775807",
            "4294967296",
            "1.5",
            "\"\"",
            "true",
            "[1]",
            "3",
        ],
        Type::Duration => &[
            "\"0s\"",
            "\"-1s\"",
            "\"1ns\"",
            "\"584942417355years\"",
            "\"100000years\"",
            "\"\"",
            "\"nan\"",
            "1",
            "true",
            "\"2s\"",
        ],
    }
}

/// Base configurations, one per kind of sink, with the keys their kinds do not read (those
/// are refused as another kind's; `config::kinds` has its own tests). `{dir}` is the case's
/// directory (an input file lives there).
const BASES: &[(&str, &[&str])] = &[
    // file → sqlite, leases in PostgreSQL.
    (
        "[source]\nkind = \"file\"\npath = \"{dir}/in.ndjson\"\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://{dir}/out.db\"\nkey = \"/id\"\n[leases]\nstore = \"postgres://u@127.0.0.1/db\"\npool = \"p\"\ncapacity = 600\npartitions = 6\n",
        &[
            "sink.timeout",
            "sink.balance.decay",
            "sink.max_connections",
            "source.assignment_timeout",
        ],
    ),
    // file → http with dead letters in a file.
    (
        "[source]\nkind = \"file\"\npath = \"{dir}/in.ndjson\"\n[sink]\nkind = \"http\"\nurl = \"http://127.0.0.1:9/ingest\"\nkey = \"/id\"\n[sink.dead_letters]\npath = \"{dir}/dead.ndjson\"\n[concurrency]\nalgorithm = \"aimd\"\n",
        &[
            "leases.",
            "sink.max_connections",
            "source.assignment_timeout",
        ],
    ),
    // kafka → postgres, capacity shared by assignment.
    (
        "[source]\nkind = \"kafka\"\nbrokers = \"127.0.0.1:9\"\ntopic = \"orders\"\ngroup = \"g\"\n[sink]\nkind = \"postgres\"\nurl = \"postgres://u@127.0.0.1/db\"\nkey = \"/id\"\n[leases]\nstore = \"kafka\"\ncapacity = 600\n[concurrency]\nalgorithm = \"gradient2\"\n",
        &["sink.timeout"],
    ),
];

/// Sets `key = value` in `base`: in the key's table (replacing the key if it is there),
/// or in a new table.
fn with(base: &str, key: &str, value: &str) -> String {
    let (table, name) = key.rsplit_once('.').unwrap();
    let header = format!("[{table}]");
    let setting = format!("{name} = {value}");
    let mut lines: Vec<String> = base.lines().map(String::from).collect();
    let Some(start) = lines.iter().position(|l| *l == header) else {
        return format!("{base}{header}\n{setting}\n");
    };
    let end = (start + 1..lines.len())
        .find(|&i| lines[i].starts_with('['))
        .unwrap_or(lines.len());
    let prefix = format!("{name} = ");
    match (start + 1..end).find(|&i| lines[i].starts_with(&prefix)) {
        Some(i) => lines[i] = setting,
        None => lines.insert(start + 1, setting),
    }
    lines.join("\n") + "\n"
}

/// Loads `body`; on success builds what the worker builds from it. The message names a
/// mutated key, or the configuration is valid: anything else is a failure to report.
fn judge(dir: &Path, body: &str, keys: &[&str]) -> Result<(), String> {
    let path = dir.join("sluice.toml");
    std::fs::write(&path, body).unwrap();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        match Config::load(&path, &Overrides::default()) {
            Err(e) => Err(e.to_string()),
            Ok(config) => {
                build_everything(&config);
                Ok(())
            }
        }
    }));
    match outcome {
        Err(_) => Err(format!("panicked on\n{body}")),
        Ok(Err(message)) if !keys.iter().any(|k| message.contains(k)) => Err(format!(
            "refused without naming {keys:?}: {message}\n{body}"
        )),
        Ok(_) => Ok(()),
    }
}

/// The parts built from configuration values before and while the pipeline runs.
fn build_everything(config: &Config) {
    let mut limit = config.concurrency.build();
    limit.on_sample(sluice::control::limit::Sample {
        rtt: Duration::from_millis(5),
        inflight: 1,
        dropped: false,
    });
    let backoffs = config.backoffs();
    let mut rng = rand::rng();
    for backoff in [&backoffs.retry, &backoffs.outage, &backoffs.reconnect] {
        for attempt in 1..=config.retry.max_attempts.min(64) {
            backoff.delay(attempt, &mut rng);
            backoff.half_jitter(attempt, &mut rng);
        }
    }
    let cadence = Cadence::new(
        config.rate.records_per_second.cadence_rate(),
        config.rate.tick,
        FakeRelativeClock::default(),
    );
    cadence.quantum();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let pressure = Backpressure::new(
            &config.throttle,
            &config.retry,
            &config.rate,
            backoffs.outage,
            Arc::new(Stats::default()),
        );
        pressure.outage_wait(config.retry.max_attempts.min(64));
    });
    if let Some(l) = config.leases.as_ref().filter(|l| !l.by_assignment()) {
        let table = LeaseTable::new(
            PoolDefinition {
                capacity: l.capacity,
                partitions: l.partitions,
                generation: 1,
            },
            WorkerLimits {
                reserved: l.reserved,
                ceiling: config.rate_ceiling(),
                ttl: l.ttl,
                idle_grace: l.idle_grace,
                last_use: std::time::Duration::from_secs(2),
            },
        );
        table.partitions();
    }
}

fn case_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.ndjson"), "{\"id\":1}\n").unwrap();
    dir
}

fn base(i: usize, dir: &Path) -> String {
    BASES[i].0.replace("{dir}", &dir.display().to_string())
}

/// The numeric keys base `i` reads.
fn keys_of(i: usize) -> Vec<(&'static str, Type)> {
    KEYS.iter()
        .filter(|(key, _)| !BASES[i].1.iter().any(|skip| key.starts_with(skip)))
        .copied()
        .collect()
}

#[test]
fn every_numeric_key_with_every_odd_value_is_named_or_valid() {
    let dir = case_dir();
    let mut failures = Vec::new();
    let mut cases = 0;
    for b in 0..BASES.len() {
        let base = base(b, dir.path());
        for (key, t) in keys_of(b) {
            for value in values(t) {
                cases += 1;
                if let Err(e) = judge(dir.path(), &with(&base, key, value), &[key]) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(cases > 1000, "{cases}");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn unknown_keys_are_named() {
    let dir = case_dir();
    let mut failures = Vec::new();
    for b in 0..BASES.len() {
        let base = base(b, dir.path());
        for table in [
            "source",
            "sink",
            "rate",
            "retry",
            "concurrency",
            "shutdown",
            "throttle",
            "leases",
            "telemetry",
            "redact",
            "sink.balance",
        ] {
            let key = format!("{table}.surely_not_a_key");
            if let Err(e) = judge(dir.path(), &with(&base, &key, "1"), &["surely_not_a_key"]) {
                failures.push(e);
            }
        }
        let body = format!("{base}[surely_not_a_table]\nx = 1\n");
        if let Err(e) = judge(dir.path(), &body, &["surely_not_a_table"]) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// xorshift64*: the same sequence on every run, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

#[test]
fn random_combinations_of_odd_values_are_named_or_valid() {
    let dir = case_dir();
    let mut rng = Rng(0x5eed_c0ff_ee15_600d);
    let mut failures = Vec::new();
    for _ in 0..2000 {
        let b = rng.below(BASES.len());
        let mut body = base(b, dir.path());
        let applicable = keys_of(b);
        let algorithm = ["\"fixed\"", "\"aimd\"", "\"vegas\"", "\"gradient2\""][rng.below(4)];
        body = with(&body, "concurrency.algorithm", algorithm);
        let mut keys: Vec<&str> = Vec::new();
        for _ in 0..1 + rng.below(4) {
            let (key, t) = applicable[rng.below(applicable.len())];
            if keys.contains(&key) {
                continue;
            }
            let choices = values(t);
            body = with(&body, key, choices[rng.below(choices.len())]);
            keys.push(key);
        }
        if let Err(e) = judge(dir.path(), &body, &keys) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures, first:\n{}",
        failures.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Keys bound to each other (`min ≤ initial ≤ max`, a delay under its ceiling, a ttl
/// against the tick): every pair of odd values, under every concurrency algorithm.
#[test]
fn related_keys_in_every_combination_are_named_or_valid() {
    const PAIRS: &[(&str, &str)] = &[
        ("concurrency.min", "concurrency.max"),
        ("concurrency.initial", "concurrency.max"),
        ("concurrency.min", "concurrency.initial"),
        ("retry.min_delay", "retry.max_delay"),
        ("retry.min_delay", "throttle.max_pause"),
        ("retry.budget_min_per_second", "retry.budget_window"),
        ("rate.records_per_second", "rate.tick"),
        ("leases.ttl", "rate.tick"),
        ("leases.capacity", "leases.partitions"),
    ];
    let dir = case_dir();
    let base = base(0, dir.path());
    let kind = |key: &str| KEYS.iter().find(|(k, _)| *k == key).unwrap().1;
    let mut failures = Vec::new();
    for algorithm in ["fixed", "aimd", "vegas", "gradient2"] {
        let base = with(&base, "concurrency.algorithm", &format!("{algorithm:?}"));
        for (a, b) in PAIRS {
            for x in values(kind(a)) {
                for y in values(kind(b)) {
                    let body = with(&with(&base, a, x), b, y);
                    if let Err(e) = judge(dir.path(), &body, &[a, b]) {
                        failures.push(e);
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures, first:\n{}",
        failures.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
