//! What an HTTP answer means for the pipeline.
//!
//! | answer | outcome |
//! |---|---|
//! | 2xx | written; `{"inserted": n, "duplicates": m}` in the body, if present, is believed |
//! | 429, 503 | throttled, with the wait the headers ask for |
//! | 408, 502, 504, 506–599 | an outage: the request timed out or a gateway found nothing behind it — no verdict on the records, retried without limit after the outage backoff |
//! | 500 | the endpoint failed without saying why: judged on evidence (`delivery::blame`) — the batch is halved while other records go through, a record failing alone is dead-lettered only after `max_attempts` failures and only once the endpoint took others meanwhile; failing everything is an outage |
//! | 3xx (not followed: 301/302/303 would turn the POST into a GET, 307/308 beyond a few hops) | fatal, naming the redirect and its `Location` |
//! | 401, 403, 404, 405, 407, 501, 505 | fatal: a wrong URL, method or credential is not the records' fault, and dead-lettering every record for it would be worse than stopping |
//! | other 4xx (400, 413, 422, …) | rejected: the batch is split to find the bad records |
//! | anything else | fatal |

use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};
use serde::Deserialize;

use crate::control::{quota_unit, retry_after};
use crate::sink::WriteOutcome;

/// Most of a response body quoted in a reason.
const QUOTED_BODY: usize = 200;

pub fn classify(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    rows: usize,
    now: SystemTime,
    max_delay: Duration,
) -> WriteOutcome {
    let reason = || describe(status, body);
    match status.as_u16() {
        200..=299 => written(body, rows as u64),
        300..=399 => WriteOutcome::Fatal(redirected(status, headers)),
        429 | 503 => WriteOutcome::Throttled {
            retry_after: retry_after::from_headers(headers, now, max_delay),
            unit: quota_unit::from_headers(headers),
            reason: reason(),
        },
        500 => WriteOutcome::ServerError(reason()),
        401 | 403 | 404 | 405 | 407 | 501 | 505 => WriteOutcome::Fatal(reason()),
        408 | 502 | 504..=599 => WriteOutcome::Unavailable(reason()),
        400..=499 => WriteOutcome::Rejected {
            rows: None,
            reason: reason(),
        },
        _ => WriteOutcome::Fatal(format!("unexpected answer: {}", reason())),
    }
}

#[derive(Deserialize)]
struct Counts {
    inserted: Option<u64>,
    duplicates: Option<u64>,
}

/// An endpoint that deduplicates may say how many keys it already had.
fn written(body: &[u8], rows: u64) -> WriteOutcome {
    let duplicates = serde_json::from_slice::<Counts>(body)
        .ok()
        .and_then(|c| {
            c.duplicates
                .or_else(|| c.inserted.map(|i| rows.saturating_sub(i)))
        })
        .unwrap_or(0)
        .min(rows);
    WriteOutcome::Written {
        inserted: rows - duplicates,
        duplicates,
    }
}

/// 307/308 redirects followed at most, per request: they keep the method and body.
pub const MAX_REDIRECTS: usize = 3;

/// An ingest endpoint that redirects a write is misconfigured: following a 301/302/303
/// turns the POST into a GET, so the batch never arrives however the target answers. A
/// 307 or 308 comes back as the answer only once [`MAX_REDIRECTS`] were followed (or it
/// names no target).
pub fn redirected(status: StatusCode, headers: &HeaderMap) -> String {
    let location = headers
        .get(http::header::LOCATION)
        .map(|l| crate::redact::redact(&String::from_utf8_lossy(l.as_bytes())));
    let keeps_body = matches!(
        status,
        StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT
    );
    match location {
        Some(location) if keeps_body => format!(
            "HTTP {status}: redirect limit reached after {MAX_REDIRECTS} hops; the last pointed to {location} (point sink.url at the final address)"
        ),
        Some(location) => format!(
            "HTTP {status}: the endpoint redirects writes to {location}; following a {} turns the POST into a GET, which writes nothing (point sink.url at the final address)",
            status.as_u16()
        ),
        None => format!("HTTP {status}: a redirect to nowhere (no Location header)"),
    }
}

/// The status and the start of the body. Secrets are masked in the whole body before it
/// is cut: a secret the endpoint echoes must not survive as a fragment the mask misses.
fn describe(status: StatusCode, body: &[u8]) -> String {
    let text = crate::redact::redact(&String::from_utf8_lossy(body));
    let cut = text
        .char_indices()
        .nth(QUOTED_BODY)
        .map_or(text.len(), |(i, _)| i);
    let text = text[..cut].trim();
    if text.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn outcome(code: u16, headers: &[(&'static str, &str)], body: &str) -> WriteOutcome {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        classify(
            StatusCode::from_u16(code).unwrap(),
            &h,
            body.as_bytes(),
            10,
            SystemTime::UNIX_EPOCH,
            Duration::from_secs(30),
        )
    }

    #[test]
    fn success_with_and_without_counts() {
        let w = |inserted, duplicates| WriteOutcome::Written {
            inserted,
            duplicates,
        };
        assert_eq!(outcome(200, &[], ""), w(10, 0));
        assert_eq!(outcome(204, &[], ""), w(10, 0));
        assert_eq!(
            outcome(200, &[], r#"{"inserted":7,"duplicates":3}"#),
            w(7, 3)
        );
        assert_eq!(outcome(201, &[], r#"{"duplicates":4}"#), w(6, 4));
        assert_eq!(outcome(200, &[], r#"{"inserted":8}"#), w(8, 2));
        assert_eq!(outcome(200, &[], r#"{"duplicates":99}"#), w(0, 10));
        assert_eq!(outcome(200, &[], "OK"), w(10, 0));
    }

    #[test]
    fn throttles_carry_their_wait() {
        assert_eq!(
            outcome(429, &[("retry-after", "3")], "slow down"),
            WriteOutcome::Throttled {
                retry_after: Some(Duration::from_secs(3)),
                unit: None,
                reason: "HTTP 429 Too Many Requests: slow down".into()
            }
        );
        assert!(matches!(
            outcome(503, &[], ""),
            WriteOutcome::Throttled {
                retry_after: None,
                ..
            }
        ));
        assert!(matches!(
            outcome(429, &[("x-ms-retry-after-ms", "99999999")], ""),
            WriteOutcome::Throttled { retry_after: Some(d), .. } if d == Duration::from_secs(30)
        ));
    }

    /// A gateway with nothing behind it, a request timed out: never the records' fault.
    #[test]
    fn outages_server_errors_fatal_and_rejected() {
        for code in [408, 502, 504, 507, 520, 599] {
            assert!(
                matches!(outcome(code, &[], ""), WriteOutcome::Unavailable(_)),
                "{code}"
            );
        }
        assert_eq!(
            outcome(500, &[], "boom"),
            WriteOutcome::ServerError("HTTP 500 Internal Server Error: boom".into())
        );
        for code in [401, 403, 404, 405, 407, 501, 505, 301, 302, 303, 307, 308] {
            assert!(
                matches!(outcome(code, &[], ""), WriteOutcome::Fatal(_)),
                "{code}"
            );
        }
        for code in [400, 409, 413, 422, 451] {
            assert!(
                matches!(
                    outcome(code, &[], ""),
                    WriteOutcome::Rejected { rows: None, .. }
                ),
                "{code}"
            );
        }
    }

    #[test]
    fn a_redirect_names_its_target_without_the_password() {
        let WriteOutcome::Fatal(reason) = outcome(
            302,
            &[("location", "https://user:s3cret@login.example/sso?next=/in")],
            "",
        ) else {
            panic!()
        };
        assert!(reason.starts_with("HTTP 302 Found"), "{reason}");
        assert!(
            reason.contains("https://user:***@login.example/sso?next=/in"),
            "{reason}"
        );
        assert!(reason.contains("turns the POST into a GET"), "{reason}");
        assert!(!reason.contains("s3cret"), "{reason}");
        let WriteOutcome::Fatal(reason) = outcome(301, &[], "") else {
            panic!()
        };
        assert!(reason.contains("no Location header"), "{reason}");
    }

    /// 307 and 308 are followed: one answered as the outcome is the one past the limit.
    #[test]
    fn a_307_past_the_hop_limit_says_so_and_where_it_pointed() {
        let WriteOutcome::Fatal(reason) = outcome(307, &[("location", "/hop/4")], "") else {
            panic!()
        };
        assert_eq!(
            reason,
            "HTTP 307 Temporary Redirect: redirect limit reached after 3 hops; the last pointed to /hop/4 (point sink.url at the final address)"
        );
        assert!(!reason.contains("is not written"), "{reason}");
    }

    #[test]
    fn a_secret_echoed_across_the_cut_leaves_no_fragment() {
        crate::redact::register_secret("Bearer tok-5e1f0a9b8c7d6e5f4a3b");
        crate::redact::register_secret("tok-5e1f0a9b8c7d6e5f4a3b");
        let body = format!(
            "{}\"authorization\": \"Bearer tok-5e1f0a9b8c7d6e5f4a3b\"}}",
            "x".repeat(170)
        );
        let WriteOutcome::Rejected { reason, .. } = outcome(422, &[], &body) else {
            panic!()
        };
        // The token starts 5 characters before the cut: masked whole, nothing of it left.
        assert!(!reason.contains("tok-"), "{reason}");
        assert!(reason.contains("\"authorization\": \"***\"}"), "{reason}");
    }

    #[test]
    fn reasons_quote_at_most_a_little_of_the_body() {
        let WriteOutcome::Rejected { reason, .. } = outcome(422, &[], &"x".repeat(5000)) else {
            panic!()
        };
        assert!(reason.len() < 300);
    }
}
