//! What a dead letter says about its record, against the real services: an upsert
//! letter for a missing or unreadable version keeps the record's key (PostgreSQL), and an
//! AMQP message's header table is stored as the documented array of `{"name","value"}`
//! (`value_hex` for bytes that are not UTF-8, numbers as numbers, tables and arrays as
//! JSON), not in the AMQP library's words (RabbitMQ).

use crate::common;

use std::path::Path;

use common::*;
use serde_json::json;

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn upsert_letters_for_a_missing_or_bad_version_keep_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let table = unique("letter_keys");
    std::fs::write(
        dir.path().join("in.ndjson"),
        "{\"id\":\"good\",\"v\":1}\n{\"id\":\"no-version\"}\n{\"id\":\"bad-version\",\"v\":\"soon\"}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"file\"\npath = \"in.ndjson\"\n\n[sink]\nkind = \"postgres\"\nurl = \"{}\"\ntable = \"{table}\"\nkey = \"/id\"\nmode = \"upsert\"\nversion = \"/v\"\n",
            pg_url()
        ),
    )
    .unwrap();
    let out = run_in(
        dir.path(),
        &[
            "run",
            "-c",
            "sluice.toml",
            "--until-empty",
            "--summary",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["dead_lettered"], 2);
    let letters: Vec<(Option<String>, String)> = block_on(async {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&pg_url())
            .await
            .unwrap();
        sqlx::query_as(
            "SELECT key, reason FROM sluice_dead_letters WHERE target = $1 ORDER BY reason",
        )
        .bind(&table)
        .fetch_all(&mut conn)
        .await
        .unwrap()
    });
    let keys: Vec<Option<&str>> = letters.iter().map(|(k, _)| k.as_deref()).collect();
    assert_eq!(
        keys,
        [Some("no-version"), Some("bad-version")],
        "{letters:?}"
    );
}

/// Publishes one malformed message with a header of every AMQP type RabbitMQ carries.
fn publish_with_headers(queue: &str) {
    use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
    use lapin::types::{
        AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable, LongString, ShortString,
    };
    use lapin::{BasicProperties, Connection, ConnectionProperties};
    let mut nested = FieldTable::default();
    nested.insert(ShortString::from("depth"), AMQPValue::LongInt(2));
    let mut headers = FieldTable::default();
    for (name, value) in [
        ("a_text", AMQPValue::LongString(LongString::from("t-1"))),
        (
            "b_bytes",
            AMQPValue::ByteArray(ByteArray::from(vec![0xff_u8, 0xfe])),
        ),
        (
            "c_latin1",
            AMQPValue::LongString(LongString::from(vec![0x63_u8, 0x61, 0x66, 0xe9])),
        ),
        ("d_int", AMQPValue::LongInt(1)),
        ("e_long", AMQPValue::LongLongInt(-5_000_000_000)),
        ("f_flag", AMQPValue::Boolean(true)),
        ("g_double", AMQPValue::Double(1.5)),
        (
            "h_decimal",
            AMQPValue::DecimalValue(DecimalValue {
                scale: 2,
                value: 1999,
            }),
        ),
        ("i_time", AMQPValue::Timestamp(1_700_000_000)),
        ("j_table", AMQPValue::FieldTable(nested)),
        (
            "k_array",
            AMQPValue::FieldArray(FieldArray::from(vec![
                AMQPValue::LongString(LongString::from("x")),
                AMQPValue::LongInt(3),
            ])),
        ),
        ("l_void", AMQPValue::Void),
    ] {
        headers.insert(ShortString::from(name), value);
    }
    block_on(async {
        let conn = Connection::connect(&amqp_url(), ConnectionProperties::default())
            .await
            .unwrap();
        let ch = conn.create_channel().await.unwrap();
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.queue_declare(queue.into(), durable, FieldTable::default())
            .await
            .unwrap();
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        let confirm = ch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                b"{not json",
                BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_headers(headers),
            )
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
        conn.close(200, "done".into()).await.unwrap();
    });
}

fn letters_headers(db: &Path) -> serde_json::Value {
    block_on(async {
        let url = format!("sqlite://{}", db.display());
        let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        let (headers,): (String,) = sqlx::query_as("SELECT headers FROM sluice_dead_letters")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        serde_json::from_str(&headers).unwrap()
    })
}

#[test]
fn amqp_headers_are_stored_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let queue = unique("sluice_headers");
    publish_with_headers(&queue);
    std::fs::write(
        dir.path().join("sluice.toml"),
        format!(
            "[source]\nkind = \"amqp\"\nurl = {:?}\nqueue = {queue:?}\n\n[sink]\nkind = \"sqlite\"\nurl = \"sqlite://out.db\"\nkey = \"/id\"\n",
            amqp_url()
        ),
    )
    .unwrap();
    let out = run_in(
        dir.path(),
        &[
            "run",
            "-c",
            "sluice.toml",
            "--until-empty",
            "--summary",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(summary(&out)["dead_lettered"], 1);
    let headers = letters_headers(&dir.path().join("out.db"));
    let decimal: serde_json::Value = serde_json::from_str("19.99").unwrap();
    assert_eq!(
        headers,
        json!([
            {"name": "a_text", "value": "t-1"},
            {"name": "b_bytes", "value_hex": "fffe"},
            {"name": "c_latin1", "value_hex": "636166e9"},
            {"name": "d_int", "value": 1},
            {"name": "e_long", "value": -5_000_000_000_i64},
            {"name": "f_flag", "value": true},
            {"name": "g_double", "value": 1.5},
            {"name": "h_decimal", "value": decimal},
            {"name": "i_time", "value": 1_700_000_000},
            {"name": "j_table", "value": {"depth": 2}},
            {"name": "k_array", "value": ["x", 3]},
            {"name": "l_void", "value": null},
        ])
    );
    assert_eq!(amqp_queue_counts(&queue), (0, 0));
}
