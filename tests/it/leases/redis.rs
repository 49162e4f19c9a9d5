//! The Redis lease store, against redis-server processes of the tests' own (nothing kept
//! on disk): its steps one by one (exclusive partitions, fencing by generation, nothing
//! granted for a ttl after the server starts, after a pool it lost is defined again, or
//! under another server process), three workers sharing a pool across a restart (the pool
//! never exceeded, every record once), and credentials that exit 2.

use super::*;
use common::redis::RedisServer;
use sluice::lease::LeaseStore;
use sluice::lease::redis::RedisLeaseStore;

/// Polls `acquire` until it grants something; returns the partition and how long it took.
async fn first_grant(store: &RedisLeaseStore, member: &str, generation: u32) -> (u32, Duration) {
    let started = Instant::now();
    loop {
        if let Some(p) = store.acquire(member, generation).await.unwrap() {
            return (p, started.elapsed());
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "nothing granted in 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn the_redis_store_fences_generations_and_grants_nothing_for_a_ttl_after_a_restart() {
    let mut server = RedisServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ttl = Duration::from_secs(2);
    let store = RedisLeaseStore::new(&server.url(), "steps", ttl).unwrap();
    let other = RedisLeaseStore::new(&server.url(), "steps", ttl).unwrap();
    let before = rt.block_on(async {
        let d = store.define(100.0, 4).await.unwrap();
        assert_eq!((d.capacity, d.partitions, d.generation), (100.0, 4, 1));
        // Another worker's configuration does not change it.
        assert_eq!(other.define(300.0, 6).await.unwrap(), d);
        // The server started a moment ago: whatever leases it held before are still in
        // use somewhere until a ttl after that.
        assert_eq!(store.acquire("a", 1).await.unwrap(), None);
        assert_eq!(store.heartbeat("a", 0, true).await.unwrap().free, 0);
        let (p, waited) = first_grant(&store, "a", 1).await;
        eprintln!("first grant after {waited:?}");
        assert!(waited >= Duration::from_millis(1500), "{waited:?}");
        // Exclusive: four partitions, four grants, then none.
        let mut a = vec![p, store.acquire("a", 1).await.unwrap().unwrap()];
        let b = vec![
            other.acquire("b", 1).await.unwrap().unwrap(),
            other.acquire("b", 1).await.unwrap().unwrap(),
        ];
        assert_eq!(other.acquire("b", 1).await.unwrap(), None);
        let mut all: Vec<u32> = a.iter().chain(&b).copied().collect();
        all.sort();
        assert_eq!(all, vec![0, 1, 2, 3]);
        let view = store.heartbeat("a", 2, true).await.unwrap();
        assert_eq!((view.free, view.active_members), (0, 1));
        let view = other.heartbeat("b", 2, false).await.unwrap();
        assert_eq!((view.free, view.active_members), (0, 2));
        // Renewals keep only what the member holds.
        a.sort();
        let mut asked = a.clone();
        asked.push(b[0]);
        let mut kept = store.renew("a", &asked).await.unwrap();
        kept.sort();
        assert_eq!(kept, a);
        assert_eq!(store.leases().await.unwrap().len(), 4);
        assert_eq!(store.members().await.unwrap().len(), 2);
        // A resize fences the old generation: no renewal, and no grant while one of its
        // leases lives.
        let resized = store.resize(200.0, 4).await.unwrap();
        assert_eq!(resized.generation, 2);
        assert!(store.renew("a", &a).await.unwrap().is_empty());
        assert_eq!(store.acquire("a", 1).await.unwrap(), None, "old generation");
        assert_eq!(
            store.acquire("a", 2).await.unwrap(),
            None,
            "old leases live"
        );
        store.release("a", &a).await.unwrap();
        other.leave("b").await.unwrap();
        assert!(store.leases().await.unwrap().is_empty());
        first_grant(&store, "a", 2).await;
        resized.generation
    });
    // A restart: Redis kept nothing.
    server.restart();
    rt.block_on(async {
        assert_eq!(other.definition().await.unwrap(), None);
        // The worker that knew the pool defines it again, one generation on, and keeps
        // nothing: its old lease is gone with the server.
        assert!(store.renew("a", &[0, 1, 2, 3]).await.unwrap().is_empty());
        let d = other.definition().await.unwrap().unwrap();
        assert_eq!(
            (d.capacity, d.partitions, d.generation),
            (200.0, 4, before + 1)
        );
        let (_, waited) = first_grant(&store, "a", d.generation).await;
        eprintln!("first grant after the restart: {waited:?}");
        assert!(waited >= Duration::from_millis(1500), "{waited:?}");
    });
}

#[test]
fn a_pool_found_on_another_server_process_grants_nothing_for_a_ttl_but_renews() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ttl = Duration::from_secs(2);
    let store = RedisLeaseStore::new(&server.url(), "moved", ttl).unwrap();
    rt.block_on(async {
        store.define(100.0, 4).await.unwrap();
        let (held, _) = first_grant(&store, "a", 1).await;
        // As after a restart from a snapshot, or a failover: the pool is there, written
        // by another server process, which may have granted more than it shows.
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &server.port.to_string()])
            .args(["HSET", "sluice:lease:{moved}:def", "run_id", "another"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let view = store.heartbeat("a", 1, true).await.unwrap();
        assert_eq!(view.free, 0);
        let quiet = view.grants_in.expect("the store says when it grants again");
        assert!(
            quiet > Duration::from_millis(1500) && quiet <= ttl,
            "{quiet:?}"
        );
        assert_eq!(store.acquire("b", 1).await.unwrap(), None);
        // What a worker holds it keeps.
        assert_eq!(store.renew("a", &[held]).await.unwrap(), vec![held]);
        let (_, waited) = first_grant(&store, "b", 1).await;
        assert!(waited >= Duration::from_millis(1500), "{waited:?}");
    });
}

#[test]
fn bad_redis_credentials_exit_2_naming_the_lease_store() {
    let server = RedisServer::with(&["--requirepass", "s3cret"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let wrong = format!("redis://:wrong@127.0.0.1:{}/", server.port);
    rt.block_on(async {
        let store = RedisLeaseStore::new(&wrong, "p", Duration::from_secs(3)).unwrap();
        let e = store.define(100.0, 2).await.unwrap_err();
        assert!(e.fatal, "{e}");
        let none = RedisLeaseStore::new(&server.url(), "p", Duration::from_secs(3)).unwrap();
        let e = none.define(100.0, 2).await.unwrap_err();
        assert!(e.fatal, "{e}");
    });
    let dir = tempfile::tempdir().unwrap();
    write_records(&dir.path().join("in.ndjson"), 10, &[]);
    write_config(
        dir.path(),
        "in.ndjson",
        100.0,
        &format!("\n[leases]\nstore = {wrong:?}\npool = \"p\"\ncapacity = 100\npartitions = 2\n"),
    );
    let out = run_in(dir.path(), &["run", "-c", "sluice.toml", "--until-empty"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("lease store"), "{err}");
    assert!(!err.contains("wrong"), "the password is not echoed: {err}");
    // `check` names the store, masked, and says why it failed.
    let out = run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(text.contains("lease store redis://"), "{text}");
    assert!(
        !text.contains("wrong"),
        "the password is not echoed: {text}"
    );
}

#[test]
fn a_redis_restart_under_three_workers_never_exceeds_the_pool_and_loses_nothing() {
    let mut redis = RedisServer::start();
    std::thread::sleep(Duration::from_secs(5));
    let sim = Emulator::start();
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_lease_redis_restart");
    let total = 15_000;
    amqp_publish(&queue, total as usize);
    config(
        dir.path(),
        &queue,
        &unique("pool"),
        &redis.url(),
        0.0,
        &sim.url(),
    );
    let workers: Vec<Child> = (0..3).map(|_| worker(dir.path(), true)).collect();
    std::thread::sleep(Duration::from_secs(8));
    let restarted_at = sim.windows().len();
    redis.restart();
    let mut written = 0;
    for w in workers {
        let out = w.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        written += summary(&out)["written"].as_i64().unwrap();
    }
    assert_eq!(written, total, "every record written");
    let windows = sim.windows();
    assert_eq!(windows.iter().sum::<u64>(), total as u64, "and once");
    let start = first_busy(&windows);
    let seconds = per_second(&windows[start..]);
    eprintln!(
        "accepted per 1 s (sliding by 200 ms), restart at {:.1} s: {seconds:?}",
        (restarted_at - start) as f64 / 5.0
    );
    let steady = &seconds[15..seconds.len() - 5];
    let peak = *steady.iter().max().unwrap();
    assert!(
        peak <= 630,
        "the pool's 600 rec/s was exceeded: {peak} in {steady:?}"
    );
    let after = &seconds[restarted_at - start..];
    assert!(
        after.iter().any(|&n| n >= 540),
        "capacity came back after the restart: {after:?}"
    );
}
