//! The MySQL / MariaDB keys of `[sink]`, checked while the configuration loads, and the
//! connection settings built from them — kept here so that database-health probes (replica
//! lag, `Threads_running`) connect exactly as the sink does.

use std::collections::BTreeMap;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};

use crate::settings::Problems;
use crate::sink::settings::SinkSettings;
use crate::sink::url_parameters;

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

/// The URL parameters sqlx 0.9 reads for MySQL (`MySqlConnectOptions`' parser): any other
/// it skips without a word, so a misspelt `ssl_mode` would mean plaintext. `timezone`
/// is left out on purpose: the sessions stay in UTC (see `connect_options`).
const URL_PARAMETERS: &[&str] = &[
    "ssl-mode",
    "sslmode",
    "ssl-ca",
    "sslca",
    "ssl-cert",
    "sslcert",
    "ssl-key",
    "sslkey",
    "charset",
    "collation",
    "socket",
    "statement-cache-capacity",
];

/// A TLS setting written as another driver spells it (`useSSL`, `tls=true`, `ssl`).
fn tls_hint(name: &str) -> Option<&'static str> {
    let name = name.to_ascii_lowercase();
    (name.contains("ssl") || name.contains("tls")).then_some("ssl-mode")
}

/// The options every connection of the sink is opened with. Checked first: no URL
/// parameter sqlx would ignore, TLS files that exist. As MySQL's own client does,
/// `ssl-mode=REQUIRED` with an `ssl-ca` verifies the certificate against that CA.
///
/// The session's time zone stays sqlx's UTC (`+00:00`), so a TIMESTAMP column stores
/// the instant an RFC 3339 value names once the mapping has converted it to UTC; a
/// `timezone` parameter would shift every such value, and is refused.
pub fn connect_options(url: &str) -> Result<MySqlConnectOptions, String> {
    if !(url.starts_with("mysql://") || url.starts_with("mariadb://")) {
        return Err(format!(
            "kind = \"mysql\" needs a mysql:// or mariadb:// URL, got {:?}",
            crate::redact::redact(url)
        ));
    }
    if let Some(name) = url_parameters::names(url)
        .into_iter()
        .find(|n| n == "timezone" || n == "time-zone")
    {
        return Err(format!(
            "URL parameter {name:?} is not supported: sluice's sessions run in UTC so that \
             RFC 3339 values are stored as the instants they name"
        ));
    }
    if let Some(refused) = url_parameters::unknown_parameter(url, URL_PARAMETERS, tls_hint) {
        return Err(format!(
            "{refused}; MySQL's TLS parameters are ssl-mode (DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY), ssl-ca, ssl-cert, ssl-key"
        ));
    }
    let options =
        MySqlConnectOptions::from_str(url).map_err(|e| crate::redact::redact(&e.to_string()))?;
    if options.get_database().is_none() {
        return Err("the URL names no database (mysql://user:pass@host:3306/db)".into());
    }
    let file = |names: [&'static str; 2]| {
        url_parameters::value(url, &names).map(|path| (names[0], std::path::PathBuf::from(path)))
    };
    if let Some((name, path)) = file(["ssl-ca", "sslca"]) {
        crate::tls::read_certs(&path).map_err(|e| format!("{name}: {e}"))?;
    }
    match (file(["ssl-cert", "sslcert"]), file(["ssl-key", "sslkey"])) {
        (Some((name, cert)), Some((key_name, key))) => {
            crate::tls::read_certs(&cert).map_err(|e| format!("{name}: {e}"))?;
            crate::tls::read_key(&key).map_err(|e| format!("{key_name}: {e}"))?;
        }
        (None, None) => {}
        _ => {
            return Err(
                "ssl-cert and ssl-key go together (the client certificate and its key)".into(),
            );
        }
    }
    let options = match options.get_ssl_mode() {
        MySqlSslMode::Required if file(["ssl-ca", "sslca"]).is_some() => {
            options.ssl_mode(MySqlSslMode::VerifyCa)
        }
        _ => options,
    };
    // sqlx appends its own sql_mode flags on connect; the sink sets the whole mode itself.
    Ok(options.pipes_as_concat(false).no_engine_substitution(false))
}

/// What the TLS of a connection made with `options` proves, for `sluice check`.
pub fn verification(options: &MySqlConnectOptions) -> &'static str {
    match options.get_ssl_mode() {
        MySqlSslMode::VerifyIdentity => "certificate verified for the host name",
        MySqlSslMode::VerifyCa => "certificate verified against the CA, host name not checked",
        _ => "certificate NOT verified (ssl-mode is not VERIFY_CA or VERIFY_IDENTITY)",
    }
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
        sink.urls = vec![crate::sink::balanced::settings::EndpointSettings::Url(
            "mysql://h/db".into(),
        )];
        assert_eq!(key_of(&sink), "sink.urls");
    }

    #[test]
    fn parameters_sqlx_would_ignore_are_refused_with_the_nearest_known_one() {
        let refused =
            |query: &str| connect_options(&format!("mysql://u@h/db?{query}")).unwrap_err();
        for (query, named, near) in [
            ("ssl_mode=REQUIRED", "ssl_mode", "ssl-mode"),
            ("sslMode=REQUIRED", "sslMode", "sslmode"),
            ("tls=true", "tls", "ssl-mode"),
            ("useSSL=true", "useSSL", "ssl-mode"),
            ("ssl-mode=REQUIRED&ssl_ca=/x", "ssl_ca", "ssl-ca"),
        ] {
            let e = refused(query);
            assert!(
                e.contains(&format!(
                    "unknown URL parameter {named:?} (did you mean {near:?}?)"
                )),
                "{query}: {e}"
            );
        }
        assert!(refused("timezone=%2B02:00").contains("UTC"));
        assert!(refused("ssl-mode=REQUIRE").contains("ssl_mode"));
        assert!(refused("ssl-ca=/no/such/ca.pem").contains("/no/such/ca.pem"));
        assert!(refused("ssl-cert=/c.pem").contains("ssl-key"));
        let o = connect_options("mysql://u@h/db?ssl-mode=required&charset=utf8mb4").unwrap();
        assert!(matches!(o.get_ssl_mode(), MySqlSslMode::Required));
        let o = connect_options("mysql://u@h/db").unwrap();
        assert!(matches!(o.get_ssl_mode(), MySqlSslMode::Preferred));
    }

    #[test]
    fn required_with_a_ca_verifies_it_as_the_mysql_client_does() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, TEST_CERT).unwrap();
        let url = format!("mysql://u@h/db?ssl-mode=REQUIRED&ssl-ca={}", ca.display());
        let o = connect_options(&url).unwrap();
        assert!(matches!(o.get_ssl_mode(), MySqlSslMode::VerifyCa));
        assert!(verification(&o).contains("verified against the CA"));
    }

    /// A throw-away CA certificate (scripts/tls-certs.sh): only its parsing matters here.
    const TEST_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBmDCCAT2gAwIBAgIUU+T/eRdflL4zLf8Ze1f6c/e8QtkwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOc2x1aWNlIHRlc3QgQ0EwHhcNMjYxMjAyMDA0MTAzWhcNMzYx
MTI5MDA0MTAzWjAZMRcwFQYDVQQDDA5zbHVpY2UgdGVzdCBDQTBZMBMGByqGSM49
AgEGCCqGSM49AwEHA0IABK0Ar/duYv1/c7sp4ZYUe5iLKwCgi2IsPDu5b3AReTuL
O81JCtSBexJCYu1ZU6C9g0/MKEFZSx4mE1IuV263OWCjYzBhMB0GA1UdDgQWBBTR
lEddaU0frwjOC0il2fwjzDUlHDAfBgNVHSMEGDAWgBTRlEddaU0frwjOC0il2fwj
zDUlHDAPBgNVHRMBAf8EBTADAQH/MA4GA1UdDwEB/wQEAwIBBjAKBggqhkjOPQQD
AgNJADBGAiEA0D0PuBeSr6zJoHxiGgkZV2ZFCngDr5cdPjC1a/V/CzUCIQCAAYA7
H2/Pr5Mfk0ZtQGZjmsYQc8GYdCeWWEG84VMW3Q==
-----END CERTIFICATE-----
";
}
