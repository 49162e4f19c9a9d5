//! `[sink.columns]` and `sink.key_column`, shared by the SQL sinks that write into an
//! existing table: every name that reaches SQL is one plain identifier, every value a JSON
//! pointer, and the key column is not mapped twice.

use std::collections::BTreeMap;

use crate::settings::Problems;
use crate::sink::identifier;

/// Checks `[sink.columns]` and `sink.key_column` of a sink whose kind reads them.
pub fn validate(
    columns: Option<&BTreeMap<String, String>>,
    key_column: Option<&str>,
    p: &mut Problems,
) {
    if let Some(columns) = columns {
        if columns.is_empty() {
            p.add(
                "sink.columns",
                "name at least one column, or leave the table out to have it created",
            );
        }
        for (column, pointer) in columns {
            if let Err(e) = column_name(column) {
                p.add("sink.columns", e);
            }
            if !(pointer.is_empty() || pointer.starts_with('/')) {
                p.add(
                    "sink.columns",
                    format!(
                        "{column} = {pointer:?} is not a JSON pointer (\"/field\", or \"\" for the whole record)"
                    ),
                );
            }
        }
    }
    if let Some(key_column) = key_column {
        if let Err(e) = column_name(key_column) {
            p.add("sink.key_column", e);
        }
        match columns {
            None => p.add(
                "sink.key_column",
                "only applies with [sink.columns] (a created table's key column is \"key\")",
            ),
            Some(columns) if columns.contains_key(key_column) => p.add(
                "sink.key_column",
                format!(
                    "{key_column:?} receives the record key; do not map it in [sink.columns] too"
                ),
            ),
            Some(_) => {}
        }
    }
}

/// A column is one plain identifier (no schema part).
fn column_name(name: &str) -> Result<(), String> {
    if name.contains('.') {
        return Err(format!("{name:?} is not a column name"));
    }
    identifier::validate(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::only_key;
    use crate::sink::mysql::settings::MysqlSettings as Mapping;
    use crate::sink::settings::{SinkBackend, SinkSettings};

    fn sink() -> Mapping {
        Mapping::default()
    }

    fn check(sink: &Mapping, p: &mut Problems) {
        validate(sink.columns.as_ref(), sink.key_column.as_deref(), p);
    }

    fn key_of(sink: &Mapping) -> std::borrow::Cow<'static, str> {
        only_key(|p| check(sink, p))
    }

    #[test]
    fn accepts_a_mapping_with_its_key_column() {
        let mut sink = sink();
        sink.columns = Some(BTreeMap::from([
            ("amount".into(), "/amount".into()),
            ("doc".into(), "".into()),
        ]));
        sink.key_column = Some("order_id".into());
        let mut p = Problems::default();
        check(&sink, &mut p);
        p.into_result().unwrap();
        let whole = SinkSettings::new("mysql://h/db", SinkBackend::Mysql(sink));
        assert_eq!(whole.key_column(), "order_id");
    }

    #[test]
    fn refuses_names_that_are_not_identifiers() {
        let mut sink = sink();
        sink.columns = Some(BTreeMap::from([(
            "amount`; drop table x".into(),
            "/a".into(),
        )]));
        assert_eq!(key_of(&sink), "sink.columns");
        sink.columns = Some(BTreeMap::from([("s.amount".into(), "/a".into())]));
        assert_eq!(key_of(&sink), "sink.columns");
        sink.columns = Some(BTreeMap::from([("amount".into(), "a".into())]));
        assert_eq!(key_of(&sink), "sink.columns");
        sink.columns = Some(BTreeMap::new());
        assert_eq!(key_of(&sink), "sink.columns");
        sink.columns = Some(BTreeMap::from([("amount".into(), "/a".into())]));
        sink.key_column = Some("id`".into());
        assert_eq!(key_of(&sink), "sink.key_column");
        sink.key_column = Some("amount".into());
        assert_eq!(key_of(&sink), "sink.key_column");
    }

    #[test]
    fn a_key_column_needs_a_mapping() {
        let mut sink = sink();
        sink.key_column = Some("id".into());
        assert_eq!(key_of(&sink), "sink.key_column");
    }
}
