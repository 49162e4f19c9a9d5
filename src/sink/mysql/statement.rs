//! The statements the MySQL sink runs: a multi-row `INSERT … ON DUPLICATE KEY UPDATE`
//! whose update assigns the key to itself — a redelivered key changes nothing, where
//! `INSERT IGNORE` would also turn bad data into warnings — cut into statements that fit
//! the server's `max_allowed_packet`.

use crate::record::Row;

/// Parameters per row: key, payload, source.
const PARAMS_PER_ROW: usize = 3;

/// A prepared statement takes at most 65,535 parameters.
pub const MAX_ROWS_PER_STATEMENT: usize = 65_535 / PARAMS_PER_ROW;

/// Bytes a row adds to a statement's packet besides its values (length prefixes, types).
const ROW_OVERHEAD: usize = 32;

/// The session variable the no-op update counts duplicates in. The driver always asks for
/// "found rows", so affected rows count a redelivered key like a new one.
pub const DUPLICATES_VARIABLE: &str = "@sluice_duplicates";

/// The insert for `rows` rows into `table` (already quoted).
pub fn insert(table: &str, rows: usize) -> String {
    let mut sql = String::with_capacity(96 + rows * 10);
    sql.push_str("INSERT INTO ");
    sql.push_str(table);
    sql.push_str(" (`key`, `payload`, `source`) VALUES ");
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push_str("(?,?,?)");
    }
    sql.push_str(" ON DUPLICATE KEY UPDATE `key` = IF((");
    sql.push_str(DUPLICATES_VARIABLE);
    sql.push_str(" := ");
    sql.push_str(DUPLICATES_VARIABLE);
    sql.push_str(" + 1) > 0, `key`, `key`)");
    sql
}

/// A row that cannot fit in any statement.
#[derive(Debug, PartialEq)]
pub struct Oversized(pub usize);

/// Cuts `rows` into runs that each fit in `budget` bytes (and the parameter limit).
pub fn chunks(rows: &[Row], budget: usize) -> Result<Vec<std::ops::Range<usize>>, Oversized> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, row) in rows.iter().enumerate() {
        let size = row.key.len() + row.payload.len() + row.origin.len() + ROW_OVERHEAD;
        if size > budget {
            return Err(Oversized(i));
        }
        if i > start && (bytes + size > budget || i - start == MAX_ROWS_PER_STATEMENT) {
            runs.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < rows.len() {
        runs.push(start..rows.len());
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(payload_len: usize) -> Row {
        Row {
            key: "k".into(),
            payload: "x".repeat(payload_len),
            origin: "o".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_update_assigns_the_key_to_itself() {
        let sql = insert("`t`", 2);
        assert!(sql.starts_with("INSERT INTO `t` (`key`, `payload`, `source`) VALUES (?,?,?),(?,?,?) ON DUPLICATE KEY UPDATE `key` = IF("));
        assert!(sql.ends_with(", `key`, `key`)"));
        assert!(!sql.contains("IGNORE"));
    }

    #[test]
    fn statements_stay_under_the_budget() {
        let rows: Vec<Row> = (0..10).map(|_| row(100 - ROW_OVERHEAD - 2)).collect();
        assert_eq!(chunks(&rows, 1000).unwrap(), vec![0..10]);
        assert_eq!(chunks(&rows, 350).unwrap(), vec![0..3, 3..6, 6..9, 9..10]);
        assert_eq!(chunks(&rows, 99), Err(Oversized(0)));
        assert!(chunks(&[], 99).unwrap().is_empty());
    }

    #[test]
    fn statements_stay_under_the_parameter_limit() {
        let rows: Vec<Row> = (0..MAX_ROWS_PER_STATEMENT + 1).map(|_| row(1)).collect();
        let runs = chunks(&rows, usize::MAX).unwrap();
        assert_eq!(
            runs,
            vec![
                0..MAX_ROWS_PER_STATEMENT,
                MAX_ROWS_PER_STATEMENT..rows.len()
            ]
        );
    }
}
