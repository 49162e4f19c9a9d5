//! Keys in MariaDB compare as their bytes: the table sluice creates keeps `abc`, `ABC`,
//! `àbc`, `abc ` and two emoji apart; a table an earlier sluice created with the server's
//! default collation is refused with the ALTER that fixes it; a record that meets a stored
//! row of another key on a unique index (a mapped key column that merges keys, or another
//! unique column) is dead-lettered naming the index, never counted as a duplicate.

use crate::common;
use crate::mysql_support;

use mysql_support::{count, drain, execute, file_config, letters, mysql_url, write_lines};

fn records(ids: &[&str]) -> Vec<String> {
    ids.iter()
        .map(|id| serde_json::json!({ "id": id, "n": 1 }).to_string())
        .collect()
}

fn figures(out: &std::process::Output) -> (Option<i64>, Option<i64>, Option<i64>) {
    assert!(out.status.success(), "{}", common::stderr(out));
    let s = common::summary(out);
    (
        s["written"].as_i64(),
        s["duplicates"].as_i64(),
        s["dead_lettered"].as_i64(),
    )
}

const DISTINCT: [&str; 8] = ["abc", "ABC", "Abc", "àbc", "abc ", "😀", "😁", "x"];

#[test]
fn keys_differing_in_case_accents_trailing_spaces_or_emoji_are_distinct_rows() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let table = common::unique("my_bytes");
    let lines = records(&DISTINCT);
    let out = drain(&mysql_url(), &table, "", &lines);
    assert_eq!(figures(&out), (Some(8), Some(0), Some(0)));
    let again = drain(&mysql_url(), &table, "", &lines);
    assert_eq!(figures(&again), (Some(0), Some(8), Some(0)));
    rt.block_on(async {
        assert_eq!(count(&format!("SELECT COUNT(*) FROM {table}")).await, 8);
        let stored = count(&format!(
            "SELECT COUNT(DISTINCT HEX(`key`)) FROM {table} WHERE HEX(`key`) IN ({})",
            DISTINCT
                .iter()
                .map(|k| format!("'{}'", hex(k)))
                .collect::<Vec<_>>()
                .join(",")
        ))
        .await;
        assert_eq!(stored, 8, "every key stored with its very bytes");
        execute(&format!("DROP TABLE {table}")).await;
    });
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02X}")).collect()
}

/// The shape an earlier sluice created: `key` with the server's default collation
/// (utf8mb4_general_ci here). Refused by `run` and `check` with the ALTER to run; after
/// it, the same run writes every key.
#[test]
fn a_table_created_by_an_earlier_version_is_refused_until_its_key_column_is_altered() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let table = common::unique("my_old");
    rt.block_on(execute(&format!(
        "CREATE TABLE {table} (`key` VARCHAR(255) NOT NULL PRIMARY KEY, payload JSON NOT NULL, \
           source TEXT, ingested_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) \
         ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE utf8mb4_general_ci"
    )));
    let dir = tempfile::tempdir().unwrap();
    write_lines(dir.path(), &records(&DISTINCT));
    file_config(dir.path(), &mysql_url(), &table, "");
    let out = common::run_in(dir.path(), common::DRAIN);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let alter = format!(
        "ALTER TABLE `{table}` MODIFY `key` varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL"
    );
    assert!(
        err.contains("column `key`") && err.contains("utf8mb4_general_ci"),
        "{err}"
    );
    assert!(err.contains(&alter), "{err}");
    let checked = common::run_in(dir.path(), &["check", "-c", "sluice.toml"]);
    assert_eq!(
        checked.status.code(),
        Some(1),
        "{}",
        common::stderr(&checked)
    );
    assert!(
        common::stderr(&checked).contains(&alter),
        "{}",
        common::stderr(&checked)
    );
    rt.block_on(async {
        assert_eq!(count(&format!("SELECT COUNT(*) FROM {table}")).await, 0);
        execute(&alter).await;
    });
    let out = common::run_in(dir.path(), common::DRAIN);
    assert_eq!(figures(&out), (Some(8), Some(0), Some(0)));
    rt.block_on(execute(&format!("DROP TABLE {table}")));
}

/// A mapped table whose key column merges keys (utf8mb4_general_ci): warned at start
/// naming the column; a record whose key only the collation holds equal to a stored one
/// is dead-lettered, with the server's 1062 naming the index — not merged, not a duplicate.
#[test]
fn a_mapped_key_column_that_merges_keys_is_warned_and_its_merged_keys_dead_lettered() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let table = common::unique("my_ci");
    rt.block_on(execute(&format!(
        "CREATE TABLE {table} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
           order_id VARCHAR(64) COLLATE utf8mb4_general_ci NOT NULL, n INT, \
           UNIQUE KEY by_order (order_id))"
    )));
    let mapping = "key_column = \"order_id\"\nmax_batch = 100\n\n[sink.columns]\nn = \"/n\"";
    let lines = records(&DISTINCT);
    let out = drain(&mysql_url(), &table, mapping, &lines);
    let err = common::stderr(&out);
    assert!(
        err.contains(&format!(
            "column order_id of {table} compares keys by utf8mb4_general_ci"
        )),
        "{err}"
    );
    // abc, ABC, Abc, àbc and `abc ` are one key to this column; the emoji are one too.
    assert_eq!(figures(&out), (Some(3), Some(0), Some(5)));
    rt.block_on(async {
        // The first of each group equal to the column is stored, the rest dead-lettered.
        let letters = letters(&table).await;
        let mut keys: Vec<&str> = letters.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort();
        assert_eq!(keys, ["ABC", "Abc", "abc ", "àbc", "😁"], "{letters:?}");
        for (key, reason) in &letters {
            assert!(
                reason.starts_with("MySQL error 1062: Duplicate entry")
                    && reason.contains("by_order"),
                "{key}: {reason}"
            );
        }
    });
    // Rerun: the three stored are duplicates, the five collide again.
    let again = drain(&mysql_url(), &table, mapping, &lines);
    assert_eq!(figures(&again), (Some(0), Some(3), Some(5)));
    rt.block_on(async {
        assert_eq!(count(&format!("SELECT COUNT(*) FROM {table}")).await, 3);
        execute(&format!("DROP TABLE {table}")).await;
    });
}

/// A unique index other than the key's: a record colliding there is dead-lettered naming
/// the index (as PostgreSQL does: SQLSTATE 23505 naming the constraint), the others are
/// written, batch-mates included; a rerun counts the written as duplicates.
#[test]
fn a_collision_on_another_unique_index_is_dead_lettered_naming_the_index() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let table = common::unique("my_uniq");
    rt.block_on(execute(&format!(
        "CREATE TABLE {table} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
           order_id VARCHAR(64) COLLATE utf8mb4_nopad_bin NOT NULL UNIQUE, \
           email VARCHAR(64) NOT NULL, UNIQUE KEY by_email (email))"
    )));
    let lines: Vec<String> = (1..=10)
        .map(|i| {
            let email = if i == 7 {
                "e3@x".to_string()
            } else {
                format!("e{i}@x")
            };
            format!("{{\"id\":\"o{i}\",\"email\":\"{email}\"}}")
        })
        .collect();
    let mapping =
        "key_column = \"order_id\"\nmax_batch = 100\n\n[sink.columns]\nemail = \"/email\"";
    let out = drain(&mysql_url(), &table, mapping, &lines);
    assert_eq!(figures(&out), (Some(9), Some(0), Some(1)));
    rt.block_on(async {
        let letters = letters(&table).await;
        assert_eq!(letters.len(), 1, "{letters:?}");
        assert_eq!(letters[0].0, "o7");
        assert_eq!(
            letters[0].1,
            "MySQL error 1062: Duplicate entry 'e3@x' for key 'by_email'"
        );
        let o3: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT order_id FROM {table} WHERE email = 'e3@x'"
        )))
        .fetch_one(&mut mysql_support::mysql().await)
        .await
        .unwrap();
        assert_eq!(o3, "o3", "the stored row is left as it was");
    });
    let again = drain(&mysql_url(), &table, mapping, &lines);
    assert_eq!(figures(&again), (Some(0), Some(9), Some(1)));
    rt.block_on(async {
        assert_eq!(count(&format!("SELECT COUNT(*) FROM {table}")).await, 9);
        execute(&format!("DROP TABLE {table}")).await;
    });
}
