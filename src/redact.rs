//! Credentials never reach a log line, an error message, a metric label or a report:
//! passwords in URLs (`scheme://user:secret@host`), query parameters that carry secrets
//! (`?password=…`, `&token=…`, `sig=…`) and every value the configuration holds as a
//! secret (header values, Kafka SASL passwords, URL passwords) are replaced before text
//! leaves the process.

use std::sync::{OnceLock, RwLock};

const MASK: &str = "***";

/// Secret values shorter than this are masked only where they stand (a URL's password,
/// a query value), not wherever the same few characters happen to appear.
const MIN_LITERAL: usize = 4;

#[derive(Default)]
struct Registry {
    /// Literal values that must never be shown, longest first.
    values: Vec<String>,
    /// Extra query-parameter names (lowercase) whose values are secret.
    params: Vec<String>,
}

fn registry() -> &'static RwLock<Registry> {
    static REGISTRY: OnceLock<RwLock<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// Masks `value` wherever it appears from now on (a header value, a SASL password), also
/// as a JSON string holds it (an endpoint echoing a request's headers in its answer, `/`
/// perhaps escaped as `\/`).
pub fn register_secret(value: &str) {
    let value = value.trim();
    if value.chars().count() < MIN_LITERAL {
        return;
    }
    let json = serde_json::to_string(value).unwrap_or_default();
    let json = json
        .strip_prefix('"')
        .and_then(|j| j.strip_suffix('"'))
        .unwrap_or(value)
        .to_string();
    let slashes = json.replace('/', "\\/");
    let mut r = registry().write().unwrap_or_else(|p| p.into_inner());
    for form in [value.to_string(), json, slashes] {
        if !r.values.contains(&form) {
            r.values.push(form);
        }
    }
    r.values.sort_by_key(|v| std::cmp::Reverse(v.len()));
}

/// Treats query parameter `name` as secret, besides the built-in names.
pub fn register_secret_param(name: &str) {
    let name = name.trim().to_ascii_lowercase();
    if name.is_empty() {
        return;
    }
    let mut r = registry().write().unwrap_or_else(|p| p.into_inner());
    if !r.params.contains(&name) {
        r.params.push(name);
    }
}

/// Registers the secrets a URL carries: its password and its secret query values.
pub fn register_url_secrets(url: &str) {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return;
    };
    if let Some(pw) = parsed.password() {
        register_secret(pw);
        if let Ok(decoded) = percent_decode(pw) {
            register_secret(&decoded);
        }
    }
    for (name, value) in parsed.query_pairs() {
        if is_secret_param(&name, true) {
            register_secret(&value);
        }
    }
}

fn percent_decode(text: &str) -> Result<String, std::string::FromUtf8Error> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        if bytes[i] == b'%'
            && let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out)
}

/// Whether a parameter called `name` carries a secret. In a query string (`in_query`) the
/// broad set applies (`key`, `sig`, `auth`…); in free text (`password=…` in a libpq
/// connection string) only names that cannot mean anything else.
pub fn is_secret_param(name: &str, in_query: bool) -> bool {
    let lower = name.to_ascii_lowercase();
    const ALWAYS: &[&str] = &[
        "password",
        "passwd",
        "secret",
        "token",
        "apikey",
        "api_key",
        "api-key",
        "accesskey",
        "access_key",
        "signature",
        "credential",
        "private_key",
    ];
    if ALWAYS.iter().any(|w| lower.contains(w)) || lower == "pwd" {
        return true;
    }
    if !in_query {
        return false;
    }
    const WORDS: &[&str] = &[
        "pass", "pwd", "key", "sig", "auth", "sas", "session", "code", "jwt",
    ];
    if lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| WORDS.contains(&w))
    {
        return true;
    }
    let r = registry().read().unwrap_or_else(|p| p.into_inner());
    r.params.contains(&lower)
}

/// Replaces every credential in `text` with `***`: URL passwords, secret query values,
/// `password=…` pairs, and every registered secret value.
pub fn redact(text: &str) -> String {
    let text = mask_userinfo(text);
    let text = mask_params(&text);
    mask_literals(&text)
}

/// `scheme://user:password@` → `scheme://user:***@`.
fn mask_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority ends at the first '/', '?', '#', whitespace or quote; a password
        // is what lies between ':' and the last '@' in it.
        let end = tail
            .find(|c: char| {
                matches!(c, '/' | '?' | '#' | '"' | '\'' | '\\' | '<' | '>') || c.is_whitespace()
            })
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..colon + 1]);
                out.push_str(MASK);
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// `name=value` where `name` carries a secret: the value becomes `***`. After `?` or `&`
/// the broad query set applies; elsewhere only unmistakable names (`password=`).
fn mask_params(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    let mut search = 0;
    while let Some(rel) = text[search..].find('=') {
        let eq = search + rel;
        search = eq + 1;
        if eq < last {
            continue;
        }
        let name_start = text[..eq]
            .char_indices()
            .rev()
            .take_while(|(_, c)| is_name_char(*c))
            .last()
            .map_or(eq, |(i, _)| i);
        let name = &text[name_start..eq];
        if name.is_empty() {
            continue;
        }
        let before = text[..name_start].chars().next_back();
        let in_query = matches!(before, Some('?' | '&' | ';'));
        if !is_secret_param(name, in_query) {
            continue;
        }
        let value_end = text[eq + 1..]
            .find(|c: char| {
                matches!(
                    c,
                    '&' | '"' | '\'' | '\\' | ';' | ',' | ')' | '>' | '#' | '}'
                ) || c.is_whitespace()
            })
            .map_or(text.len(), |i| eq + 1 + i);
        if value_end == eq + 1 || &text[eq + 1..value_end] == MASK {
            continue;
        }
        out.push_str(&text[last..=eq]);
        out.push_str(MASK);
        last = value_end;
        search = value_end;
    }
    out.push_str(&text[last..]);
    out
}

fn mask_literals(text: &str) -> String {
    let r = registry().read().unwrap_or_else(|p| p.into_inner());
    if r.values.iter().all(|v| !text.contains(v.as_str())) {
        return text.to_string();
    }
    let mut out = text.to_string();
    for v in &r.values {
        if out.contains(v.as_str()) {
            out = out.replace(v.as_str(), MASK);
        }
    }
    out
}

/// How an endpoint is named where anyone may read it (metric labels, `/readyz`):
/// `host:port`, never the URL with its path, user or query.
pub fn endpoint_label(url: &str) -> String {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return "endpoint".into();
    };
    let Some(host) = parsed.host_str() else {
        return parsed.scheme().to_string();
    };
    let port = parsed.port_or_known_default().or(match parsed.scheme() {
        "postgres" | "postgresql" => Some(5432),
        "amqp" => Some(5672),
        "amqps" => Some(5671),
        _ => None,
    });
    match port {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    }
}

/// stderr, with credentials redacted from every write (tracing writes one event per call).
pub struct RedactingStderr;

impl std::io::Write for RedactingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(redact(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hides_passwords_in_urls() {
        assert_eq!(
            redact("cannot connect to postgres://user:secret@db:5432/x: refused"),
            "cannot connect to postgres://user:***@db:5432/x: refused"
        );
        assert_eq!(
            redact("amqp://guest:p@ss:w0rd@mq/%2f"),
            "amqp://guest:***@mq/%2f"
        );
        assert_eq!(
            redact("sqlite://out.db and http://host:80/x"),
            "sqlite://out.db and http://host:80/x"
        );
        assert_eq!(redact("no url here"), "no url here");
        assert_eq!(redact("a postgres://u@h/db b"), "a postgres://u@h/db b");
        assert_eq!(redact("http://u:pw@h?x=1"), "http://u:***@h?x=1");
    }

    #[test]
    fn hides_secret_query_parameters() {
        assert_eq!(
            redact("postgres://u@h/db?sslmode=require&password=hunter2 refused"),
            "postgres://u@h/db?sslmode=require&password=*** refused"
        );
        assert_eq!(
            redact("POST http://h:1/in?token=abc&sig=xyz&n=3: timed out"),
            "POST http://h:1/in?token=***&sig=***&n=3: timed out"
        );
        assert_eq!(
            redact(r#"{"message":"http://h/in?X-Amz-Signature=f00&key=k3y\"}"#),
            r#"{"message":"http://h/in?X-Amz-Signature=***&key=***\"}"#
        );
        assert_eq!(
            redact("host=db user=app password=s3cr3t dbname=x"),
            "host=db user=app password=*** dbname=x"
        );
        // Outside a query string, a field called key is a record key, not a secret.
        assert_eq!(redact("written key=k1 n=3"), "written key=k1 n=3");
        register_secret_param("X-Custom-Thing");
        assert_eq!(
            redact("http://h/in?x-custom-thing=v4lue"),
            "http://h/in?x-custom-thing=***"
        );
    }

    #[test]
    fn hides_registered_values_anywhere() {
        register_secret("Bearer-planted-9f8e");
        register_secret("ab");
        assert_eq!(
            redact("header was Bearer-planted-9f8e, ab stays"),
            "header was ***, ab stays"
        );
        register_url_secrets("http://u:p%40ss-word1@h/x?apikey=planted-key-77");
        assert_eq!(redact("p@ss-word1 planted-key-77"), "*** ***");
    }

    /// An endpoint echoing the request's headers in a JSON answer.
    #[test]
    fn hides_registered_values_as_json_writes_them() {
        register_secret("tok/en\"q-4a1");
        assert_eq!(
            redact(r#"{"authorization":"Bearer tok\/en\"q-4a1","x":"tok/en\"q-4a1"}"#),
            r#"{"authorization":"Bearer ***","x":"***"}"#
        );
        assert_eq!(redact("raw tok/en\"q-4a1"), "raw ***");
    }

    /// TLS and SASL settings: passwords and inline keys are secret, file paths and
    /// certificates (public by nature) are shown.
    #[test]
    fn tls_and_sasl_keys() {
        for secret in [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.key.pem",
            "sasl.oauthbearer.client.secret",
            "sslpassword",
        ] {
            assert!(is_secret_param(secret, true), "{secret}");
        }
        for shown in [
            "sslrootcert",
            "sslcert",
            "sslmode",
            "ssl.ca.location",
            "ssl.certificate.location",
        ] {
            assert!(!is_secret_param(shown, true), "{shown}");
        }
        assert_eq!(
            redact(
                "postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca.pem&sslpassword=k3y-pass"
            ),
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca.pem&sslpassword=***"
        );
    }

    #[test]
    fn endpoints_are_labelled_by_host_and_port() {
        assert_eq!(
            endpoint_label("postgres://u:pw@db.example:6543/x?password=y"),
            "db.example:6543"
        );
        assert_eq!(endpoint_label("postgres://u@db/x"), "db:5432");
        assert_eq!(
            endpoint_label("https://ingest.example/v1?token=t"),
            "ingest.example:443"
        );
        assert_eq!(endpoint_label("not a url"), "endpoint");
    }
}
