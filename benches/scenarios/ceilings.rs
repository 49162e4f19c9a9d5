//! File → SQLite throughput with the limiter effectively off, next to the ceiling of a
//! plain batched insert of the same rows measured in the same run, and the worker's peak
//! RSS. Run: `cargo bench --bench drain_file_sqlite` (SLUICE_BENCH_SIZES=100000,1000000).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use sqlx::{Connection, QueryBuilder, Sqlite, SqliteConnection};

fn main() {
    let sizes: Vec<usize> = std::env::var("SLUICE_BENCH_SIZES")
        .unwrap_or_else(|_| "100000,1000000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("sizes are numbers"))
        .collect();
    println!("| records | raw insert rec/s | sluice rec/s | sluice / raw | sluice peak RSS MiB |");
    println!("|---:|---:|---:|---:|---:|");
    for n in sizes {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.ndjson");
        write_input(&input, n);
        let raw = raw_insert(&input, &dir.path().join("raw.db"));
        let (rate, rss_kib) = sluice(dir.path(), n);
        println!(
            "| {n} | {raw:.0} | {rate:.0} | {:.2} | {:.1} |",
            rate / raw,
            rss_kib as f64 / 1024.0
        );
    }
}

fn write_input(path: &Path, n: usize) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..n {
        writeln!(
            f,
            "{{\"id\":\"ord-{i:08}\",\"customer\":\"c-{:04}\",\"amount\":{}.{:02},\"currency\":\"EUR\"}}",
            i % 2000,
            i % 500,
            i % 100
        )
        .unwrap();
    }
}

/// The ceiling: what a hand-written loop does with the same file and table shape —
/// parse each line, take its key, multi-row INSERT 1,000 rows per transaction.
fn raw_insert(input: &Path, db: &Path) -> f64 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut conn = SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", db.display())).await.unwrap();
        sqlx::query("PRAGMA journal_mode = WAL").execute(&mut conn).await.unwrap();
        sqlx::query("PRAGMA synchronous = NORMAL").execute(&mut conn).await.unwrap();
        sqlx::query("CREATE TABLE records (key TEXT PRIMARY KEY, payload TEXT NOT NULL, source TEXT, ingested_at TEXT)")
            .execute(&mut conn)
            .await
            .unwrap();
        let started = Instant::now();
        let text = std::fs::read_to_string(input).unwrap();
        let rows: Vec<(String, &str, String)> = text
            .lines()
            .enumerate()
            .map(|(i, line)| {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                (v["id"].as_str().unwrap().to_string(), line, format!("in:{i}"))
            })
            .collect();
        for chunk in rows.chunks(1000) {
            let mut tx = conn.begin().await.unwrap();
            let mut q = QueryBuilder::<Sqlite>::new("INSERT INTO records (key, payload, source) ");
            q.push_values(chunk, |mut b, (k, p, s)| {
                b.push_bind(k.as_str()).push_bind(*p).push_bind(s.as_str());
            });
            q.push(" ON CONFLICT(key) DO NOTHING");
            q.build().execute(&mut *tx).await.unwrap();
            tx.commit().await.unwrap();
        }
        rows.len() as f64 / started.elapsed().as_secs_f64()
    })
}

/// Runs the release worker over the file; returns (records/s, peak RSS in KiB).
///
/// The peak is the child's own VmHWM, polled until it exits: rusage's ru_maxrss would
/// include this bench process's memory, which the child inherits at spawn.
fn sluice(dir: &Path, n: usize) -> (f64, u64) {
    std::fs::write(
        dir.join("sluice.toml"),
        "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\nkey = \"/id\"\nmax_batch = 1000\n[rate]\nrecords_per_second = 1000000000\ntick = \"200ms\"\n[concurrency]\nmax = 4\n",
    )
    .unwrap();
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .current_dir(dir)
        .args([
            "run",
            "-c",
            "sluice.toml",
            "--until-empty",
            "--summary",
            "json",
        ])
        .env("SLUICE_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0;
    while child.try_wait().unwrap().is_none() {
        if let Some(kib) = std::fs::read_to_string(&status_file)
            .ok()
            .as_deref()
            .and_then(vm_hwm_kib)
        {
            peak_kib = peak_kib.max(kib);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "sluice failed");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["written"].as_u64(), Some(n as u64));
    (n as f64 / elapsed, peak_kib)
}

fn vm_hwm_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
