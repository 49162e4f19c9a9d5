//! Endpoints discovered while the worker runs: a file of URLs rewritten mid-run, and a DNS
//! name whose A records change, served by a small DNS responder the test starts (the
//! worker's resolver is pointed at it, not at the system's). The real binary drains a
//! file; emulators count what each took.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use hickory_resolver::proto::op::{Message, ResponseCode};
use hickory_resolver::proto::rr::rdata::A;
use hickory_resolver::proto::rr::{RData, Record, RecordType};
use sluice::sim_sink::latency::LatencyModel;
use sluice::sim_sink::{SimSink, SimSinkSettings};

const INTERVAL: Duration = Duration::from_millis(300);

struct Sims {
    rt: tokio::runtime::Runtime,
    sims: Vec<SimSink>,
}

impl Sims {
    fn start(rt: tokio::runtime::Runtime, listen: &[(SocketAddr, u64)]) -> Sims {
        let sims = listen
            .iter()
            .map(|(addr, ms)| {
                let mut cfg = SimSinkSettings::new(*addr, 1_000_000.0);
                cfg.burst = 1_000_000;
                cfg.latency = LatencyModel {
                    base: Duration::from_millis(*ms),
                    ..LatencyModel::default()
                };
                rt.block_on(SimSink::start(cfg)).unwrap()
            })
            .collect();
        Sims { rt, sims }
    }

    /// Requests each emulator received and those it answered 200.
    fn requests(&self) -> Vec<(u64, u64)> {
        let _g = self.rt.enter();
        self.sims
            .iter()
            .map(|s| {
                let st = s.stats();
                (st.requests, st.requests_accepted)
            })
            .collect()
    }

    fn took(&self, i: usize) -> u64 {
        self.requests()[i].1
    }

    /// Polls until emulator `i` has taken a request; the time it took.
    fn wait_for(&self, i: usize, within: Duration) -> Duration {
        let start = Instant::now();
        let before = self.took(i);
        while self.took(i) == before {
            assert!(
                start.elapsed() < within,
                "endpoint {i} got nothing in {within:?}: {:?}",
                self.requests()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        start.elapsed()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn config(dir: &Path, urls: &str, discovery: &str, records: usize) {
    write_records(&dir.join("in.ndjson"), records, &[]);
    std::fs::write(
        dir.join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n\
             [sink]\nkind = \"http\"\nkey = \"/id\"\nmax_batch = 10\ntimeout = \"5s\"\nurls = {urls}\n\n\
             [sink.balance]\nstrategy = \"round-robin\"\n\n\
             [sink.discovery]\ninterval = \"{}ms\"\n{discovery}\n\n\
             [sink.dead_letters]\npath = \"dead.ndjson\"\n\n\
             [rate]\nrecords_per_second = 1000\ntick = \"50ms\"\n\n\
             [concurrency]\nmax = 8\n",
            INTERVAL.as_millis()
        ),
    )
    .unwrap();
}

/// Every record written once, none twice (nothing in flight to a removed endpoint was
/// lost and sent again), none dead-lettered.
fn assert_all_once(out: &std::process::Output, records: u64) {
    assert!(out.status.success(), "{}", stderr(out));
    let s = summary(out);
    assert_eq!(s["written"], records, "{s}");
    assert_eq!(s["duplicates"], 0, "{s}");
    assert_eq!(s["dead_lettered"], 0, "{s}");
}

#[test]
fn endpoints_join_and_drain_as_the_file_changes() {
    let listen = |ms| (SocketAddr::from(([127, 0, 0, 1], 0)), ms);
    // C answers slowly, so that it has batches in flight when it is removed.
    let sims = Sims::start(runtime(), &[listen(10), listen(10), listen(300)]);
    let url = |i: usize| sims.sims[i].ingest_url();
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("endpoints.txt");
    std::fs::write(&list, format!("{}\n{}\n", url(0), url(2))).unwrap();
    config(dir.path(), "[]", "file = \"endpoints.txt\"", 4_000);
    let child = worker(dir.path(), true);
    sims.wait_for(0, Duration::from_secs(20));
    sims.wait_for(2, Duration::from_secs(20));
    assert_eq!(sims.took(1), 0, "B is not listed yet");

    // B joins, C leaves (written whole, then renamed over the list).
    let next = dir.path().join("endpoints.next");
    std::fs::write(&next, format!("# A and B\n{}\n{}\n", url(0), url(1))).unwrap();
    std::fs::rename(&next, &list).unwrap();
    let joined = sims.wait_for(1, Duration::from_secs(10));
    // C was removed in the same round; its last batches are answered within 300 ms.
    std::thread::sleep(Duration::from_millis(600));
    let c_after = sims.requests()[2];
    let out = finish(child, Duration::from_secs(60));
    let end = sims.requests();
    eprintln!(
        "file: B's first request {joined:?} after the rewrite (interval {INTERVAL:?}); \
         (received, taken) per endpoint {end:?}"
    );
    assert!(
        joined <= INTERVAL * 10,
        "B joined after {joined:?}, interval {INTERVAL:?}"
    );
    assert_eq!(end[2], c_after, "C got nothing new once removed");
    assert_eq!(end[2].0, end[2].1, "every request C received was answered");
    assert_all_once(&out, 4_000);
}

/// A line `sink.urls` would refuse (`localhost:PORT/ingest` parses as a URL of scheme
/// "localhost") written into the file mid-run is skipped with a warning: the worker keeps
/// writing to the endpoints it has and to the good line beside it, and finishes (exit 0;
/// it stopped with exit 1 at its first write to the bad one).
#[test]
fn a_discovered_endpoint_the_configuration_would_refuse_is_skipped_with_a_warning() {
    let listen = |ms| (SocketAddr::from(([127, 0, 0, 1], 0)), ms);
    let sims = Sims::start(runtime(), &[listen(10), listen(10)]);
    let url = |i: usize| sims.sims[i].ingest_url();
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("endpoints.txt");
    std::fs::write(&list, format!("{}\n", url(0))).unwrap();
    config(dir.path(), "[]", "file = \"endpoints.txt\"", 3_000);
    let child = worker(dir.path(), true);
    sims.wait_for(0, Duration::from_secs(20));
    let bad = format!("localhost:{}/ingest", sims.sims[1].addr().port());
    let next = dir.path().join("endpoints.next");
    std::fs::write(&next, format!("{bad}\n{}\n", url(1))).unwrap();
    std::fs::rename(&next, &list).unwrap();
    sims.wait_for(1, Duration::from_secs(10));
    let out = finish(child, Duration::from_secs(60));
    let err = stderr(&out);
    assert!(
        err.contains("discovery file: endpoint skipped") && err.contains(&bad),
        "{err}"
    );
    assert_eq!(
        err.matches("discovery file: endpoint skipped").count(),
        1,
        "warned once while the line stays: {err}"
    );
    assert_all_once(&out, 3_000);
}

/// A DNS server answering A queries for any name with `addresses`, or SERVFAIL while it is
/// None; AAAA queries get no records.
fn dns_server(
    rt: &tokio::runtime::Runtime,
    addresses: Arc<Mutex<Option<Vec<Ipv4Addr>>>>,
) -> SocketAddr {
    let socket = rt
        .block_on(tokio::net::UdpSocket::bind("127.0.0.1:0"))
        .unwrap();
    let addr = socket.local_addr().unwrap();
    rt.spawn(async move {
        let mut buf = [0u8; 1500];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                return;
            };
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut answer = Message::response(query.metadata.id, query.metadata.op_code);
            answer.metadata.recursion_desired = query.metadata.recursion_desired;
            answer.metadata.recursion_available = true;
            answer.metadata.authoritative = true;
            answer.queries = query.queries.clone();
            match addresses.lock().unwrap().clone() {
                None => answer.metadata.response_code = ResponseCode::ServFail,
                Some(ips) => {
                    for q in query
                        .queries
                        .iter()
                        .filter(|q| q.query_type() == RecordType::A)
                    {
                        for ip in &ips {
                            answer.answers.push(Record::from_rdata(
                                q.name().clone(),
                                0,
                                RData::A(A(*ip)),
                            ));
                        }
                    }
                }
            }
            if let Ok(bytes) = answer.to_vec() {
                let _ = socket.send_to(&bytes, from).await;
            }
        }
    });
    addr
}

#[test]
fn a_dns_name_is_resolved_again_and_a_failure_keeps_the_last_addresses() {
    let rt = runtime();
    let ip = |n: u8| Ipv4Addr::new(127, 0, 0, n);
    // Three emulators on one port, at 127.0.0.1, .2 and .3: the addresses the name has.
    let port = free_port();
    let listen: Vec<(SocketAddr, u64)> = (1..=3)
        .map(|n| (SocketAddr::new(IpAddr::V4(ip(n)), port), 10))
        .collect();
    let addresses = Arc::new(Mutex::new(Some(vec![ip(1), ip(2)])));
    let nameserver = dns_server(&rt, addresses.clone());
    let sims = Sims::start(rt, &listen);
    let dir = tempfile::tempdir().unwrap();
    config(
        dir.path(),
        &format!("[\"dns+http://ingest.sluice.test:{port}/ingest\"]"),
        &format!("nameserver = \"{nameserver}\""),
        5_000,
    );
    let child = worker(dir.path(), true);
    sims.wait_for(0, Duration::from_secs(20));
    sims.wait_for(1, Duration::from_secs(20));
    assert_eq!(sims.took(2), 0, ".3 is not in DNS yet");

    *addresses.lock().unwrap() = Some(vec![ip(2), ip(3)]);
    let joined = sims.wait_for(2, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let first_after = sims.requests()[0];

    // The DNS server fails: the worker keeps writing to .2 and .3.
    *addresses.lock().unwrap() = None;
    let failing = sims.requests();
    std::thread::sleep(INTERVAL * 4);
    let still = sims.requests();
    let out = finish(child, Duration::from_secs(60));
    let end = sims.requests();
    eprintln!(
        "dns: .3's first request {joined:?} after the change (interval {INTERVAL:?}); \
         (received, taken) per endpoint {end:?}"
    );
    assert!(joined <= INTERVAL * 10, ".3 joined after {joined:?}");
    assert_eq!(end[0], first_after, ".1 got nothing new once gone from DNS");
    assert!(
        still[1].1 > failing[1].1 && still[2].1 > failing[2].1,
        "writes go on while DNS fails: {failing:?} -> {still:?}"
    );
    assert_all_once(&out, 5_000);
}
