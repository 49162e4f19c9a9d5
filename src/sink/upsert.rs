//! Upsert mode: the newest version of a key wins, whatever order batches finish in. Every
//! record carries a version (its Kafka offset, or a number or timestamp in its value); the
//! sink applies a write only over an older version, and a delete leaves a tombstone row so
//! that an older version arriving later cannot bring the key back.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::record::{Version, VersionKind};
use crate::settings::Problems;
use crate::sink::settings::{SinkKind, SinkSettings};
use crate::source::settings::SourceKind;

/// `[sink] mode`: what a key that is already there means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SinkMode {
    /// The first version of a key stays (`ON CONFLICT DO NOTHING`): append-only events.
    #[default]
    Insert,
    /// The newest version of a key wins: state (profiles, CDC change events, levels).
    Upsert,
}

/// `sink.key` naming the Kafka message key instead of a JSON pointer into the value.
pub const MESSAGE_KEY: &str = "@key";

/// `sink.version` naming the record's source position (the default in upsert mode).
pub const SOURCE_VERSION: &str = "source";

/// Where a record's version comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionFrom {
    Source,
    Pointer(String),
}

/// The upsert settings the decoder applies to each record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upsert {
    pub version: VersionFrom,
    /// A Kafka tombstone (a message without a value) deletes its key.
    pub delete_on_tombstone: bool,
    /// A record whose value at this pointer is `true` (or `"true"`) deletes its key.
    pub delete_flag: Option<String>,
}

impl Upsert {
    /// The settings when `sink.mode = "upsert"`, else `None`.
    pub fn from_config(sink: &SinkSettings) -> Option<Self> {
        (sink.mode == SinkMode::Upsert).then(|| Upsert {
            version: match sink.version.as_deref() {
                None | Some(SOURCE_VERSION) => VersionFrom::Source,
                Some(pointer) => VersionFrom::Pointer(pointer.to_string()),
            },
            delete_on_tombstone: sink.delete_on_tombstone,
            delete_flag: sink.delete_flag.clone(),
        })
    }

    /// The version of a record at `offset` in its partition whose value is `value`
    /// (`None` for a tombstone); the reason when it has none that can be compared.
    pub fn version_of(&self, offset: u64, value: Option<&Value>) -> Result<Version, String> {
        match &self.version {
            VersionFrom::Source => Ok(Version {
                kind: VersionKind::Source,
                numeric: offset.to_string(),
            }),
            VersionFrom::Pointer(pointer) => match value.and_then(|v| v.pointer(pointer)) {
                None | Some(Value::Null) => Err(format!("missing version {pointer}")),
                Some(found) => {
                    parse_version(found).map_err(|why| format!("version {pointer} {why}: {found}"))
                }
            },
        }
    }

    /// Whether a record's value marks it as a delete.
    pub fn is_delete(&self, value: &Value) -> bool {
        self.delete_flag.as_deref().is_some_and(|pointer| {
            matches!(value.pointer(pointer), Some(Value::Bool(true)))
                || matches!(value.pointer(pointer), Some(Value::String(s)) if s == "true")
        })
    }
}

/// A number (its exact text) or an RFC 3339 timestamp with an offset (nanoseconds since
/// the epoch, so a later instant is a larger number whatever offset it was written in).
pub fn parse_version(value: &Value) -> Result<Version, &'static str> {
    match value {
        Value::Number(n) => Ok(Version {
            kind: VersionKind::Number,
            numeric: n.to_string(),
        }),
        Value::String(s) => {
            let at = chrono::DateTime::parse_from_rfc3339(s)
                .map_err(|_| "is neither a number nor an RFC 3339 timestamp")?;
            let nanos = at
                .timestamp_nanos_opt()
                .ok_or("is a timestamp outside 1677-2262")?;
            Ok(Version {
                kind: VersionKind::Time,
                numeric: nanos.to_string(),
            })
        }
        _ => Err("is neither a number nor an RFC 3339 timestamp"),
    }
}

/// Checks the upsert keys while the configuration loads.
pub fn validate(sink: &SinkSettings, source: SourceKind, p: &mut Problems) {
    let postgres = sink.postgres();
    let version_column = postgres.and_then(|s| s.version_column.as_ref());
    let deleted_column = postgres.and_then(|s| s.deleted_column.as_ref());
    if sink.mode != SinkMode::Upsert {
        for (set, key) in [
            (sink.version.is_some(), "sink.version"),
            (sink.delete_on_tombstone, "sink.delete_on_tombstone"),
            (sink.delete_flag.is_some(), "sink.delete_flag"),
            (version_column.is_some(), "sink.version_column"),
            (deleted_column.is_some(), "sink.deleted_column"),
        ] {
            if set {
                p.add(key, "only applies with sink.mode = \"upsert\"");
            }
        }
        if sink.key.as_deref() == Some(MESSAGE_KEY) && source != SourceKind::Kafka {
            p.add(
                "sink.key",
                "\"@key\" is the Kafka message key: the source is not Kafka",
            );
        }
        return;
    }
    match sink.kind() {
        SinkKind::Postgres => {}
        SinkKind::Mysql => p.add(
            "sink.mode",
            "\"upsert\" is not implemented for kind = \"mysql\" yet (only for kind = \"postgres\"); use mode = \"insert\"",
        ),
        other => p.add(
            "sink.mode",
            format!(
                "\"upsert\" is only implemented for kind = \"postgres\", not {:?}",
                format!("{other:?}").to_ascii_lowercase()
            ),
        ),
    }
    if sink.key.is_none() {
        p.add(
            "sink.key",
            "upsert needs a key that names the entity (a JSON pointer such as \"/id\", or \"@key\" for the Kafka message key), not the source position",
        );
    }
    if sink.key.as_deref() == Some(MESSAGE_KEY) && source != SourceKind::Kafka {
        p.add(
            "sink.key",
            "\"@key\" is the Kafka message key: the source is not Kafka",
        );
    }
    match sink.version.as_deref() {
        None | Some(SOURCE_VERSION) => {
            if source != SourceKind::Kafka {
                p.add(
                    "sink.version",
                    "\"source\" (the default) orders versions by Kafka offset; a file or AMQP position is no version (a rotated file starts again at 0, a delivery tag at 1): set a JSON pointer such as \"/updated_at\"",
                );
            }
        }
        Some(pointer) if !pointer.starts_with('/') => p.add(
            "sink.version",
            format!("{pointer:?} is neither \"source\" nor a JSON pointer (\"/updated_at\")"),
        ),
        Some(_) => {}
    }
    if sink.delete_on_tombstone {
        if source != SourceKind::Kafka {
            p.add(
                "sink.delete_on_tombstone",
                "tombstones are Kafka messages without a value: the source is not Kafka",
            );
        }
        if sink.key.as_deref() != Some(MESSAGE_KEY) {
            p.add(
                "sink.delete_on_tombstone",
                "a tombstone has no value to read the key from: set sink.key = \"@key\"",
            );
        }
        if sink.version.as_deref().is_some_and(|v| v != SOURCE_VERSION) {
            p.add(
                "sink.delete_on_tombstone",
                "a tombstone has no value to read a version from: use sink.version = \"source\", or mark deletes with sink.delete_flag",
            );
        }
    }
    if let Some(flag) = &sink.delete_flag
        && !flag.starts_with('/')
    {
        p.add(
            "sink.delete_flag",
            format!("{flag:?} is not a JSON pointer (\"/__deleted\")"),
        );
    }
    if sink.columns().is_none() {
        for (set, key) in [
            (version_column.is_some(), "sink.version_column"),
            (deleted_column.is_some(), "sink.deleted_column"),
        ] {
            if set {
                p.add(
                    key,
                    "only applies with [sink.columns] (a created table's columns are \"version\" and \"deleted\")",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::only_key;
    use crate::sink::postgres::settings::PostgresSettings;
    use crate::sink::settings::SinkBackend;
    use serde_json::json;

    fn upsert() -> SinkSettings {
        let own = SinkBackend::Postgres(PostgresSettings::default());
        SinkSettings {
            key: Some("/id".into()),
            mode: SinkMode::Upsert,
            ..SinkSettings::new("postgresql://postgres@127.0.0.1/db", own)
        }
    }

    fn key_of(sink: &SinkSettings, source: SourceKind) -> std::borrow::Cow<'static, str> {
        only_key(|p| validate(sink, source, p))
    }

    #[test]
    fn versions_are_numbers_or_timestamps() {
        assert_eq!(
            parse_version(&json!(12345678901234567890_u64)).unwrap(),
            Version {
                kind: VersionKind::Number,
                numeric: "12345678901234567890".into()
            }
        );
        let a = parse_version(&json!("2024-05-01T10:00:00+02:00")).unwrap();
        let b = parse_version(&json!("2024-05-01T09:00:00.000000001Z")).unwrap();
        assert_eq!(a.kind, VersionKind::Time);
        let (a, b): (i64, i64) = (a.numeric.parse().unwrap(), b.numeric.parse().unwrap());
        assert!(b > a, "09:00Z is after 10:00+02:00");
        assert_eq!(b - a, 3_600_000_000_001);
        for bad in [
            json!("yesterday"),
            json!("2024-05-01 10:00"),
            json!(true),
            json!([1]),
        ] {
            assert!(parse_version(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_record_without_a_version_says_so() {
        let u = Upsert {
            version: VersionFrom::Pointer("/v".into()),
            delete_on_tombstone: false,
            delete_flag: Some("/gone".into()),
        };
        assert_eq!(
            u.version_of(5, Some(&json!({"v": 3}))).unwrap().numeric,
            "3"
        );
        assert_eq!(
            u.version_of(5, Some(&json!({"x": 3}))).unwrap_err(),
            "missing version /v"
        );
        let why = u.version_of(5, Some(&json!({"v": "soon"}))).unwrap_err();
        assert!(why.contains("neither a number nor"), "{why}");
        assert!(u.is_delete(&json!({"gone": true})));
        assert!(u.is_delete(&json!({"gone": "true"})));
        assert!(!u.is_delete(&json!({"gone": false})));
        let source = Upsert {
            version: VersionFrom::Source,
            ..u
        };
        assert_eq!(source.version_of(42, None).unwrap().numeric, "42");
    }

    #[test]
    fn upsert_settings_are_checked() {
        let mut p = Problems::default();
        validate(&upsert(), SourceKind::Kafka, &mut p);
        p.into_result().unwrap();
        let mut sink = upsert();
        sink.backend = SinkBackend::Mysql(Default::default());
        sink.url = "mysql://h/d".into();
        assert_eq!(key_of(&sink, SourceKind::Kafka), "sink.mode");
        assert_eq!(key_of(&upsert(), SourceKind::File), "sink.version");
        let mut sink = upsert();
        sink.version = Some("/updated_at".into());
        let mut p = Problems::default();
        validate(&sink, SourceKind::File, &mut p);
        p.into_result().unwrap();
        sink.version = Some("updated_at".into());
        assert_eq!(key_of(&sink, SourceKind::File), "sink.version");
        let mut sink = upsert();
        sink.delete_on_tombstone = true;
        assert_eq!(
            key_of(&sink, SourceKind::Kafka),
            "sink.delete_on_tombstone",
            "needs @key"
        );
        sink.key = Some(MESSAGE_KEY.into());
        let mut p = Problems::default();
        validate(&sink, SourceKind::Kafka, &mut p);
        p.into_result().unwrap();
        let mut sink = upsert();
        sink.key = None;
        assert_eq!(key_of(&sink, SourceKind::Kafka), "sink.key");
        let mut insert = upsert();
        insert.mode = SinkMode::Insert;
        insert.version = Some("/v".into());
        assert_eq!(key_of(&insert, SourceKind::Kafka), "sink.version");
    }
}
