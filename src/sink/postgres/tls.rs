//! TLS to PostgreSQL the way libpq users write it: `sslmode` (disable, prefer — the
//! default —, require, verify-ca, verify-full), `sslrootcert`, `sslcert` and `sslkey` as
//! URL parameters, for the sink and the lease store alike.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::settings::ConfigError;

/// The URL's connect options. As in libpq, `sslmode=require` with an `sslrootcert`
/// verifies the certificate against that CA (verify-ca); sqlx alone would not. A
/// parameter the driver would ignore is refused ([`super::url`]).
pub fn connect_options(url: &str) -> Result<PgConnectOptions, String> {
    super::url::check_parameters(url)?;
    let options = PgConnectOptions::from_str(url).map_err(|e| match e {
        // sqlx says "error with configuration" itself: once is enough.
        sqlx::Error::Configuration(inner) => inner.to_string(),
        other => other.to_string(),
    })?;
    let root_cert = query_value(url, "sslrootcert").is_some();
    if root_cert && matches!(options.get_ssl_mode(), PgSslMode::Require) {
        return Ok(options.ssl_mode(PgSslMode::VerifyCa));
    }
    Ok(options)
}

/// Checks a URL while the configuration loads: it parses, and the certificate and key
/// files it names exist and hold PEM, so a wrong path exits 2 naming `key`.
pub fn validate_url(url: &str, key: &'static str) -> Result<(), ConfigError> {
    connect_options(url).map_err(|e| ConfigError::invalid(key, e))?;
    let file = |name: &str| query_value(url, name).map(std::path::PathBuf::from);
    if let Some(path) = file("sslrootcert") {
        crate::tls::read_certs(&path)
            .map_err(|e| ConfigError::invalid(key, format!("sslrootcert: {e}")))?;
    }
    match (file("sslcert"), file("sslkey")) {
        (Some(cert), Some(keyfile)) => {
            crate::tls::read_certs(&cert)
                .map_err(|e| ConfigError::invalid(key, format!("sslcert: {e}")))?;
            crate::tls::read_key(&keyfile)
                .map_err(|e| ConfigError::invalid(key, format!("sslkey: {e}")))?;
        }
        (None, None) => {}
        _ => {
            return Err(ConfigError::invalid(
                key,
                "sslcert and sslkey go together (the client certificate and its key)",
            ));
        }
    }
    Ok(())
}

/// What the TLS of a connection made with `options` proves, for `sluice check`.
pub fn verification(options: &PgConnectOptions) -> &'static str {
    match options.get_ssl_mode() {
        PgSslMode::VerifyFull => "certificate verified for the host name",
        PgSslMode::VerifyCa => "certificate verified against the CA, host name not checked",
        _ => "certificate NOT verified (sslmode is not verify-ca or verify-full)",
    }
}

fn query_value(url: &str, name: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    parsed
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_with_a_root_certificate_verifies_the_ca_as_libpq_does() {
        let o = connect_options("postgres://u@h/d?sslmode=require&sslrootcert=/x.pem").unwrap();
        assert!(matches!(o.get_ssl_mode(), PgSslMode::VerifyCa));
        let o = connect_options("postgres://u@h/d?sslmode=require").unwrap();
        assert!(matches!(o.get_ssl_mode(), PgSslMode::Require));
        let o = connect_options("postgres://u@h/d").unwrap();
        assert!(matches!(o.get_ssl_mode(), PgSslMode::Prefer));
    }

    #[test]
    fn bad_modes_and_missing_files_name_the_key() {
        let e = validate_url("postgres://u@h/d?sslmode=verify", "sink.url")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("sink.url"), "{e}");
        assert_eq!(e.matches("is not a TLS mode").count(), 1, "said once: {e}");
        assert!(!e.contains("error with configuration"), "{e}");
        let e = validate_url("postgres://u@h/d?ssl_mode=require", "leases.store")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("leases.store") && e.contains("sslmode"),
            "{e}"
        );
        let e = validate_url(
            "postgres://u@h/d?sslmode=verify-full&sslrootcert=/no/such/ca.pem",
            "leases.store",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("leases.store") && e.contains("/no/such/ca.pem"),
            "{e}"
        );
        let e = validate_url("postgres://u@h/d?sslcert=/c.pem", "sink.url").unwrap_err();
        assert!(e.to_string().contains("sslkey"), "{e}");
    }
}
