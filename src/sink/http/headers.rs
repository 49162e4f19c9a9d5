//! Extra request headers from configuration. A value may name environment variables —
//! `Authorization = "Bearer ${INGEST_TOKEN}"` — so that secrets stay out of files; expanded
//! values are marked sensitive (redacted in `Debug` output) and no message ever quotes one.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HeaderError {
    #[error("{0:?} is not a valid header name")]
    Name(String),
    #[error("header {header}: environment variable {var} is not set")]
    MissingVar { header: String, var: String },
    #[error("header {header}: \"${{\" without a closing \"}}\"")]
    Unterminated { header: String },
    #[error("header {header}: its value holds characters a header cannot carry")]
    Value { header: String },
}

/// Builds the headers, reading variables through `env` (`std::env::var` in production).
pub fn build(
    config: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<HeaderMap, HeaderError> {
    let mut headers = HeaderMap::new();
    for (name, template) in config {
        let header_name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| HeaderError::Name(name.clone()))?;
        let value = expand(template, &env).map_err(|e| match e {
            Expand::Missing(var) => HeaderError::MissingVar {
                header: name.clone(),
                var,
            },
            Expand::Unterminated => HeaderError::Unterminated {
                header: name.clone(),
            },
        })?;
        let mut value = HeaderValue::from_str(&value).map_err(|_| HeaderError::Value {
            header: name.clone(),
        })?;
        value.set_sensitive(true);
        headers.insert(header_name, value);
    }
    Ok(headers)
}

enum Expand {
    Missing(String),
    Unterminated,
}

/// `${NAME}` is replaced by the variable, `$$` by `$`; any other `$` stays as it is.
fn expand(template: &str, env: &impl Fn(&str) -> Option<String>) -> Result<String, Expand> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after.find('}').ok_or(Expand::Unterminated)?;
            let var = &after[..end];
            out.push_str(&env(var).ok_or_else(|| Expand::Missing(var.to_string()))?);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "INGEST_TOKEN").then(|| "s3cr3t".to_string())
    }

    fn one(name: &str, value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(name.to_string(), value.to_string())])
    }

    #[test]
    fn expands_variables_and_hides_the_result() {
        let h = build(&one("Authorization", "Bearer ${INGEST_TOKEN}"), env).unwrap();
        let v = h.get("authorization").unwrap();
        assert_eq!(v, "Bearer s3cr3t");
        assert!(v.is_sensitive());
        assert!(!format!("{h:?}").contains("s3cr3t"));
        let h = build(&one("X-Price", "$$5 for $USER ${INGEST_TOKEN}$"), env).unwrap();
        assert_eq!(h.get("x-price").unwrap(), "$5 for $USER s3cr3t$");
    }

    #[test]
    fn errors_name_the_header_and_variable_but_never_a_value() {
        let e = build(&one("Authorization", "Bearer ${NOPE}"), env).unwrap_err();
        assert_eq!(
            e.to_string(),
            "header Authorization: environment variable NOPE is not set"
        );
        assert!(matches!(
            build(&one("X-A", "${INGEST_TOKEN"), env),
            Err(HeaderError::Unterminated { .. })
        ));
        assert!(matches!(
            build(&one("bad header", "x"), env),
            Err(HeaderError::Name(_))
        ));
        let e = build(&one("X-A", "line\n${INGEST_TOKEN}"), env).unwrap_err();
        assert!(!e.to_string().contains("s3cr3t"));
    }
}
