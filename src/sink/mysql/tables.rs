//! The tables the MySQL sink writes: the records table it creates (a key column that
//! compares bytes) and the dead-letter table. Each is looked up first and created only
//! when missing, so a role allowed to write existing tables and nothing more can run.

use sqlx::{Executor, MySqlConnection};

use super::{identifier_of, reason};

/// The dead-letter table, in the sink's database.
pub const DEAD_LETTERS: &str = "sluice_dead_letters";

/// Collations of a created table's key column, best first: both compare code points
/// (UTF-8's byte order) with NO PAD, so `abc`, `ABC`, `àbc` and `abc ` are four keys.
/// `utf8mb4_bin` is PAD SPACE (`abc` = `abc `) and does not qualify.
const KEY_COLLATIONS: [&str; 2] = ["utf8mb4_nopad_bin", "utf8mb4_0900_bin"];

/// Whether a column of this collation holds two keys equal only when they have the same
/// bytes. `None`: a binary or non-string column, which compares its values exactly.
pub fn compares_bytes(collation: Option<&str>) -> bool {
    match collation {
        None => true,
        Some(c) => c == "binary" || c.ends_with("_nopad_bin") || c.ends_with("_0900_bin"),
    }
}

/// The collation a created table's key column gets on a server offering `available`.
pub fn key_collation(available: &[String]) -> Option<&'static str> {
    KEY_COLLATIONS
        .into_iter()
        .find(|k| available.iter().any(|a| a == k))
}

/// The records table sluice creates. A key longer than 255 characters is refused by the
/// server (error 1406) and dead-lettered.
pub fn created_ddl(quoted: &str, collation: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {quoted} (
            `key` VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL PRIMARY KEY,
            `payload` JSON NOT NULL,
            `source` TEXT,
            `ingested_at` TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
        ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4"
    )
}

/// The dead-letter table. Letters are told apart by `fingerprint` (lowercase hex of a
/// SHA-256, fixed length), which no collation can merge.
pub const DEAD_LETTER_DDL: &str = "CREATE TABLE IF NOT EXISTS sluice_dead_letters (
            id BIGINT AUTO_INCREMENT PRIMARY KEY,
            fingerprint CHAR(32) NOT NULL UNIQUE,
            position TEXT NOT NULL,
            `key` MEDIUMTEXT,
            raw LONGBLOB NOT NULL,
            reason TEXT NOT NULL,
            attempts INT NOT NULL,
            failed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
            target TEXT,
            source_key BLOB,
            headers MEDIUMTEXT
        ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4";

/// The dead-letter table's columns, in the order a letter binds them.
pub const DEAD_LETTER_COLUMNS: [&str; 9] = [
    "fingerprint",
    "position",
    "`key`",
    "raw",
    "reason",
    "attempts",
    "target",
    "source_key",
    "headers",
];

/// What is found of the records table sluice would create.
#[derive(Debug, PartialEq)]
pub enum Created {
    /// Not there (or invisible to this user): the run creates it.
    Missing,
    /// There, its key column comparing bytes (or no `key` column: the insert's prepare
    /// says what is wrong).
    Present,
    /// Created by an earlier sluice, whose key column took the server's default collation
    /// and merges distinct keys: the ALTER that fixes it.
    MergesKeys { collation: String, alter: String },
}

/// Looks the records table up in information_schema (which lists only the tables this
/// user has some right on).
pub async fn created(conn: &mut MySqlConnection, table: &str) -> Result<Created, String> {
    let (schema, name) = identifier_of(table);
    if !exists(conn, table).await? {
        return Ok(Created::Missing);
    }
    let key: Option<(Option<String>, String, String)> = sqlx::query_as(
        "SELECT CAST(COLLATION_NAME AS CHAR), CAST(COLUMN_TYPE AS CHAR), CAST(IS_NULLABLE AS CHAR) \
         FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = 'key'",
    )
    .bind(schema)
    .bind(name)
    .fetch_optional(&mut *conn)
    .await
    .map_err(|e| reason(&e))?;
    Ok(match key {
        Some((Some(collation), column_type, nullable)) if !compares_bytes(Some(&collation)) => {
            let wanted = key_collation(&collations(conn).await?).unwrap_or(KEY_COLLATIONS[0]);
            let null = if nullable == "YES" {
                "NULL"
            } else {
                "NOT NULL"
            };
            Created::MergesKeys {
                alter: format!(
                    "ALTER TABLE {} MODIFY `key` {column_type} CHARACTER SET utf8mb4 COLLATE {wanted} {null}",
                    super::backtick(table)
                ),
                collation,
            }
        }
        _ => Created::Present,
    })
}

/// Why a table created by an earlier sluice is refused: distinct keys would be merged.
pub fn merges_keys(table: &str, collation: &str, alter: &str) -> String {
    format!(
        "column `key` of {table} compares keys by {collation}, which holds keys that differ in \
         case, accents or trailing spaces equal (an earlier sluice created it so): records with \
         such keys would not all be written. Run, at a quiet moment (it rebuilds the table): {alter}"
    )
}

/// Whether `table` (`schema.table` or `table`) is there for this user.
pub async fn exists(conn: &mut MySqlConnection, table: &str) -> Result<bool, String> {
    let (schema, name) = identifier_of(table);
    let present: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
    )
    .bind(schema)
    .bind(name)
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| reason(&e))?;
    Ok(present > 0)
}

/// The collations of the server that could serve a created table's key.
pub async fn collations(conn: &mut MySqlConnection) -> Result<Vec<String>, String> {
    sqlx::query_scalar(
        "SELECT CAST(COLLATION_NAME AS CHAR) FROM information_schema.COLLATIONS \
         WHERE COLLATION_NAME IN (?, ?)",
    )
    .bind(KEY_COLLATIONS[0])
    .bind(KEY_COLLATIONS[1])
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| reason(&e))
}

/// The CREATE TABLE a run would execute for the records table, or why it cannot.
pub async fn records_ddl(conn: &mut MySqlConnection, quoted: &str) -> Result<String, String> {
    match key_collation(&collations(conn).await?) {
        Some(collation) => Ok(created_ddl(quoted, collation)),
        None => Err(format!(
            "this server has neither {} nor {}, so sluice cannot create a key column that compares bytes: \
             create {quoted} yourself (`key` VARBINARY(1020) NOT NULL PRIMARY KEY, payload JSON NOT NULL, \
             source TEXT, ingested_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
            KEY_COLLATIONS[0], KEY_COLLATIONS[1]
        )),
    }
}

/// Creates the records table (when `quoted` is given: sluice owns its shape and found it
/// missing) and the dead-letter table when missing.
pub async fn create_missing(
    conn: &mut MySqlConnection,
    records: Option<&str>,
) -> Result<(), String> {
    if let Some(quoted) = records {
        let ddl = records_ddl(conn, quoted).await?;
        conn.execute(sqlx::AssertSqlSafe(ddl))
            .await
            .map_err(|e| reason(&e))?;
    }
    if !exists(conn, DEAD_LETTERS).await? {
        conn.execute(DEAD_LETTER_DDL)
            .await
            .map_err(|e| reason(&e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_nopad_binary_collations_compare_bytes() {
        for exact in [
            None,
            Some("binary"),
            Some("utf8mb4_nopad_bin"),
            Some("utf8mb4_0900_bin"),
            Some("utf8mb3_nopad_bin"),
        ] {
            assert!(compares_bytes(exact), "{exact:?}");
        }
        for merging in [
            "utf8mb4_general_ci",
            "utf8mb4_bin",
            "utf8mb4_unicode_ci",
            "utf8mb4_0900_ai_ci",
            "utf8mb4_uca1400_as_cs",
            "latin1_swedish_ci",
        ] {
            assert!(!compares_bytes(Some(merging)), "{merging}");
        }
    }

    #[test]
    fn the_key_collation_is_the_best_the_server_has() {
        let have = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            key_collation(&have(&["utf8mb4_0900_bin", "utf8mb4_nopad_bin"])),
            Some("utf8mb4_nopad_bin")
        );
        assert_eq!(
            key_collation(&have(&["utf8mb4_0900_bin"])),
            Some("utf8mb4_0900_bin")
        );
        assert_eq!(key_collation(&have(&["utf8mb4_bin"])), None);
        assert!(created_ddl("`t`", "utf8mb4_nopad_bin").contains(
            "`key` VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY"
        ));
    }
}
