//! Kafka values and keys in the Confluent wire format — Avro, Protobuf, JSON Schema —
//! through a schema registry, into PostgreSQL, against the real broker (Tansu) and the real
//! database. The records are written by an independent encoder (confluent-kafka's Python
//! serializers, `schema_registry_support/produce.py`), which registers its schemas with the
//! test registry and writes beside them the JSON sluice must make of each record; every
//! row is compared with it field by field (decimals digit by digit). Then what must not
//! be lost: schema evolution, undecodable records as dead letters, the registry down
//! mid-run, a kill -9 mid-drain, and credentials the registry refuses.
//!
//! The timing-insensitive tests come first.

use crate::kafka_pg_support;
use crate::schema_registry_support;

use std::time::{Duration, Instant};

use kafka_pg_support::*;
use schema_registry_support::*;

/// Generous: two cores are shared with other builds; counts are asserted, not speed.
const LIMIT: Duration = Duration::from_secs(180);
/// The Avro decimals: `amount` bytes (38, 18), `fee` fixed (18, 2), `whole` bytes (20, 0).
const AVRO_DECIMALS: &[&str] = &["/amount", "/fee", "/whole"];

fn assert_drained(out: &std::process::Output, written: u64, dead_lettered: u64) {
    assert!(out.status.success(), "worker failed: {}", stderr(out));
    let s = summary(out);
    assert_eq!(
        (s["written"].as_u64(), s["dead_lettered"].as_u64()),
        (Some(written), Some(dead_lettered)),
        "{s}\n{}",
        stderr(out)
    );
}

/// The id the registry gave a subject's only (or first) version.
fn first_id(registry: &TestRegistry, subject: &str) -> u32 {
    *registry
        .versions(subject)
        .first()
        .unwrap_or_else(|| panic!("{subject} registered: {:?}", registry.subjects()))
}

/// Sluice fetched each schema once (they are immutable: cached for the process's life)
/// and asked for nothing the test registry does not serve.
fn assert_each_fetched_once(registry: &TestRegistry, ids: &[u32]) {
    for id in ids {
        assert_eq!(
            registry.requests(&format!("/schemas/ids/{id}")),
            1,
            "schema {id} fetched once; requests: {:?}",
            registry.request_counts()
        );
    }
    assert!(
        registry.unknown().is_empty(),
        "asked for routes the test registry does not serve: {:?}",
        registry.unknown()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_values_and_keys_arrive_field_by_field_as_encoded() {
    const RECORDS: u64 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn();
    let topic = unique("sr_avro");
    let table = topic.clone();
    create_topic(&topic, 4);
    let expected = dir.path().join("expected.ndjson");
    Produce::new(&registry, &topic, "avro")
        .records(1, RECORDS)
        .avro_keys()
        .run(&expected)
        .await;
    let config = registry_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"\nmax_batch = 2000",
        "avro",
        "avro",
        &registry.url(),
        "",
        "",
    );

    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    assert_drained(&out, RECORDS, 0);
    let expected = read_expected(&expected);
    assert_eq!(expected.len() as u64, RECORDS);
    assert_rows_match(&expected, &payloads_by_id(&table).await, AVRO_DECIMALS);
    // The key column holds the payload's /id: every id once.
    assert_eq!(
        pg_count(&format!(
            "SELECT count(*) FROM {table} WHERE key = payload->>'id'"
        ))
        .await,
        RECORDS as i64
    );
    let value_id = first_id(&registry, &format!("{topic}-value"));
    let key_id = first_id(&registry, &format!("{topic}-key"));
    assert_each_fetched_once(&registry, &[value_id, key_id]);
    clean_up(&table, &topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_values_arrive_field_by_field_as_encoded() {
    const RECORDS: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    // Ids from 100: a reader that took the schema id for an index would not find it.
    let registry = TestRegistry::spawn_with(RegistryOptions {
        first_id: 100,
        ..RegistryOptions::default()
    });
    let topic = unique("sr_proto");
    let table = topic.clone();
    create_topic(&topic, 2);
    let expected = dir.path().join("expected.ndjson");
    Produce::new(&registry, &topic, "protobuf")
        .records(1, RECORDS)
        .run(&expected)
        .await;
    // As a real registry holds them: the .proto text, common.proto as a reference, the
    // well-known types imported without one.
    let value_id = first_id(&registry, &format!("{topic}-value"));
    let schema = registry.schema(value_id).unwrap();
    assert_eq!(schema.schema_type, "PROTOBUF");
    assert!(
        schema.schema.starts_with("syntax = \"proto3\";"),
        "{schema:?}"
    );
    assert_eq!(
        schema.references,
        vec![Reference {
            name: "sluice/test/common.proto".into(),
            subject: "sluice/test/common.proto".into(),
            version: 1,
        }]
    );
    let config = registry_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"",
        "protobuf",
        "text",
        &registry.url(),
        "",
        "",
    );

    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    assert_drained(&out, RECORDS, 0);
    let expected = read_expected(&expected);
    assert_rows_match(&expected, &payloads_by_id(&table).await, &[]);
    assert_each_fetched_once(&registry, &[value_id]);
    assert_eq!(
        registry.requests("/subjects/sluice%2Ftest%2Fcommon.proto/versions/1"),
        1,
        "the reference fetched once: {:?}",
        registry.request_counts()
    );
    clean_up(&table, &topic).await;
}

/// What the Python serializer registers when the registry keeps what it is given: the
/// base64 of a FileDescriptorProto rather than .proto text (Confluent's registry turns
/// it into text; one that stores schemas as they come serves it back as it is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_schemas_registered_as_descriptors_decode_as_well() {
    const RECORDS: u64 = 500;
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn();
    let topic = unique("sr_proto_desc");
    let table = topic.clone();
    create_topic(&topic, 1);
    let expected = dir.path().join("expected.ndjson");
    Produce::new(&registry, &topic, "protobuf")
        .records(1, RECORDS)
        .proto_serialized()
        .run(&expected)
        .await;
    let value_id = first_id(&registry, &format!("{topic}-value"));
    let schema = registry.schema(value_id).unwrap();
    assert!(
        !schema.schema.contains("syntax"),
        "registered as a descriptor: {schema:?}"
    );
    let config = registry_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"",
        "protobuf",
        "text",
        &registry.url(),
        "",
        "",
    );

    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    assert_drained(&out, RECORDS, 0);
    assert_rows_match(
        &read_expected(&expected),
        &payloads_by_id(&table).await,
        &[],
    );
    clean_up(&table, &topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_values_arrive_as_written_through_a_registry_with_basic_auth() {
    const RECORDS: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn_with(RegistryOptions {
        auth: Some(Auth::Basic {
            user: "sluice".into(),
            password: "pass word:with colon".into(),
        }),
        ..RegistryOptions::default()
    });
    let topic = unique("sr_json");
    let table = topic.clone();
    create_topic(&topic, 2);
    let expected = dir.path().join("expected.ndjson");
    Produce::new(&registry, &topic, "json_schema")
        .records(1, RECORDS)
        .credentials("sluice", "pass word:with colon")
        .run(&expected)
        .await;
    let password_file = dir.path().join("registry-password");
    std::fs::write(&password_file, "pass word:with colon\n").unwrap();
    let config = registry_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"",
        "json_schema",
        "text",
        &registry.url(),
        &format!("username = \"sluice\"\npassword_file = {password_file:?}"),
        "",
    );

    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    assert_drained(&out, RECORDS, 0);
    assert!(
        !stderr(&out).contains("pass word"),
        "the password is not logged: {}",
        stderr(&out)
    );
    assert_rows_match(
        &read_expected(&expected),
        &payloads_by_id(&table).await,
        &[],
    );
    // 2^63 + i: beyond i64 and beyond a double, every digit kept.
    assert_eq!(
        pg_count(&format!(
            "SELECT count(*) FROM {table} WHERE (payload->>'big')::numeric = 9223372036854775808 + (payload->>'id')::numeric"
        ))
        .await,
        RECORDS as i64
    );
    assert_each_fetched_once(&registry, &[first_id(&registry, &format!("{topic}-value"))]);
    clean_up(&table, &topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_written_under_two_schema_versions_land_in_one_table() {
    const EACH: u64 = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn();
    let topic = unique("sr_evolve");
    let table = topic.clone();
    create_topic(&topic, 2);
    let v1 = dir.path().join("v1.ndjson");
    let v2 = dir.path().join("v2.ndjson");
    Produce::new(&registry, &topic, "avro")
        .records(1, EACH)
        .run(&v1)
        .await;
    Produce::new(&registry, &topic, "avro")
        .records(EACH + 1, EACH)
        .version(2)
        .run(&v2)
        .await;
    let ids = registry.versions(&format!("{topic}-value"));
    assert_eq!(ids.len(), 2, "two versions of the subject: {ids:?}");
    assert!(registry.schema(ids[1]).unwrap().schema.contains("currency"));
    let config = registry_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"",
        "avro",
        "text",
        &registry.url(),
        "",
        "",
    );

    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    assert_drained(&out, 2 * EACH, 0);
    let mut expected = read_expected(&v1);
    expected.extend(read_expected(&v2));
    assert_rows_match(&expected, &payloads_by_id(&table).await, AVRO_DECIMALS);
    // Each row as its writer's schema has it: v1 rows without the field, v2 rows with
    // theirs ("USD" set, "EUR" the default written for the rest).
    for (condition, n) in [
        (
            format!("NOT payload ? 'currency' AND (payload->>'id')::int <= {EACH}"),
            EACH,
        ),
        (
            format!("payload->>'currency' = 'USD' AND (payload->>'id')::int > {EACH}"),
            EACH / 2,
        ),
        (
            format!("payload->>'currency' = 'EUR' AND (payload->>'id')::int > {EACH}"),
            EACH / 2,
        ),
    ] {
        assert_eq!(
            pg_count(&format!("SELECT count(*) FROM {table} WHERE {condition}")).await,
            n as i64,
            "{condition}"
        );
    }
    assert_each_fetched_once(&registry, &ids);
    clean_up(&table, &topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_that_do_not_decode_are_dead_letters_and_the_rest_is_written() {
    const GOOD: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn();
    let topic = unique("sr_letters");
    let table = topic.clone();
    create_topic(&topic, 1);
    let expected = dir.path().join("expected.ndjson");
    let wire_path = dir.path().join("wire.ndjson");
    Produce::new(&registry, &topic, "avro")
        .records(1, GOOD)
        .avro_keys()
        .wire(&wire_path)
        .run(&expected)
        .await;
    let wire = read_wire(&wire_path);
    let id = first_id(&registry, &format!("{topic}-value"));
    let good_key = wire[0].key.clone();
    let body = wire[0].value[5..].to_vec();
    let framed = |magic: u8, schema: u32, body: &[u8]| {
        let mut v = vec![magic];
        v.extend_from_slice(&schema.to_be_bytes());
        v.extend_from_slice(body);
        v
    };
    // (value, key, what the reason must say: any of these, case-insensitive)
    let bad: Vec<(Vec<u8>, Vec<u8>, &[&str])> = vec![
        (
            framed(0, 9999, &body),
            good_key.clone(),
            &["schema id 9999"],
        ),
        (framed(1, id, &body), good_key.clone(), &["magic byte"]),
        (
            framed(0, id, &body[..body.len() / 2]),
            good_key.clone(),
            &["decode", "truncated", "end of"],
        ),
        (vec![0, 0, 0], good_key.clone(), &["truncated", "header"]),
        (
            b"{\"id\": 5, \"plain\": \"json\"}".to_vec(),
            good_key.clone(),
            &["magic byte"],
        ),
        // A good value under a key that is not Avro, with source.key.format = "avro".
        (wire[0].value.clone(), b"plain-key".to_vec(), &["key"]),
    ];
    // Offsets: the first half of the good records, the bad ones, the rest.
    let half = GOOD as usize / 2;
    let mut messages: Vec<RawMessage> = Vec::new();
    for w in &wire[..half] {
        messages.push((Some(w.key.clone()), 0, w.value.clone()));
    }
    for (value, key, _) in &bad {
        messages.push((Some(key.clone()), 0, value.clone()));
    }
    for w in &wire[half..] {
        messages.push((Some(w.key.clone()), 0, w.value.clone()));
    }
    let t = topic.clone();
    tokio::task::spawn_blocking(move || produce_raw(&t, &messages))
        .await
        .unwrap();
    let config = registry_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"",
        "avro",
        "avro",
        &registry.url(),
        "",
        "",
    );

    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    // The record with the bad key has the id of record 1, which is also written: one row.
    assert_drained(&out, GOOD, bad.len() as u64);
    assert_rows_match(
        &read_expected(&expected),
        &payloads_by_id(&table).await,
        AVRO_DECIMALS,
    );
    let letters = dead_letters(&topic).await;
    assert_eq!(letters.len(), bad.len(), "{letters:?}");
    for (n, (letter, (value, _, words))) in letters.iter().zip(&bad).enumerate() {
        let Letter {
            position, reason, ..
        } = letter;
        assert_eq!(position, &format!("{topic}/0/{}", half + n), "{reason}");
        let lower = reason.to_lowercase();
        assert!(
            words.iter().any(|w| lower.contains(w)),
            "letter {n} at {position}: {reason:?} should say one of {words:?}"
        );
        assert_eq!(
            &letter.raw, value,
            "letter {n} keeps the raw bytes as received: {reason}"
        );
    }
    clean_up(&table, &topic).await;
}

/// A decoded Avro key is what the dead letter records as the message's key: its text,
/// not its wire bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decoded_avro_keys_are_the_keys_of_dead_letters() {
    const RECORDS: u64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn();
    let topic = unique("sr_keys");
    let table = topic.clone();
    create_topic(&topic, 2);
    // The table refuses every tenth id.
    pg_execute(&format!(
        "CREATE TABLE {table} (key text PRIMARY KEY, payload jsonb NOT NULL, source text,
            ingested_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT not_tenth CHECK ((payload->>'id')::bigint % 10 <> 0))"
    ))
    .await;
    let expected = dir.path().join("expected.ndjson");
    Produce::new(&registry, &topic, "avro")
        .records(1, RECORDS)
        .avro_keys()
        .run(&expected)
        .await;
    let config = registry_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"\nmax_batch = 20",
        "avro",
        "avro",
        &registry.url(),
        "",
        "",
    );

    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    assert_drained(&out, RECORDS - RECORDS / 10, RECORDS / 10);
    let mut keys: Vec<String> = dead_letters(&topic)
        .await
        .into_iter()
        .map(|letter| {
            assert!(letter.reason.contains("not_tenth"), "{}", letter.reason);
            String::from_utf8(letter.source_key.expect("the message key is kept"))
                .expect("decoded: text")
        })
        .collect();
    keys.sort_by_key(|k| k.parse::<u64>().unwrap_or(u64::MAX));
    let tenths: Vec<String> = (1..=RECORDS / 10).map(|i| (i * 10).to_string()).collect();
    assert_eq!(keys, tenths);
    clean_up(&table, &topic).await;
}

/// Avro bodies without the wire-format header, read with a schema file and no registry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_avro_bodies_decode_with_a_schema_file_and_no_registry() {
    const RECORDS: u64 = 500;
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn();
    let topic = unique("sr_file");
    let table = topic.clone();
    create_topic(&topic, 1);
    let expected = dir.path().join("expected.ndjson");
    let wire_path = dir.path().join("wire.ndjson");
    Produce::new(&registry, &topic, "avro")
        .records(1, RECORDS)
        .wire(&wire_path)
        .run(&expected)
        .await;
    let schema = registry
        .schema(first_id(&registry, &format!("{topic}-value")))
        .unwrap();
    let schema_file = dir.path().join("order.avsc");
    std::fs::write(&schema_file, &schema.schema).unwrap();
    registry.stop(); // not needed: nothing may ask it
    let bare: Vec<Wire> = read_wire(&wire_path)
        .into_iter()
        .map(|w| Wire {
            value: w.value[5..].to_vec(),
            ..w
        })
        .collect();
    send_wire(&topic, bare, 0).await;
    let config = write_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"",
        &format!("[source.value]\nformat = \"avro\"\nschema_file = {schema_file:?}\n"),
    );

    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    assert_drained(&out, RECORDS, 0);
    assert_rows_match(
        &read_expected(&expected),
        &payloads_by_id(&table).await,
        AVRO_DECIMALS,
    );
    clean_up(&table, &topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_the_registry_refuses_stop_the_worker_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn_with(RegistryOptions {
        auth: Some(Auth::Basic {
            user: "sluice".into(),
            password: "right-password".into(),
        }),
        ..RegistryOptions::default()
    });
    let topic = unique("sr_refused");
    let table = topic.clone();
    create_topic(&topic, 1);
    let expected = dir.path().join("expected.ndjson");
    Produce::new(&registry, &topic, "avro")
        .records(1, 10)
        .credentials("sluice", "right-password")
        .run(&expected)
        .await;
    let config = registry_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"",
        "avro",
        "text",
        &registry.url(),
        "username = \"sluice\"\npassword = \"wrong-password-7f3a\"",
        "",
    );

    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("source.schema_registry"), "{err}");
    assert!(
        !err.contains("wrong-password-7f3a"),
        "the password is echoed: {err}"
    );
    assert!(!registry.log().is_empty(), "the registry was asked");
    assert_eq!(dead_letter_count(&topic).await, 0, "nothing dead-lettered");

    // `sluice check` says the same, and changes nothing.
    let out = sluice()
        .arg("check")
        .arg("--config")
        .arg(&config)
        .output()
        .await
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("source.schema_registry"), "{said}");
    assert!(!said.contains("wrong-password-7f3a"), "{said}");

    pg_execute(&format!("DROP TABLE IF EXISTS {table}")).await;
    delete_topic(&topic);
}

/// `sluice produce --value-schema` rehearses an Avro topic: it registers the schema under
/// `<topic>-value` and encodes each NDJSON line (sluice's own encoder, the mapping read
/// backwards); `sluice check` finds the registry; a registry answering 503 is an outage
/// the worker waits out (nothing written, nothing dead-lettered), and then every line
/// arrives as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_produce_rehearses_an_avro_topic_and_a_503_is_waited_out() {
    const RECORDS: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn();
    let topic = unique("sr_produce");
    let table = topic.clone();
    create_topic(&topic, 2);
    let schema = dir.path().join("order.avsc");
    std::fs::write(
        &schema,
        r#"{"type": "record", "name": "Order", "fields": [
          {"name": "id", "type": "long"},
          {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 10}},
          {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
          {"name": "day", "type": {"type": "int", "logicalType": "date"}},
          {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
          {"name": "note", "type": ["null", "string"], "default": null},
          {"name": "blob", "type": "bytes"}
        ]}"#,
    )
    .unwrap();
    let input = dir.path().join("in.ndjson");
    let mut lines = String::new();
    for i in 1..=RECORDS {
        let note = if i % 2 == 0 {
            format!("\"zażółć {i}\"")
        } else {
            "null".into()
        };
        lines.push_str(&format!(
            "{{\"id\":{i},\"amount\":{i}12345678901234567.0123456789,\"at\":\"1969-12-31T23:59:{:02}.{i:06}Z\",\"day\":\"2024-02-29\",\"status\":\"{}\",\"note\":{note},\"blob\":\"AAEC/w==\"}}\n",
            i % 60,
            if i % 3 == 0 { "PAID" } else { "NEW" },
        ));
    }
    std::fs::write(&input, &lines).unwrap();
    let config = registry_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"",
        "avro",
        "text",
        &registry.url(),
        "timeout = \"2s\"",
        "",
    );
    let with_schema = ["--value-schema".as_ref(), schema.as_os_str()];
    assert_eq!(
        produce_with(&config, &input, &with_schema).await,
        RECORDS as u64
    );
    assert_eq!(registry.versions(&format!("{topic}-value")).len(), 1);

    let out = sluice()
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &stderr(&out);
    assert!(
        said.contains("schema registry") && said.contains("reachable"),
        "{said}"
    );

    registry.fail_with(Some(503));
    let mut worker = start_worker(&config, &["--until-empty"]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(worker.try_wait().unwrap().is_none(), "the worker waits");
    assert_eq!(dead_letter_count(&topic).await, 0, "nothing dead-lettered");
    let written = pg_count(&format!(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = '{table}'"
    ))
    .await;
    if written > 0 {
        assert_eq!(pg_count(&format!("SELECT count(*) FROM {table}")).await, 0);
    }
    registry.fail_with(None);
    let out = finish(worker, LIMIT).await;
    assert_drained(&out, RECORDS as u64, 0);
    let expected = read_expected(&input);
    assert_rows_match(&expected, &payloads_by_id(&table).await, &["/amount"]);
    clean_up(&table, &topic).await;
}

/// The registry over HTTPS signed by a private CA (`[source.schema_registry.tls] ca_file`,
/// the project's TLS settings): `sluice produce` registers through it and the worker reads
/// through it; a registry whose certificate the configured CA did not sign stops the worker
/// at start with exit 2 naming `source.schema_registry.tls` (waiting cannot fix it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_over_https_with_a_private_ca() {
    const RECORDS: usize = 50;
    let pki = |name: &str| {
        std::path::PathBuf::from(
            std::env::var("SLUICE_TEST_TLS_DIR")
                .expect("SLUICE_TEST_TLS_DIR: run eval \"$(scripts/services.sh)\" first"),
        )
        .join(name)
    };
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn_with(RegistryOptions {
        tls: Some((pki("server.pem"), pki("server.key"))),
        ..Default::default()
    });
    let topic = unique("sr_tls");
    let table = topic.clone();
    create_topic(&topic, 1);
    let schema = dir.path().join("row.avsc");
    std::fs::write(
        &schema,
        r#"{"type": "record", "name": "Row", "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}"#,
    )
    .unwrap();
    let input = dir.path().join("in.ndjson");
    let lines: String = (1..=RECORDS)
        .map(|i| format!("{{\"id\":{i},\"name\":\"row {i}\"}}\n"))
        .collect();
    std::fs::write(&input, &lines).unwrap();
    let config_with = |ca: &str| {
        registry_config(
            dir.path(),
            &topic,
            &table,
            "key = \"/id\"",
            "avro",
            "text",
            &registry.url(),
            &format!("[source.schema_registry.tls]\nca_file = {:?}\n", pki(ca)),
            "",
        )
    };
    let config = config_with("ca.pem");
    let with_schema = ["--value-schema".as_ref(), schema.as_os_str()];
    assert_eq!(
        produce_with(&config, &input, &with_schema).await,
        RECORDS as u64
    );
    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    assert_drained(&out, RECORDS as u64, 0);
    let expected = read_expected(&input);
    assert_rows_match(&expected, &payloads_by_id(&table).await, &[]);

    let config = config_with("other-ca.pem");
    let out = finish(start_worker(&config, &["--until-empty"]), LIMIT).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("source.schema_registry.tls"), "{err}");
    clean_up(&table, &topic).await;
}

/// `GET /readyz` on the telemetry port: its status, 0 when nothing answers.
fn readyz(port: u16) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    if write!(s, "GET /readyz HTTP/1.0\r\nHost: x\r\n\r\n").is_err() {
        return 0;
    }
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The worker meets a schema id it has not fetched while the registry is down: the
/// records wait (nothing dead-lettered, nothing skipped, not ready), and all are written
/// once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_down_mid_run_holds_records_back_until_it_returns() {
    const EACH: u64 = 500;
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn();
    let topic = unique("sr_down");
    let table = topic.clone();
    create_topic(&topic, 1);
    let v1 = dir.path().join("v1.ndjson");
    let v2 = dir.path().join("v2.ndjson");
    Produce::new(&registry, &topic, "avro")
        .records(1, EACH)
        .run(&v1)
        .await;
    // v2 registered now, its records kept to be sent once the registry is down.
    let wire_path = dir.path().join("v2-wire.ndjson");
    Produce::new(&registry, &topic, "avro")
        .records(EACH + 1, EACH)
        .version(2)
        .wire(&wire_path)
        .run(&v2)
        .await;
    let ids = registry.versions(&format!("{topic}-value"));
    assert_eq!(ids.len(), 2);
    let port = crate::common::free_port();
    let config = registry_config(
        dir.path(),
        &topic,
        &table,
        "key = \"/id\"",
        "avro",
        "text",
        &registry.url(),
        "timeout = \"2s\"",
        &format!("[telemetry]\nlisten = \"127.0.0.1:{port}\"\n"),
    );

    let worker = start_worker(&config, &[]);
    let count = format!("SELECT count(*) FROM {table}");
    wait_for_table(&table, LIMIT).await;
    assert_eq!(
        wait_for_count(&count, EACH as i64, LIMIT).await,
        EACH as i64,
        "v1 written"
    );
    registry.stop();
    send_wire(&topic, read_wire(&wire_path), 0).await;

    // Down for a while: the v2 records wait, none is a dead letter, the worker is not ready.
    let down = Instant::now();
    let mut not_ready = false;
    while down.elapsed() < Duration::from_secs(8) {
        not_ready |= readyz(port) == 503;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(pg_count(&count).await, EACH as i64, "nothing of v2 written");
    assert_eq!(dead_letter_count(&topic).await, 0, "nothing dead-lettered");
    assert!(
        not_ready,
        "/readyz said not ready (503) while the registry was down"
    );

    registry.start();
    assert_eq!(
        wait_for_count(&count, 2 * EACH as i64, LIMIT).await,
        2 * EACH as i64,
        "everything written once the registry is back"
    );
    terminate(&worker);
    let out = finish(worker, LIMIT).await;
    assert_drained(&out, 2 * EACH, 0);
    let mut expected = read_expected(&v1);
    expected.extend(read_expected(&v2));
    assert_rows_match(&expected, &payloads_by_id(&table).await, AVRO_DECIMALS);
    assert_eq!(dead_letter_count(&topic).await, 0, "nothing dead-lettered");
    assert_eq!(
        registry.requests(&format!("/schemas/ids/{}", ids[0])),
        1,
        "v1's schema fetched once: {:?}",
        registry.request_counts()
    );
    assert!(
        registry.requests(&format!("/schemas/ids/{}", ids[1])) >= 1,
        "v2's schema fetched after the registry returned: {:?}",
        registry.log()
    );
    clean_up(&table, &topic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_drain_of_avro_records_resumes_without_loss_or_duplicates() {
    const RECORDS: u64 = 20_000;
    const PARTITIONS: u32 = 4;
    let dir = tempfile::tempdir().unwrap();
    let registry = TestRegistry::spawn();
    let topic = unique("sr_kill");
    let table = topic.clone();
    create_topic(&topic, PARTITIONS);
    let expected = dir.path().join("expected.ndjson");
    Produce::new(&registry, &topic, "avro")
        .records(1, RECORDS)
        .avro_keys()
        .partitions(PARTITIONS)
        .run(&expected)
        .await;
    // Written keyed by position (topic/partition/offset): a record delivered twice is
    // absorbed only at the same position, and a skipped one is missing. Many slots: the
    // worker keeps pulling (and would commit) while writes hang.
    let config = registry_config(
        dir.path(),
        &topic,
        &table,
        "max_batch = 250",
        "avro",
        "avro",
        &registry.url(),
        "",
        "[concurrency]\nalgorithm = \"fixed\"\nmax = 16",
    );

    let at_kill = kill_mid_drain(
        &config,
        &table,
        &["--until-empty", "--rate", "3000"],
        5_000,
        RECORDS as i64,
        LIMIT,
    )
    .await;
    let s = rerun_after_kill(
        &config,
        &topic,
        PARTITIONS as i32,
        at_kill,
        RECORDS as i64,
        LIMIT,
    )
    .await;
    assert_eq!(s["dead_lettered"].as_u64(), Some(0), "{s}");
    assert_eq!(
        pg_count(&format!("SELECT count(*) FROM {table}")).await,
        RECORDS as i64
    );
    // Every id once (payloads_by_id refuses two rows of one id), each as encoded.
    assert_rows_match(
        &read_expected(&expected),
        &payloads_by_id(&table).await,
        AVRO_DECIMALS,
    );
    clean_up(&table, &topic).await;
}
