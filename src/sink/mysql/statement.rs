//! The statements the MySQL sink runs: a multi-row `INSERT … ON DUPLICATE KEY UPDATE`
//! whose update assigns the key to itself — a redelivered key changes nothing, where
//! `INSERT IGNORE` would also turn bad data into warnings — cut into statements that fit
//! the server's `max_allowed_packet`.

/// A prepared statement takes at most 65,535 parameters.
const MAX_PARAMS: usize = 65_535;

/// Bytes a value adds to a statement's packet besides its text (length prefix, type).
pub const VALUE_OVERHEAD: usize = 10;

/// The session variable the no-op update counts duplicates in. The driver always asks for
/// "found rows", so affected rows count a redelivered key like a new one.
pub const DUPLICATES_VARIABLE: &str = "@sluice_duplicates";

/// The session variable the no-op update counts collisions in: rows the update met on a
/// unique index whose stored key is not the record's (another unique column, or a key
/// column whose collation holds distinct keys equal). Such a record is not a duplicate.
pub const COLLISIONS_VARIABLE: &str = "@sluice_collisions";

/// The insert of `rows` rows into `table` (already quoted) over `columns` (quoted, the
/// key's column first). The update leaves the row it met as it is and counts it: as a
/// duplicate when the stored key has the record key's very bytes, else as a collision.
pub fn insert(table: &str, columns: &[String], rows: usize) -> String {
    let key = &columns[0];
    let same_key = format!("CAST({key} AS BINARY) <=> CAST(VALUES({key}) AS BINARY)");
    let count = |variable: &str| format!("IF(({variable} := {variable} + 1) > 0, {key}, {key})");
    format!(
        "{} ON DUPLICATE KEY UPDATE {key} = IF({same_key}, {}, {})",
        plain_insert(table, columns, rows),
        count(DUPLICATES_VARIABLE),
        count(COLLISIONS_VARIABLE)
    )
}

/// The insert without its update: what a collided record is tried with alone, so that
/// the server names the unique index it collides on (error 1062).
pub fn plain_insert(table: &str, columns: &[String], rows: usize) -> String {
    let placeholders = format!("({})", vec!["?"; columns.len()].join(","));
    let mut sql = String::with_capacity(96 + rows * (placeholders.len() + 1));
    sql.push_str("INSERT INTO ");
    sql.push_str(table);
    sql.push_str(" (");
    sql.push_str(&columns.join(", "));
    sql.push_str(") VALUES ");
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push_str(&placeholders);
    }
    sql
}

/// A row that cannot fit in any statement.
#[derive(Debug, PartialEq)]
pub struct Oversized(pub usize);

/// Cuts rows of `sizes` bytes of values, `params` values each, into runs that each fit in
/// `budget` bytes and the parameter limit.
pub fn chunks(
    sizes: impl ExactSizeIterator<Item = usize>,
    params: usize,
    budget: usize,
) -> Result<Vec<std::ops::Range<usize>>, Oversized> {
    let most_rows = MAX_PARAMS / params.max(1);
    let len = sizes.len();
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, size) in sizes.enumerate() {
        let size = size + params * VALUE_OVERHEAD;
        if size > budget {
            return Err(Oversized(i));
        }
        if i > start && (bytes + size > budget || i - start == most_rows) {
            runs.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < len {
        runs.push(start..len);
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| format!("`{n}`")).collect()
    }

    #[test]
    fn the_update_assigns_the_key_to_itself() {
        let sql = insert("`t`", &names(&["key", "payload", "source"]), 2);
        assert!(sql.starts_with("INSERT INTO `t` (`key`, `payload`, `source`) VALUES (?,?,?),(?,?,?) ON DUPLICATE KEY UPDATE `key` = IF("));
        assert!(sql.contains(
            "IF(CAST(`key` AS BINARY) <=> CAST(VALUES(`key`) AS BINARY), IF((@sluice_duplicates := "
        ));
        assert!(
            sql.ends_with("IF((@sluice_collisions := @sluice_collisions + 1) > 0, `key`, `key`))")
        );
        assert!(!sql.contains("IGNORE"));
        let sql = insert("`t`", &names(&["order_id", "amount"]), 1);
        assert!(sql.starts_with("INSERT INTO `t` (`order_id`, `amount`) VALUES (?,?) ON DUPLICATE KEY UPDATE `order_id` = IF("));
    }

    #[test]
    fn statements_stay_under_the_budget() {
        let sizes = || std::iter::repeat_n(100 - 3 * VALUE_OVERHEAD, 10);
        assert_eq!(chunks(sizes(), 3, 1000).unwrap(), vec![0..10]);
        assert_eq!(
            chunks(sizes(), 3, 350).unwrap(),
            vec![0..3, 3..6, 6..9, 9..10]
        );
        assert_eq!(chunks(sizes(), 3, 99), Err(Oversized(0)));
        assert!(chunks(std::iter::empty(), 3, 99).unwrap().is_empty());
    }

    #[test]
    fn statements_stay_under_the_parameter_limit() {
        let most = MAX_PARAMS / 3;
        let runs = chunks(std::iter::repeat_n(1, most + 1), 3, usize::MAX).unwrap();
        assert_eq!(runs, vec![0..most, most..most + 1]);
        let most = MAX_PARAMS / 7;
        let runs = chunks(std::iter::repeat_n(1, most + 1), 7, usize::MAX).unwrap();
        assert_eq!(runs, vec![0..most, most..most + 1]);
    }
}
