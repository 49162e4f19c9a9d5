//! The MySQL / MariaDB keys of `[sink]`, checked while the configuration loads, and the
//! connection settings built from them — kept here so that database-health probes (replica
//! lag, `Threads_running`) connect exactly as the sink does.

use std::collections::BTreeMap;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sqlx::mysql::MySqlConnectOptions;

use crate::settings::Problems;
use crate::sink::settings::SinkSettings;

/// `[sink]` with `kind = "mysql"`: the keys only MySQL / MariaDB reads.
#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
pub struct MysqlSettings {
    /// Write into an existing table, column → JSON pointer into the payload (`""` is the
    /// whole payload). Absent: the table is created as key, payload, source.
    pub columns: Option<BTreeMap<String, String>>,
    /// With `columns`: the column that receives the record key; it must carry a unique
    /// index so redelivery is absorbed.
    pub key_column: Option<String>,
    /// Error numbers that mean "slow down" (treated like HTTP 429).
    #[serde(default)]
    pub throttle_errors: Vec<u16>,
}

/// Bad data is an error, not a warning that stores a truncated or zeroed value.
pub const SESSION_SQL_MODE: &str = "STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION";

impl MysqlSettings {
    pub(crate) fn validate(&self, sink: &SinkSettings, p: &mut Problems) {
        if !sink.urls.is_empty() {
            p.add(
                "sink.urls",
                "kind = \"mysql\" writes to one server: set url",
            );
        }
        if let Err(e) = connect_options(&sink.url) {
            p.add("sink.url", e);
        }
        crate::sink::columns::validate(self.columns.as_ref(), self.key_column.as_deref(), p);
        if let Some(zero) = self.throttle_errors.iter().find(|n| **n == 0) {
            p.add(
                "sink.throttle_errors",
                format!("{zero} is not a MySQL error number (e.g. 1040)"),
            );
        }
    }
}

/// The options every connection of the sink is opened with.
pub fn connect_options(url: &str) -> Result<MySqlConnectOptions, String> {
    if !(url.starts_with("mysql://") || url.starts_with("mariadb://")) {
        return Err(format!(
            "kind = \"mysql\" needs a mysql:// or mariadb:// URL, got {:?}",
            crate::redact::redact(url)
        ));
    }
    let options =
        MySqlConnectOptions::from_str(url).map_err(|e| crate::redact::redact(&e.to_string()))?;
    if options.get_database().is_none() {
        return Err("the URL names no database (mysql://user:pass@host:3306/db)".into());
    }
    // sqlx appends its own sql_mode flags on connect; the sink sets the whole mode itself.
    Ok(options.pipes_as_concat(false).no_engine_substitution(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::only_key;
    use crate::sink::settings::SinkBackend;

    fn ok(sink: &SinkSettings) {
        let mut p = Problems::default();
        validate(sink, &mut p);
        p.into_result().unwrap();
    }

    fn mysql() -> SinkSettings {
        let own = SinkBackend::Mysql(MysqlSettings::default());
        SinkSettings::new("mysql://u:p@127.0.0.1:3306/db", own)
    }

    fn own(sink: &mut SinkSettings) -> &mut MysqlSettings {
        match &mut sink.backend {
            SinkBackend::Mysql(m) => m,
            _ => unreachable!("a MySQL sink"),
        }
    }

    fn validate(sink: &SinkSettings, p: &mut Problems) {
        sink.mysql().unwrap().validate(sink, p);
    }

    fn key_of(sink: &SinkSettings) -> std::borrow::Cow<'static, str> {
        only_key(|p| validate(sink, p))
    }

    #[test]
    fn accepts_a_mysql_url_and_throttle_numbers() {
        let mut sink = mysql();
        own(&mut sink).throttle_errors = vec![1205];
        ok(&sink);
        sink.url = "mariadb://u@h/db".into();
        ok(&sink);
    }

    #[test]
    fn refuses_mistakes_by_key() {
        let mut sink = mysql();
        sink.url = "postgres://u@h/db".into();
        assert_eq!(key_of(&sink), "sink.url");
        sink.url = "mysql://u@h:3306".into();
        assert_eq!(key_of(&sink), "sink.url");
        let mut sink = mysql();
        own(&mut sink).throttle_errors = vec![0];
        assert_eq!(key_of(&sink), "sink.throttle_errors");
        let mut sink = mysql();
        sink.urls = vec![crate::sink::balanced::settings::EndpointConfig::Url(
            "mysql://h/db".into(),
        )];
        assert_eq!(key_of(&sink), "sink.urls");
    }
}
