//! A database URL's query parameters checked against the ones its driver reads: a
//! parameter the driver would skip without a word (`?ssl_mode=REQUIRED` for `ssl-mode`)
//! must not quietly mean a plaintext connection, so it is refused naming the nearest
//! parameter the driver knows.

/// The first query parameter of `url` that is not in `known`, as the message that refuses
/// it; `hint` names the parameter to suggest when no known name is near (e.g. the TLS
/// setting for `useSSL`). A URL that does not parse is left to the driver.
pub fn unknown_parameter(
    url: &str,
    known: &[&str],
    hint: impl Fn(&str) -> Option<&'static str>,
) -> Option<String> {
    let name = names(url)
        .into_iter()
        .find(|name| !known.contains(&name.as_str()))?;
    Some(match nearest(&name, known).or_else(|| hint(&name)) {
        Some(near) => format!("unknown URL parameter {name:?} (did you mean {near:?}?)"),
        None => format!(
            "unknown URL parameter {name:?} (known: {})",
            known.join(", ")
        ),
    })
}

/// The known name nearest to `name`, if one is near enough to be a misspelling: compared
/// without case and with `_` for `-`, within an edit distance of a third of its length.
pub fn nearest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let plain = |s: &str| s.to_ascii_lowercase().replace('_', "-");
    let wanted = plain(name);
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&wanted, &plain(k)), *k))
        .filter(|(distance, k)| *distance <= (k.len() / 3).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

/// The names of `url`'s query parameters, in order (none when it does not parse).
pub fn names(url: &str) -> Vec<String> {
    reqwest::Url::parse(url).map_or_else(
        |_| Vec::new(),
        |u| u.query_pairs().map(|(k, _)| k.into_owned()).collect(),
    )
}

/// The value of the first of `names` that `url` sets, if not empty.
pub fn value(url: &str, names: &[&str]) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    parsed
        .query_pairs()
        .find(|(k, _)| names.contains(&k.as_ref()))
        .map(|(_, v)| v.into_owned())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[&str] = &["ssl-mode", "ssl-ca", "charset"];

    #[test]
    fn a_misspelt_parameter_is_refused_with_the_nearest_known_one() {
        let refuse = |url: &str| unknown_parameter(url, KNOWN, |_| None);
        assert_eq!(
            refuse("mysql://h/db?ssl-mode=REQUIRED&charset=utf8mb4"),
            None
        );
        assert_eq!(refuse("mysql://h/db"), None);
        assert_eq!(
            refuse("mysql://h/db?ssl_mode=REQUIRED").as_deref(),
            Some("unknown URL parameter \"ssl_mode\" (did you mean \"ssl-mode\"?)")
        );
        assert_eq!(
            refuse("mysql://h/db?charset=x&SSL-MODE=x").as_deref(),
            Some("unknown URL parameter \"SSL-MODE\" (did you mean \"ssl-mode\"?)")
        );
        assert_eq!(
            refuse("mysql://h/db?zzz=1").as_deref(),
            Some("unknown URL parameter \"zzz\" (known: ssl-mode, ssl-ca, charset)")
        );
    }

    #[test]
    fn the_hint_answers_when_no_name_is_near() {
        let tls = |name: &str| {
            name.to_ascii_lowercase()
                .contains("tls")
                .then_some("ssl-mode")
        };
        assert_eq!(
            unknown_parameter("mysql://h/db?tls=true", KNOWN, tls).as_deref(),
            Some("unknown URL parameter \"tls\" (did you mean \"ssl-mode\"?)")
        );
        assert_eq!(nearest("sslca", KNOWN), Some("ssl-ca"));
        assert_eq!(nearest("timeout", KNOWN), None);
    }
}
