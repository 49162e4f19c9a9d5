//! Which unit a throttling answer's quota counts, when the answer says: the IETF RateLimit
//! draft's `RateLimit-Policy: "name";q=100;w=1;qu="requests"` (`qu` is "requests",
//! "content-bytes" or "concurrent-requests", and requests when absent), tied to the policy
//! whose `RateLimit` shows nothing remaining (`"name";r=0;t=1`); or the OpenAI-style
//! `x-ratelimit-remaining-requests: 0`. "records" (and "items") are accepted as an extension
//! for sinks that count records. Concurrency quotas are the concurrency limit's business,
//! not a rate's: no unit.

use http::HeaderMap;

use super::sink_limit::Unit;

pub fn from_headers(headers: &HeaderMap) -> Option<Unit> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(policies) = text("ratelimit-policy") {
        let spent = text("ratelimit").map(spent_policies).unwrap_or_default();
        let policies: Vec<(String, Option<Unit>)> = split_list(policies)
            .filter_map(|member| {
                let mut parts = member.split(';');
                let name = unquote(parts.next()?.trim()).to_string();
                let mut unit = Some(Unit::Requests);
                for param in parts {
                    if let Some((key, value)) = param.split_once('=')
                        && key.trim().eq_ignore_ascii_case("qu")
                    {
                        unit = match unquote(value.trim()).to_ascii_lowercase().as_str() {
                            "requests" => Some(Unit::Requests),
                            "content-bytes" => Some(Unit::Bytes),
                            "records" | "items" => Some(Unit::Records),
                            _ => None,
                        };
                    }
                }
                Some((name, unit))
            })
            .collect();
        let chosen = match policies.as_slice() {
            [(_, unit)] => *unit,
            many => many
                .iter()
                .find(|(name, _)| spent.iter().any(|s| s == name))
                .and_then(|(_, unit)| *unit),
        };
        if chosen.is_some() {
            return chosen;
        }
    }
    let exhausted = |name: &str| text(name).is_some_and(|v| v.trim() == "0");
    if exhausted("x-ratelimit-remaining-requests") {
        return Some(Unit::Requests);
    }
    None
}

/// Names of the `RateLimit` field's policies with nothing remaining.
fn spent_policies(value: &str) -> Vec<String> {
    split_list(value)
        .filter_map(|member| {
            let mut parts = member.split(';');
            let name = unquote(parts.next()?.trim()).to_string();
            let spent = parts.any(|p| {
                p.split_once('=')
                    .is_some_and(|(k, v)| k.trim() == "r" && v.trim() == "0")
            });
            spent.then_some(name)
        })
        .collect()
}

/// Members of a structured-field list (no commas inside quoted strings are expected here).
fn split_list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|m| !m.is_empty())
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(pairs: &[(&str, &str)]) -> Option<Unit> {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        from_headers(&h)
    }

    #[test]
    fn one_policy_names_its_unit() {
        let p = |qu: &str| unit(&[("ratelimit-policy", &format!("\"sim\";q=20;w=1{qu}"))]);
        assert_eq!(p(";qu=\"requests\""), Some(Unit::Requests));
        assert_eq!(p(";qu=\"content-bytes\""), Some(Unit::Bytes));
        assert_eq!(p(";qu=\"records\""), Some(Unit::Records));
        assert_eq!(p(""), Some(Unit::Requests), "the draft's default");
        assert_eq!(p(";qu=\"concurrent-requests\""), None);
    }

    #[test]
    fn the_spent_policy_decides_among_several() {
        let policy = "\"burst\";q=100;w=1, \"volume\";q=1000000;w=60;qu=\"content-bytes\"";
        assert_eq!(
            unit(&[
                ("ratelimit-policy", policy),
                ("ratelimit", "\"burst\";r=40;t=1, \"volume\";r=0;t=20"),
            ]),
            Some(Unit::Bytes)
        );
        assert_eq!(
            unit(&[
                ("ratelimit-policy", policy),
                ("ratelimit", "\"burst\";r=0;t=1, \"volume\";r=5;t=20"),
            ]),
            Some(Unit::Requests)
        );
        assert_eq!(unit(&[("ratelimit-policy", policy)]), None, "which one?");
    }

    #[test]
    fn vendor_headers_and_silence() {
        assert_eq!(
            unit(&[("x-ratelimit-remaining-requests", "0")]),
            Some(Unit::Requests)
        );
        assert_eq!(unit(&[("x-ratelimit-remaining-requests", "12")]), None);
        assert_eq!(unit(&[("retry-after", "1")]), None);
    }
}
