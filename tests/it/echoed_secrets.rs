//! An endpoint whose error answers echo the request's headers (many do, to help debugging):
//! the `Authorization` token sluice sent comes back in every 422. Whatever sluice keeps or
//! shows of those answers — dead letters in an NDJSON file or a SQLite table, its logs at
//! trace level, the summary — holds the token nowhere, not even a fragment cut at the end
//! of a quoted body. (The dead-letter file held it in clear, once per refused record.)

use crate::common;
use crate::http_support;

use common::*;
use http_support::*;

const TOKEN: &str = "Echo-tok-7f3a91c2e5";

/// Refuses records holding "poison" with a 422 that quotes the request's Authorization:
/// near the start of the answer, or (every other answer) where a reason's 200-character
/// quote of it ends, the token cut in two.
fn echoing_server() -> RawServer {
    RawServer::start(|n, r| {
        if !String::from_utf8_lossy(&r.body).contains("poison") {
            return ok();
        }
        let auth = r
            .head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("authorization:"))
            .unwrap_or_default()
            .split_once(':')
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        let padding = if n % 2 == 0 { 0 } else { 128 };
        let body = serde_json::json!({
            "error": format!("{} invalid record", "x".repeat(padding)),
            "request": {"authorization": auth, "path": r.path},
        })
        .to_string();
        answer(
            "422 Unprocessable Entity",
            "Content-Type: application/json\r\n",
            &body,
        )
    })
}

fn input(dir: &std::path::Path, n: usize) {
    let mut text = String::new();
    for i in 1..=n {
        if i % 10 == 0 {
            text.push_str(&format!("{{\"id\":\"k{i}\",\"poison\":true}}\n"));
        } else {
            text.push_str(&format!("{{\"id\":\"k{i}\",\"n\":{i}}}\n"));
        }
    }
    std::fs::write(dir.join("in.ndjson"), text).unwrap();
}

fn run(dir: &std::path::Path) -> std::process::Output {
    sluice()
        .current_dir(dir)
        .env("SLUICE_LOG", "trace")
        .env("INGEST_TOKEN", TOKEN)
        .args(DRAIN)
        .output()
        .unwrap()
}

fn sqlite_letters(db: &std::path::Path) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = format!("sqlite://{}", db.display());
        let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT coalesce(key, '') || ' ' || reason FROM sluice_dead_letters")
                .fetch_all(&mut conn)
                .await
                .unwrap();
        rows.into_iter().map(|r| r.0).collect::<Vec<_>>().join("\n")
    })
}

fn assert_clean(what: &str, text: &str) {
    // The whole token, and any piece of it long enough to matter.
    for piece in [TOKEN, &TOKEN[..6], &TOKEN[TOKEN.len() - 6..]] {
        assert!(!text.contains(piece), "{what} shows {piece:?}:\n{text}");
    }
}

#[test]
fn a_token_echoed_by_the_endpoint_reaches_no_letter_log_or_summary() {
    let server = echoing_server();
    for store in ["path = \"dead.ndjson\"", "url = \"sqlite://dead.db\""] {
        let dir = tempfile::tempdir().unwrap();
        input(dir.path(), 100);
        std::fs::write(
            dir.path().join("sluice.toml"),
            format!(
                "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n[sink]\nkind = \"http\"\nurl = {:?}\nkey = \"/id\"\nmax_batch = 20\n[sink.headers]\nAuthorization = \"Bearer ${{INGEST_TOKEN}}\"\n[sink.dead_letters]\n{store}\n",
                server.url("/in")
            ),
        )
        .unwrap();
        let out = run(dir.path());
        assert!(out.status.success(), "{store}: {}", stderr(&out));
        let s = summary(&out);
        assert_eq!(s["dead_lettered"], 10, "{store}: {s}");
        let letters = if store.starts_with("path") {
            std::fs::read_to_string(dir.path().join("dead.ndjson")).unwrap()
        } else {
            sqlite_letters(&dir.path().join("dead.db"))
        };
        assert!(
            letters.contains("HTTP 422") && letters.contains("authorization"),
            "{store}: the letters quote the answer: {letters}"
        );
        assert!(letters.contains("***"), "{store}: {letters}");
        assert_clean(&format!("{store}: dead letters"), &letters);
        assert_clean(&format!("{store}: stderr"), &stderr(&out));
        assert_clean(
            &format!("{store}: stdout"),
            &String::from_utf8_lossy(&out.stdout),
        );
    }
    // The endpoint did echo the token: the test could fail.
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.head.contains(&format!("Bearer {TOKEN}")))
    );
}
