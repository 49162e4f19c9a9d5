//! The values every mapped column gets, and what their text denotes read plainly: the
//! exact integer or decimal, the nearest float, the time in UTC — with serde_json, chrono
//! and the standard library's float parsing, none of sluice's code.

use serde_json::Value;

use super::expect::decimal;

/// The values every column gets, as JSON text: integers at each width's boundaries,
/// decimals, floats out of range and too small, strings of numbers, strings at a length
/// limit and past it, every escape, times in every form, and every other JSON type.
pub fn values() -> Vec<String> {
    let mut v: Vec<String> = [
        "0",
        "-0",
        "1",
        "42",
        "-1",
        "1e3",
        "1000.0",
        "12.5",
        "12.345",
        "-12.34",
        "127",
        "128",
        "-128",
        "-129",
        "255",
        "256",
        "32767",
        "32768",
        "-32769",
        "65535",
        "65536",
        "8388607",
        "8388608",
        "16777215",
        "16777216",
        "16777217",
        "2147483647",
        "2147483648",
        "-2147483649",
        "4294967295",
        "4294967296",
        "9007199254740993",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "18446744073709551616",
        "99999999.99",
        "100000000",
        "0.1",
        "0.123456789012345678901234567890",
        "123456789012345678901234567890",
        "1.5e10",
        "1E-7",
        "1e400",
        "-1e400",
        "1e-400",
        "1e-50",
        "1e39",
        "\"42\"",
        "\"12.5\"",
        "\" 7 \"",
        "\"1e-400\"",
        "\"NaN\"",
        "\"-Infinity\"",
        "\"text\"",
        "\"\"",
        "\"abc \"",
        "\" abc\"",
        "\"ABC\"",
        "\"\u{e0}bc\"",
        "\"a\u{300}bc\"",
        "\"😀𝄞\"",
        r#""a\u0000b""#,
        r#""\"\\\/\b\f\n\r\t\u0001""#,
        "\"sixteen chars ok\"",
        "\"seventeen chars!!\"",
        "\"sixteen chars ok \"",
        "\"ééééééééééééééé\"",
        "\"2024-05-01T10:00:00Z\"",
        "\"2024-05-01T10:00:00+02:00\"",
        "\"2024-05-01T10:00:00.123Z\"",
        "\"2024-05-01T10:00:00.123456Z\"",
        "\"2024-05-01T10:00:00.123456789Z\"",
        "\"2024-05-01T10:00:00.5-01:00\"",
        "\"2024-05-01T10:00:00\"",
        "\"2024-05-01 10:00:00.25\"",
        "\"2024-5-1 10:00:00.5\"",
        "\"20240501100000.5\"",
        "\"2024-05-01\"",
        "\"2024-05-01T00:00:00Z\"",
        "\"1969-12-31T23:59:59Z\"",
        "\"2038-01-19T03:14:08Z\"",
        "\"9999-12-31T23:59:59Z\"",
        "true",
        "false",
        "null",
        "[]",
        "{}",
        "[1,2]",
        "{\"a\":1.50,\"b\":[true,null]}",
    ]
    .map(String::from)
    .to_vec();
    v.push(format!("{}1{}", "[".repeat(40), "]".repeat(40)));
    v
}

/// The number a string reads as for a server that parses numbers from text (MySQL: with
/// spaces around, `+`, `.5`, `5.`), as JSON number text; `None`: not a number.
pub fn number_in(s: &str) -> Option<String> {
    let t = s.trim_matches(' ');
    let (sign, body) = match t.strip_prefix('-') {
        Some(b) => ("-", b),
        None => ("", t.strip_prefix('+').unwrap_or(t)),
    };
    let (mantissa, exponent) = body.split_at(body.find(['e', 'E']).unwrap_or(body.len()));
    if !mantissa.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let whole = match whole.trim_start_matches('0') {
        "" => "0",
        w => w,
    };
    let fraction = if fraction.is_empty() {
        String::new()
    } else {
        format!(".{fraction}")
    };
    let text = format!("{sign}{whole}{fraction}{exponent}");
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Number(_)) => Some(text),
        _ => None,
    }
}

/// The exact integer a number's text denotes, if it is one.
pub fn integer_of(text: &str) -> Option<i128> {
    let (negative, digits, exp) = decimal(text);
    if digits.is_empty() {
        return Some(0);
    }
    if exp < 0 || digits.len() as i64 + exp > 39 {
        return None;
    }
    let v: i128 = format!("{digits}{}", "0".repeat(exp as usize))
        .parse()
        .ok()?;
    Some(if negative { -v } else { v })
}

/// Whether a number's text fits `precision` digits, `scale` after the point.
pub fn fits_decimal(text: &str, precision: i64, scale: i64) -> bool {
    let (_, digits, exp) = decimal(text);
    digits.is_empty() || (exp >= -scale && digits.len() as i64 + exp <= precision - scale)
}

/// The float a number's text is rounded to, when it is in range and does not vanish.
pub fn float_of(text: &str, single: bool) -> Option<f64> {
    let v = if single {
        f64::from(text.parse::<f32>().ok()?)
    } else {
        text.parse::<f64>().ok()?
    };
    let zero = decimal(text).1.is_empty();
    (v.is_finite() && (v != 0.0 || zero)).then_some(if v == 0.0 { 0.0 } else { v })
}

/// A time's UTC form, its significant fractional digits, and whether it had an offset:
/// RFC 3339, or `YYYY-MM-DD[T ]HH:MM:SS[.f]` or MySQL's `YYYYMMDDHHMMSS[.f]` without one.
pub fn time_of(s: &str) -> Option<(chrono::NaiveDateTime, usize, bool)> {
    let (at, offset) = match chrono::DateTime::parse_from_rfc3339(s) {
        Ok(at) => (at.naive_utc(), true),
        Err(_) => (
            [
                "%Y-%m-%dT%H:%M:%S%.f",
                "%Y-%m-%d %H:%M:%S%.f",
                "%Y%m%d%H%M%S%.f",
            ]
            .iter()
            .find_map(|f| chrono::NaiveDateTime::parse_from_str(s, f).ok())?,
            false,
        ),
    };
    let nanos = at.and_utc().timestamp_subsec_nanos();
    let digits = format!("{nanos:09}").trim_end_matches('0').len();
    Some((at, digits, offset))
}

/// A time as `time_of` reads it, or a date `YYYY-MM-DD` (its midnight, no fraction).
pub fn instant_of(s: &str) -> Option<(chrono::NaiveDateTime, usize)> {
    match time_of(s) {
        Some((at, digits, _)) => Some((at, digits)),
        None => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .ok()
            .map(|day| (day.and_time(chrono::NaiveTime::MIN), 0)),
    }
}

#[test]
fn strings_of_numbers_read_as_a_server_reads_them() {
    assert_eq!(number_in(" 7 ").as_deref(), Some("7"));
    assert_eq!(number_in("+.5").as_deref(), Some("0.5"));
    assert_eq!(number_in("-5.").as_deref(), Some("-5"));
    assert_eq!(number_in("007").as_deref(), Some("7"));
    assert_eq!(number_in("1e-400").as_deref(), Some("1e-400"));
    assert_eq!(number_in("12abc"), None);
    assert_eq!(number_in(""), None);
    assert_eq!(number_in("0x10"), None);
}
