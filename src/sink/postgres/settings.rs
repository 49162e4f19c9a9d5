//! Checks the PostgreSQL keys of `[sink]` while the configuration loads: names that reach
//! SQL are plain identifiers, and keys that only this sink reads are not set for others.

use crate::config::{Problems, SinkConfig, SinkKind};

pub fn validate(sink: &SinkConfig, p: &mut Problems) {
    // Keys of this sink set for another kind are refused by `config::kinds`.
    if sink.kind != SinkKind::Postgres {
        return;
    }
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
    crate::sink::columns::validate(sink, p);
    if sink.coerce.is_some() && sink.columns.is_none() {
        p.add(
            "sink.coerce",
            "only applies with [sink.columns] (a created table stores the whole record as jsonb)",
        );
    }
    for code in &sink.throttle_sqlstates {
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
    if let Some(connections) = sink.max_connections {
        p.count("sink.max_connections", u64::from(connections), 1, 10_000);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::only_key;
    use std::collections::BTreeMap;

    fn postgres() -> SinkConfig {
        SinkConfig {
            kind: SinkKind::Postgres,
            url: "postgresql://postgres@127.0.0.1/db".into(),
            table: "records".into(),
            ..Default::default()
        }
    }

    fn key_of(sink: &SinkConfig) -> std::borrow::Cow<'static, str> {
        only_key(|p| validate(sink, p))
    }

    fn ok(sink: &SinkConfig) {
        let mut p = Problems::default();
        validate(sink, &mut p);
        p.into_result().unwrap();
    }

    #[test]
    fn accepts_both_url_schemes_and_a_mapping() {
        let mut sink = postgres();
        ok(&sink);
        sink.url = "postgres://u@h:5432/d".into();
        sink.columns = Some(BTreeMap::from([
            ("amount".into(), "/amount".into()),
            ("doc".into(), "".into()),
        ]));
        sink.key_column = Some("order_id".into());
        sink.throttle_sqlstates = vec!["53300".into()];
        ok(&sink);
    }

    #[test]
    fn refuses_names_that_are_not_identifiers() {
        let mut sink = postgres();
        sink.columns = Some(BTreeMap::from([(
            "amount; drop table x".into(),
            "/a".into(),
        )]));
        assert_eq!(key_of(&sink), "sink.columns");
        // The other cases: sink/columns.rs, which PostgreSQL and MySQL share.
        sink.columns = Some(BTreeMap::from([("amount".into(), "/a".into())]));
        sink.key_column = Some("id\"".into());
        assert_eq!(key_of(&sink), "sink.key_column");
    }

    #[test]
    fn refuses_other_mistakes() {
        let mut sink = postgres();
        sink.url = "mysql://h/d".into();
        assert_eq!(key_of(&sink), "sink.url");
        let mut sink = postgres();
        sink.key_column = Some("id".into());
        assert_eq!(key_of(&sink), "sink.key_column");
        let mut sink = postgres();
        sink.throttle_sqlstates = vec!["5330".into()];
        assert_eq!(key_of(&sink), "sink.throttle_sqlstates");
        let mut sink = postgres();
        sink.coerce = Some(crate::sink::postgres::coerce::Coerce::Lenient);
        assert_eq!(key_of(&sink), "sink.coerce");
    }
}
