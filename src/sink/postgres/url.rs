//! The query parameters of a PostgreSQL URL. sqlx honours a few of libpq's and ignores the
//! rest with a warning, so `?ssl_mode=require`, `?SSLMODE=require` or `?ssl=true` would
//! connect as if nothing were said — in plaintext wherever the server allows it. libpq
//! refuses such a URL, and so does sluice: every parameter must be one the driver honours,
//! or the configuration exits 2 naming it and the nearest known one.

/// The parameters sqlx 0.9 reads (sqlx-postgres `options/parse.rs`), libpq's spelling.
const KNOWN: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// sqlx's own spellings of some of them, honoured as well.
const SQLX_ALIASES: &[&str] = &[
    "ssl-mode",
    "ssl-root-cert",
    "ssl-ca",
    "ssl-cert",
    "ssl-key",
    "statement-cache-capacity",
];

/// libpq parameters sqlx does not implement: silently ignored, each would change what
/// the connection does (`target_session_attrs` could land writes on a standby, `sslcrl`
/// would accept a revoked certificate), so they are refused rather than dropped.
const LIBPQ_ONLY: &[&str] = &[
    "connect_timeout",
    "client_encoding",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslnegotiation",
    "sslcompression",
    "sslpassword",
    "sslcertmode",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "require_auth",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "passfile",
    "channel_binding",
    "target_session_attrs",
    "load_balance_hosts",
    "requiressl",
];

const SSL_MODES: &[&str] = &[
    "disable",
    "allow",
    "prefer",
    "require",
    "verify-ca",
    "verify-full",
];

/// Refuses a parameter the driver would ignore and an `sslmode` it does not know (said
/// once, in libpq's words, rather than in sqlx's doubled "error with configuration").
pub fn check_parameters(url: &str) -> Result<(), String> {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        // Not a URL at all: the driver's parser says why.
        return Ok(());
    };
    for (name, value) in parsed.query_pairs() {
        let name = name.as_ref();
        let options = name
            .strip_prefix("options[")
            .and_then(|n| n.strip_suffix(']'));
        if KNOWN.contains(&name) || SQLX_ALIASES.contains(&name) || options.is_some() {
            if matches!(name, "sslmode" | "ssl-mode")
                && !SSL_MODES.contains(&value.to_ascii_lowercase().as_str())
            {
                return Err(format!(
                    "sslmode={value:?} is not a TLS mode (one of {})",
                    SSL_MODES.join(", ")
                ));
            }
            continue;
        }
        if LIBPQ_ONLY.contains(&name) {
            return Err(format!(
                "URL parameter {name:?} is libpq's, and sluice's PostgreSQL driver (sqlx) would ignore it: remove it (the driver reads {})",
                KNOWN.join(", ")
            ));
        }
        return Err(match nearest(name) {
            Some(known) => format!("unknown URL parameter {name:?}: did you mean {known}?"),
            None => format!(
                "unknown URL parameter {name:?} (PostgreSQL URLs take {})",
                KNOWN.join(", ")
            ),
        });
    }
    Ok(())
}

/// The known parameter `name` was most likely meant to be: the nearest spelling
/// (`sink::url_parameters::nearest`); a name about TLS that resembles none of them means
/// `sslmode`.
fn nearest(name: &str) -> Option<&'static str> {
    let wanted = name.to_ascii_lowercase();
    crate::sink::url_parameters::nearest(name, KNOWN)
        .or_else(|| (wanted.contains("ssl") || wanted.contains("tls")).then_some("sslmode"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(query: &str) -> String {
        check_parameters(&format!("postgres://u@h/d?{query}")).unwrap_err()
    }

    #[test]
    fn misspelt_tls_parameters_are_refused_naming_sslmode() {
        for query in [
            "ssl_mode=require",
            "SSLMODE=require",
            "sslMode=require",
            "ssl=true",
            "tls=true",
            "useSSL=true",
        ] {
            let e = refused(query);
            let name = query.split('=').next().unwrap();
            assert!(e.contains(&format!("{name:?}")), "{query}: {e}");
            assert!(e.contains("did you mean sslmode?"), "{query}: {e}");
        }
        assert!(refused("sslrootcrt=/ca.pem").contains("did you mean sslrootcert?"));
        let e = refused("frobnicate=1");
        assert!(
            e.contains("\"frobnicate\"") && !e.contains("did you mean"),
            "{e}"
        );
    }

    #[test]
    fn libpq_parameters_the_driver_ignores_are_refused() {
        let e = refused("target_session_attrs=read-write");
        assert!(e.contains("libpq") && e.contains("ignore"), "{e}");
    }

    #[test]
    fn what_the_driver_honours_passes_and_a_bad_mode_is_said_once() {
        check_parameters(
            "postgres://u@h/d?sslmode=verify-full&sslrootcert=/ca.pem&sslcert=/c&sslkey=/k\
             &application_name=x&options=-c%20a%3Db&options[search_path]=s&ssl-mode=REQUIRE",
        )
        .unwrap();
        check_parameters("postgres://u@h/d").unwrap();
        let e = refused("sslmode=verify");
        assert_eq!(
            e,
            "sslmode=\"verify\" is not a TLS mode (one of disable, allow, prefer, require, verify-ca, verify-full)"
        );
    }
}
