//! MySQL dead letters under the server's `max_allowed_packet` (1 MiB on a scratch server
//! of the test's own, so the shared server's setting is left alone): a batch's letters are
//! cut into statements as rows are, and a letter too large for any statement is stored cut
//! to fit, with its length and SHA-256 in its reason.

use crate::common;
use crate::mysql_support;

use mysql_support::{LIMIT, ScratchServer, file_config, write_lines};
use sha2::{Digest, Sha256};

const PACKET: &str = "--max-allowed-packet=1M";

/// 1,000 malformed lines of 20 KB in one batch (20 MB of letters) and 10 good ones:
/// every letter stored, the run ends (exit 0), and a rerun stores none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_letters_larger_than_the_packet_is_stored_in_pieces() {
    let server = ScratchServer::create_with(&[PACKET]).await;
    let pad = "x".repeat(20 * 1024);
    let lines: Vec<String> = (1..=1010)
        .map(|i| match i % 101 {
            0 => format!("{{\"id\":\"k{i}\"}}"),
            _ => format!("{{\"id\":\"k{i}\",\"pad\":\"{pad}"),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    write_lines(dir.path(), &lines);
    file_config(dir.path(), &server.url(), "records", "max_batch = 1010");
    let out = common::finish(common::worker(dir.path(), true), LIMIT);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let s = common::summary(&out);
    assert_eq!(
        (s["written"].as_i64(), s["dead_lettered"].as_i64()),
        (Some(10), Some(1000)),
        "{s}"
    );
    let stored = "SELECT COUNT(*) FROM sluice_dead_letters WHERE LENGTH(raw) > 20480";
    assert_eq!(server.count(stored).await, 1000);

    let again = tempfile::tempdir().unwrap();
    write_lines(again.path(), &lines);
    file_config(again.path(), &server.url(), "records", "max_batch = 1010");
    let out = common::finish(common::worker(again.path(), true), LIMIT);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(server.count(stored).await, 1000, "one letter per record");
    assert_eq!(server.count("SELECT COUNT(*) FROM records").await, 10);
}

/// A record of 2 MiB, twice the packet: dead-lettered (the promise of docs/sinks/mysql.md) with its first
/// bytes, its length and its SHA-256; its batch-mates are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_larger_than_the_packet_is_dead_lettered_cut_with_its_length_and_hash() {
    let server = ScratchServer::create_with(&[PACKET]).await;
    let big = format!("{{\"id\":\"big\",\"pad\":\"{}\"}}", "y".repeat(2 << 20));
    let mut lines: Vec<String> = (1..=5).map(|i| format!("{{\"id\":\"k{i}\"}}")).collect();
    lines.insert(2, big.clone());
    let dir = tempfile::tempdir().unwrap();
    write_lines(dir.path(), &lines);
    file_config(dir.path(), &server.url(), "records", "");
    let config = dir.path().join("sluice.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replacen("[source]\n", "[source]\nmax_record_bytes = 8388608\n", 1);
    std::fs::write(&config, text).unwrap();
    let out = common::finish(common::worker(dir.path(), true), LIMIT);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let s = common::summary(&out);
    assert_eq!(
        (s["written"].as_i64(), s["dead_lettered"].as_i64()),
        (Some(5), Some(1)),
        "{s}"
    );
    let mut conn = server.connect().await;
    let (key, raw, reason): (String, Vec<u8>, String) =
        sqlx::query_as("SELECT `key`, raw, reason FROM sluice_test.sluice_dead_letters")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(key, "big");
    assert!(raw.len() > 900_000 && raw.len() < 1 << 20, "{}", raw.len());
    assert!(big.as_bytes().starts_with(&raw), "the record's first bytes");
    let sha = hex::encode(Sha256::digest(big.as_bytes()));
    assert!(
        reason.starts_with("the record is larger than the server's max_allowed_packet")
            && reason.contains(&format!(
                "[stored cut to fit max_allowed_packet: record of {} bytes (sha256 {sha}), first {} kept]",
                big.len(),
                raw.len()
            )),
        "{reason}"
    );
}
