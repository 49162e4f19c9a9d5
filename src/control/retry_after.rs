//! When a throttling server asks to be called again. Servers say it in several dialects;
//! honouring the exact wait (instead of guessing with backoff) is what lets a worker come
//! back as soon as the sink has room, and no sooner.
//!
//! Read, most precise first:
//! - `x-ms-retry-after-ms: 1500` (Azure Cosmos DB and friends): milliseconds;
//! - `Retry-After: 120` or `Retry-After: Wed, 21 Oct 2015 07:28:00 GMT` (RFC 9110 §10.2.3):
//!   delay-seconds or an HTTP-date in any of its three formats;
//! - the IETF RateLimit header draft, when its quota is spent: `RateLimit: limit=100,
//!   remaining=0, reset=5` (drafts 03–06), `RateLimit: "default";r=0;t=5` (drafts 07+,
//!   structured fields), or `RateLimit-Reset: 5` with `RateLimit-Remaining: 0` (drafts 00–02).

use std::time::{Duration, SystemTime};

use http::HeaderMap;

/// The wait a response asks for, capped at `max`. An HTTP-date is measured from the
/// response's own `Date` header when it has one (immune to clock skew between the hosts),
/// otherwise from `now`; a date already past means "now" (zero).
pub fn from_headers(headers: &HeaderMap, now: SystemTime, max: Duration) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let wait = text("x-ms-retry-after-ms")
        .and_then(parse_millis)
        .or_else(|| {
            let server_now = text("date")
                .and_then(|d| httpdate::parse_http_date(d).ok())
                .unwrap_or(now);
            text("retry-after").and_then(|v| parse_retry_after(v, server_now))
        })
        .or_else(|| text("ratelimit").and_then(parse_ratelimit))
        .or_else(|| {
            let remaining = text("ratelimit-remaining").and_then(parse_count);
            let spent = remaining.is_none_or(|r| r == 0);
            text("ratelimit-reset")
                .filter(|_| spent)
                .and_then(parse_seconds)
        })?;
    Some(wait.min(max))
}

/// `Retry-After`: delay-seconds, else an HTTP-date relative to `now`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    parse_seconds(value).or_else(|| {
        let at = httpdate::parse_http_date(value.trim()).ok()?;
        Some(at.duration_since(now).unwrap_or(Duration::ZERO))
    })
}

/// Non-negative seconds. RFC 9110 allows only digits; a decimal fraction is accepted too,
/// since some servers send one and its meaning is plain.
fn parse_seconds(value: &str) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let secs: f64 = value.parse().ok()?;
    Duration::try_from_secs_f64(secs).ok()
}

fn parse_millis(value: &str) -> Option<Duration> {
    parse_seconds(value).map(|d| d / 1000)
}

fn parse_count(value: &str) -> Option<u64> {
    value.trim().parse().ok()
}

/// The RateLimit field. Structured form: a list of policies `"name";r=R;t=T`; the wait is
/// the longest `t` among policies with nothing remaining. Older form: one policy written as
/// `limit=L, remaining=R, reset=T`. A policy with quota left asks for no wait.
fn parse_ratelimit(value: &str) -> Option<Duration> {
    if value.contains(';') {
        value
            .split(',')
            .filter_map(|policy| {
                let params = params(policy.split(';').skip(1));
                let spent = params.remaining.is_none_or(|r| r == 0);
                spent.then_some(params.reset).flatten()
            })
            .max()
    } else {
        let params = params(value.split(','));
        let spent = params.remaining.is_none_or(|r| r == 0);
        spent.then_some(params.reset).flatten()
    }
}

struct Params {
    remaining: Option<u64>,
    reset: Option<Duration>,
}

fn params<'a>(pairs: impl Iterator<Item = &'a str>) -> Params {
    let mut p = Params {
        remaining: None,
        reset: None,
    };
    for pair in pairs {
        let Some((name, value)) = pair.split_once('=') else {
            continue;
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "r" | "remaining" => p.remaining = parse_count(value),
            "t" | "reset" => p.reset = parse_seconds(value),
            _ => {}
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const MAX: Duration = Duration::from_secs(30);

    fn now() -> SystemTime {
        // Sun, 06 Nov 1994 08:49:37 GMT
        SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    fn wait(pairs: &[(&'static str, &str)]) -> Option<Duration> {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_str(value).unwrap());
        }
        from_headers(&h, now(), MAX)
    }

    #[test]
    fn delay_seconds() {
        assert_eq!(wait(&[("retry-after", "7")]), Some(Duration::from_secs(7)));
        assert_eq!(wait(&[("Retry-After", " 0 ")]), Some(Duration::ZERO));
        assert_eq!(
            wait(&[("retry-after", "1.5")]),
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn http_date_in_all_three_formats() {
        for date in [
            "Sun, 06 Nov 1994 08:49:47 GMT",  // IMF-fixdate
            "Sunday, 06-Nov-94 08:49:47 GMT", // obsolete RFC 850
            "Sun Nov  6 08:49:47 1994",       // obsolete asctime
        ] {
            assert_eq!(
                wait(&[("retry-after", date)]),
                Some(Duration::from_secs(10)),
                "{date}"
            );
        }
    }

    #[test]
    fn http_date_in_the_past_means_now() {
        assert_eq!(
            wait(&[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")]),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn http_date_is_measured_from_the_servers_date_header() {
        // The server's clock says 08:49:40; it asks for 08:49:47: seven seconds, whatever
        // our own clock says.
        assert_eq!(
            wait(&[
                ("date", "Sun, 06 Nov 1994 08:49:40 GMT"),
                ("retry-after", "Sun, 06 Nov 1994 08:49:47 GMT"),
            ]),
            Some(Duration::from_secs(7))
        );
    }

    #[test]
    fn milliseconds_header_wins_for_its_precision() {
        assert_eq!(
            wait(&[("x-ms-retry-after-ms", "250"), ("retry-after", "1")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            wait(&[("x-ms-retry-after-ms", "12.5")]),
            Some(Duration::from_micros(12_500))
        );
    }

    #[test]
    fn ratelimit_draft_forms() {
        assert_eq!(
            wait(&[("ratelimit", "limit=100, remaining=0, reset=5")]),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            wait(&[("ratelimit", "\"default\";r=0;t=3")]),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            wait(&[(
                "ratelimit",
                "\"burst\";r=0;t=2, \"daily\";r=0;t=9, \"hourly\";r=5;t=60"
            )]),
            Some(Duration::from_secs(9)),
            "the longest wait among spent policies"
        );
        assert_eq!(
            wait(&[("ratelimit-reset", "4"), ("ratelimit-remaining", "0")]),
            Some(Duration::from_secs(4))
        );
        assert_eq!(
            wait(&[("ratelimit-reset", "4")]),
            Some(Duration::from_secs(4))
        );
    }

    #[test]
    fn ratelimit_with_quota_left_asks_for_no_wait() {
        assert_eq!(
            wait(&[("ratelimit", "limit=100, remaining=3, reset=5")]),
            None
        );
        assert_eq!(wait(&[("ratelimit", "\"default\";r=3;t=5")]), None);
        assert_eq!(
            wait(&[("ratelimit-reset", "4"), ("ratelimit-remaining", "2")]),
            None
        );
    }

    #[test]
    fn retry_after_wins_over_ratelimit() {
        assert_eq!(
            wait(&[
                ("ratelimit", "limit=100, remaining=0, reset=9"),
                ("retry-after", "2")
            ]),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn capped_at_max_delay() {
        assert_eq!(wait(&[("retry-after", "86400")]), Some(MAX));
        assert_eq!(
            wait(&[("retry-after", "Mon, 07 Nov 1994 08:49:37 GMT")]),
            Some(MAX)
        );
        assert_eq!(wait(&[("x-ms-retry-after-ms", "99999999")]), Some(MAX));
    }

    #[test]
    fn garbage_is_no_hint() {
        for bad in [
            "",
            "-1",
            "soon",
            "1e3",
            "Sun, 06 Nov 1994",
            "0x10",
            "inf",
            "NaN",
        ] {
            assert_eq!(wait(&[("retry-after", bad)]), None, "{bad:?}");
        }
        assert_eq!(wait(&[]), None);
        assert_eq!(wait(&[("ratelimit", "limit=100")]), None);
    }
}
