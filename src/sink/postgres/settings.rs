//! `[sink]` with `kind = "postgres"`: the keys only PostgreSQL reads, and their checks
//! while the configuration loads — names that reach SQL are plain identifiers.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::coerce::Coerce;
use crate::settings::Problems;
use crate::sink::settings::SinkSettings;

#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
pub struct PostgresSettings {
    /// Write into an existing table, column → JSON pointer into the payload (`""` is the
    /// whole payload). Absent: the table is created as key, payload, source.
    pub columns: Option<BTreeMap<String, String>>,
    /// With `columns`: the column that receives the record key; it must carry a unique
    /// index so redelivery is absorbed.
    pub key_column: Option<String>,
    /// Upsert with `columns`: the column keeping each row's version (default "version").
    pub version_column: Option<String>,
    /// Upsert with `columns`: the boolean column marking a deleted key (default
    /// "deleted"; needed only when deletes are configured).
    pub deleted_column: Option<String>,
    /// With `columns`: "strict" (default) writes a value only into a column of its own
    /// JSON type; "lenient" also lets PostgreSQL parse scalars (the type table in docs/sinks/postgres.md).
    pub coerce: Option<Coerce>,
    /// SQLSTATEs that mean "slow down" (treated like HTTP 429), e.g. "53300".
    #[serde(default)]
    pub throttle_sqlstates: Vec<String>,
    /// Connections in the pool; default `concurrency.max + 1`.
    pub max_connections: Option<u32>,
}

impl PostgresSettings {
    pub(crate) fn validate(&self, sink: &SinkSettings, p: &mut Problems) {
        let (key, urls): (&'static str, Vec<&str>) = if sink.urls.is_empty() {
            let listed = sink.discovery.file.is_some();
            (
                "sink.url",
                if listed {
                    vec![]
                } else {
                    vec![sink.url.as_str()]
                },
            )
        } else {
            ("sink.urls", sink.urls.iter().map(|e| e.url()).collect())
        };
        for url in urls {
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                p.add(
                    key,
                    format!(
                        "kind = \"postgres\" needs a postgres:// or postgresql:// URL, got {url:?}"
                    ),
                );
            } else {
                p.check(super::tls::validate_url(url, key));
            }
        }
        crate::sink::columns::validate(self.columns.as_ref(), self.key_column.as_deref(), p);
        if self.coerce.is_some() && self.columns.is_none() {
            p.add(
                "sink.coerce",
                "only applies with [sink.columns] (a created table stores the whole record as jsonb)",
            );
        }
        for code in &self.throttle_sqlstates {
            let valid = code.len() == 5
                && code
                    .chars()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase());
            if !valid {
                p.add(
                    "sink.throttle_sqlstates",
                    format!(
                        "{code:?} is not a SQLSTATE (five digits or capital letters, e.g. \"53300\")"
                    ),
                );
            }
        }
        if let Some(connections) = self.max_connections {
            p.count("sink.max_connections", u64::from(connections), 1, 10_000);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::only_key;
    use crate::sink::settings::SinkBackend;

    /// A PostgreSQL sink at `url` with these keys of its own.
    struct Sink {
        url: String,
        own: PostgresSettings,
    }

    fn postgres() -> Sink {
        Sink {
            url: "postgresql://postgres@127.0.0.1/db".into(),
            own: PostgresSettings::default(),
        }
    }

    fn check(sink: &Sink, p: &mut Problems) {
        let whole = SinkSettings::new(&sink.url, SinkBackend::Postgres(sink.own.clone()));
        sink.own.validate(&whole, p);
    }

    fn key_of(sink: &Sink) -> std::borrow::Cow<'static, str> {
        only_key(|p| check(sink, p))
    }

    fn ok(sink: &Sink) {
        let mut p = Problems::default();
        check(sink, &mut p);
        p.into_result().unwrap();
    }

    #[test]
    fn accepts_both_url_schemes_and_a_mapping() {
        let mut sink = postgres();
        ok(&sink);
        sink.url = "postgres://u@h:5432/d".into();
        sink.own.columns = Some(BTreeMap::from([
            ("amount".into(), "/amount".into()),
            ("doc".into(), "".into()),
        ]));
        sink.own.key_column = Some("order_id".into());
        sink.own.throttle_sqlstates = vec!["53300".into()];
        ok(&sink);
    }

    #[test]
    fn refuses_names_that_are_not_identifiers() {
        let mut sink = postgres();
        sink.own.columns = Some(BTreeMap::from([(
            "amount; drop table x".into(),
            "/a".into(),
        )]));
        assert_eq!(key_of(&sink), "sink.columns");
        // The other cases: sink/columns.rs, which PostgreSQL and MySQL share.
        sink.own.columns = Some(BTreeMap::from([("amount".into(), "/a".into())]));
        sink.own.key_column = Some("id\"".into());
        assert_eq!(key_of(&sink), "sink.key_column");
    }

    #[test]
    fn refuses_other_mistakes() {
        let mut sink = postgres();
        sink.url = "mysql://h/d".into();
        assert_eq!(key_of(&sink), "sink.url");
        let mut sink = postgres();
        sink.own.key_column = Some("id".into());
        assert_eq!(key_of(&sink), "sink.key_column");
        let mut sink = postgres();
        sink.own.throttle_sqlstates = vec!["5330".into()];
        assert_eq!(key_of(&sink), "sink.throttle_sqlstates");
        let mut sink = postgres();
        sink.own.coerce = Some(crate::sink::postgres::coerce::Coerce::Lenient);
        assert_eq!(key_of(&sink), "sink.coerce");
    }
}
