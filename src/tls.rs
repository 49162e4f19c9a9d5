//! TLS settings shared by the connections that take them as files (`[sink.tls]` for HTTP
//! sinks, `[source.tls]` for AMQP): a private CA, a client certificate, and — only when
//! written out — no verification at all. Also tells a certificate the other side refused
//! (or that we refused) from an outage: retrying cannot fix a wrong CA, an expired
//! certificate or a wrong hostname, so those stop the worker instead of waiting forever.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::settings::ConfigError;

#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// PEM file of the CA certificates that may sign the server's certificate; when set,
    /// only these are trusted (the system's roots are not).
    pub ca_file: Option<PathBuf>,
    /// PEM file of the client certificate (chain), for servers that require one.
    pub cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// Accept any certificate for any name. Off unless written `= true`; warned about.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// The configuration keys of one `[….tls]` table, for messages that name them.
pub struct TlsKeys {
    pub ca_file: &'static str,
    pub cert_file: &'static str,
    pub key_file: &'static str,
    pub insecure_skip_verify: &'static str,
}

pub const SINK_KEYS: TlsKeys = TlsKeys {
    ca_file: "sink.tls.ca_file",
    cert_file: "sink.tls.cert_file",
    key_file: "sink.tls.key_file",
    insecure_skip_verify: "sink.tls.insecure_skip_verify",
};

pub const SOURCE_KEYS: TlsKeys = TlsKeys {
    ca_file: "source.tls.ca_file",
    cert_file: "source.tls.cert_file",
    key_file: "source.tls.key_file",
    insecure_skip_verify: "source.tls.insecure_skip_verify",
};

impl TlsSettings {
    /// Every file is read and parsed now, so a wrong path or a key in the certificate's
    /// place exits 2 naming the key rather than failing at the first connection.
    pub fn validate(&self, keys: &TlsKeys) -> Result<(), ConfigError> {
        if let Some(path) = &self.ca_file {
            read_certs(path).map_err(|e| ConfigError::invalid(keys.ca_file, e))?;
            if self.insecure_skip_verify {
                return Err(ConfigError::invalid(
                    keys.insecure_skip_verify,
                    format!(
                        "verification is skipped, so {} would be ignored: keep one",
                        keys.ca_file
                    ),
                ));
            }
        }
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                read_certs(cert).map_err(|e| ConfigError::invalid(keys.cert_file, e))?;
                read_key(key).map_err(|e| ConfigError::invalid(keys.key_file, e))?;
            }
            (Some(_), None) => {
                return Err(ConfigError::invalid(
                    keys.key_file,
                    format!("required with {}", keys.cert_file),
                ));
            }
            (None, Some(_)) => {
                return Err(ConfigError::invalid(
                    keys.cert_file,
                    format!("required with {}", keys.key_file),
                ));
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// Says loudly, once at start, that this connection trusts anyone.
    pub fn warn_if_insecure(&self, keys: &TlsKeys, what: &str) {
        if self.insecure_skip_verify {
            tracing::warn!(
                "{} = true: {what} accepts ANY certificate for ANY name; the connection is encrypted but not authenticated, and anyone on the path can read and change it",
                keys.insecure_skip_verify
            );
        }
    }

    /// A reqwest client builder with these settings applied.
    pub fn apply_to_reqwest(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, String> {
        if let Some(path) = &self.ca_file {
            let pem = read_file(path)?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            builder = builder.tls_certs_only(certs);
        }
        if let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) {
            let mut pem = read_file(cert)?;
            pem.push(b'\n');
            pem.extend(read_file(key)?);
            let identity = reqwest::Identity::from_pem(&pem)
                .map_err(|e| format!("{} with {}: {e}", cert.display(), key.display()))?;
            builder = builder.identity(identity);
        }
        if self.insecure_skip_verify {
            builder = builder.tls_danger_accept_invalid_certs(true);
        }
        Ok(builder)
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The certificates in a PEM file; at least one.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_file(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The private key in a PEM file.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read_file(path)?;
    PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| format!("{} holds no usable PEM private key: {e}", path.display()))
}

/// Every HTTP client of the process starts here. reqwest is built without a crypto provider
/// of its own (its default, aws-lc, is the costliest crate of a fresh build), so ring is
/// installed as the process's provider first; a client built without it would panic.
pub fn http_client() -> reqwest::ClientBuilder {
    install_provider();
    reqwest::Client::builder()
}

/// Installs ring as the process's crypto provider, for the clients that take the
/// process's (reqwest, redis); once.
pub fn install_provider() {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        // Err only when a provider is installed already (lapin's or sqlx's first
        // connection installs ring too): either way ring is the one in place.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A server configuration from a certificate chain and its key (sim-sink's HTTPS).
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(read_certs(cert)?, read_key(key)?)
        .map_err(|e| format!("{} with {}: {e}", cert.display(), key.display()))?;
    Ok(Arc::new(config))
}

/// Why a TLS handshake failed for good, if it did: a certificate this side refused (an
/// unknown issuer, expired, issued for another name) or one the server refused (ours,
/// or none). Found anywhere in the error's chain, I/O errors' payloads included.
pub fn certificate_refused(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(why) = e.downcast_ref::<rustls::Error>().and_then(refusal) {
            return Some(why);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(why) = certificate_refused(inner)
        {
            return Some(why);
        }
        next = e.source();
    }
    None
}

fn refusal(err: &rustls::Error) -> Option<String> {
    use rustls::AlertDescription as A;
    use rustls::CertificateError as C;
    match err {
        rustls::Error::InvalidCertificate(cert) => Some(match cert {
            C::UnknownIssuer => "the server's certificate is not signed by a trusted CA (unknown issuer): is the CA file the one that signed it?".into(),
            C::Expired | C::ExpiredContext { .. } => format!("the server's certificate has expired ({err})"),
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                format!("the server's certificate is not valid for the host name connected to ({err})")
            }
            _ => format!("the server's certificate was refused: {err}"),
        }),
        rustls::Error::NoCertificatesPresented => {
            Some("the server presented no certificate".into())
        }
        rustls::Error::AlertReceived(
            alert @ (A::BadCertificate
            | A::UnknownCA
            | A::CertificateExpired
            | A::CertificateRevoked
            | A::CertificateUnknown
            | A::CertificateRequired
            | A::UnsupportedCertificate
            | A::AccessDenied),
        ) => Some(format!(
            "the server refused the client certificate (TLS alert {alert:?}): is a client certificate configured, and signed by a CA the server trusts?"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_found_inside_io_errors() {
        let inner = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, inner);
        let why = certificate_refused(&io).unwrap();
        assert!(why.contains("unknown issuer"), "{why}");
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(certificate_refused(&plain), None);
        let alert = rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired);
        assert!(
            certificate_refused(&alert)
                .unwrap()
                .contains("client certificate")
        );
    }

    #[test]
    fn files_are_checked_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let tls = TlsSettings {
            ca_file: Some(missing.clone()),
            ..Default::default()
        };
        let e = tls.validate(&SINK_KEYS).unwrap_err().to_string();
        assert!(
            e.contains("sink.tls.ca_file") && e.contains("nope.pem"),
            "{e}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not pem").unwrap();
        let tls = TlsSettings {
            ca_file: Some(empty.clone()),
            ..Default::default()
        };
        let e = tls.validate(&SOURCE_KEYS).unwrap_err().to_string();
        assert!(
            e.contains("source.tls.ca_file") && e.contains("no PEM"),
            "{e}"
        );
        let tls = TlsSettings {
            cert_file: Some(empty),
            ..Default::default()
        };
        let e = tls.validate(&SINK_KEYS).unwrap_err().to_string();
        assert!(e.contains("sink.tls.key_file"), "{e}");
    }
}
