//! Times for DATETIME and TIMESTAMP columns. MariaDB refuses RFC 3339's `Z` and offsets
//! (error 1292) and both servers drop fractional digits beyond the column's precision
//! without a word (`05.12345` into DATETIME(3) is stored `05.123`). So a string with an
//! offset is converted to UTC — exact, the session runs in UTC (see
//! `settings::connect_options`) — and a time with more fractional digits than the column
//! keeps is refused, never rounded or cut. A string in no form parsed here goes to the
//! server as it is (it takes `20240102`, `2024-01-02`, …, or refuses with its number).

use chrono::{DateTime, NaiveDateTime};

/// The text a DATETIME(`precision`) or TIMESTAMP(`precision`) column is sent for `text`.
pub fn column_text(text: &str, precision: u32) -> Result<String, String> {
    let digits = fraction_digits(text);
    if let Some(digits) = digits
        && digits > precision as usize
    {
        return Err(format!(
            "{text:?} has {digits} significant fractional digits; the column keeps {precision} (not rounded)"
        ));
    }
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(format(at.naive_utc(), precision));
    }
    let naive = ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
        .iter()
        .find_map(|form| NaiveDateTime::parse_from_str(text, form).ok());
    Ok(match naive {
        Some(at) => format(at, precision),
        None => text.to_string(),
    })
}

/// `YYYY-MM-DD HH:MM:SS` with `precision` fractional digits: the column's own form.
fn format(at: NaiveDateTime, precision: u32) -> String {
    let whole = at.format("%Y-%m-%d %H:%M:%S").to_string();
    if precision == 0 {
        return whole;
    }
    let nanos = at.and_utc().timestamp_subsec_nanos();
    let fraction = format!("{nanos:09}");
    format!("{whole}.{}", &fraction[..precision.min(9) as usize])
}

/// Significant digits of the seconds' fraction of `YYYY-MM-DD?HH:MM:SS.fff…` (trailing
/// zeros are exact), or `None` for text of another form.
fn fraction_digits(text: &str) -> Option<usize> {
    let rest = text.get(19..)?.strip_prefix('.')?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    Some(rest[..digits].trim_end_matches('0').len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_utc_at_the_columns_precision() {
        assert_eq!(
            column_text("2024-01-02T03:04:05.123Z", 3).unwrap(),
            "2024-01-02 03:04:05.123"
        );
        assert_eq!(
            column_text("2024-01-02T05:04:05.1+02:00", 6).unwrap(),
            "2024-01-02 03:04:05.100000"
        );
        assert_eq!(
            column_text("2024-06-30T23:59:59.123456-01:00", 6).unwrap(),
            "2024-07-01 00:59:59.123456"
        );
        assert_eq!(
            column_text("2024-01-02t03:04:05z", 0).unwrap(),
            "2024-01-02 03:04:05"
        );
        assert_eq!(
            column_text("2024-01-02T03:04:05.120000Z", 2).unwrap(),
            "2024-01-02 03:04:05.12"
        );
    }

    #[test]
    fn digits_the_column_would_drop_are_refused() {
        let e = column_text("2024-01-02T03:04:05.1234Z", 3).unwrap_err();
        assert!(
            e.contains("4 significant fractional digits; the column keeps 3"),
            "{e}"
        );
        assert!(column_text("2024-01-02 03:04:05.5", 0).is_err());
        assert!(column_text("2024-01-02T03:04:05.000000001Z", 6).is_err());
    }

    #[test]
    fn other_forms_go_to_the_server_as_written() {
        assert_eq!(
            column_text("2024-01-02T03:04:05", 0).unwrap(),
            "2024-01-02 03:04:05"
        );
        assert_eq!(column_text("2024-01-02", 0).unwrap(), "2024-01-02");
        assert_eq!(column_text("20240102030405", 0).unwrap(), "20240102030405");
        assert_eq!(column_text("not a time", 0).unwrap(), "not a time");
    }
}
