//! Times for DATETIME, TIMESTAMP and DATE columns. MariaDB refuses RFC 3339's `Z` and offsets
//! (error 1292) and both servers drop fractional digits beyond the column's precision
//! without a word (`05.12345` into DATETIME(3) is stored `05.123`). So a string with an
//! offset is converted to UTC — exact, the session runs in UTC (see
//! `settings::connect_options`) — and a time with more fractional digits than the column
//! keeps is refused, never rounded or cut; so is a time of day for a DATE column, which
//! MySQL drops with a note. A string in no form parsed here goes to the server as it is
//! (it takes `20240102`, `2024-01-02`, …, or refuses with its number).

use chrono::{DateTime, NaiveDateTime, NaiveTime};

use crate::sink::column_fit::fraction_within;

/// The text a DATETIME(`precision`) or TIMESTAMP(`precision`) column is sent for `text`.
pub fn column_text(text: &str, precision: u32) -> Result<String, String> {
    fraction_within(text, precision)?;
    Ok(match parse(text) {
        Some(at) => format(at, precision),
        None => text.to_string(),
    })
}

/// The text a DATE column is sent for `text`: a time of day other than midnight (UTC,
/// for one with an offset) is refused, not dropped as MySQL drops it with a note; so is
/// text longer than any of MySQL's date forms, which carries more than a date.
pub fn date_text(text: &str) -> Result<String, String> {
    let refused = || {
        Err(format!(
            "{text:?} has a time of day; the column keeps the date only (not cut)"
        ))
    };
    fraction_within(text, 0)?;
    if let Some(at) = parse(text) {
        if at.time() != NaiveTime::MIN {
            return refused();
        }
        return Ok(at.format("%Y-%m-%d").to_string());
    }
    if text.chars().count() > "YYYY-MM-DD".len() {
        return refused();
    }
    Ok(text.to_string())
}

/// A time in RFC 3339 (in UTC) or `YYYY-MM-DD[T ]HH:MM:SS[.fraction]` without an offset.
fn parse(text: &str) -> Option<NaiveDateTime> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Some(at.naive_utc());
    }
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
        .iter()
        .find_map(|form| NaiveDateTime::parse_from_str(text, form).ok())
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
    fn fractions_in_any_form_are_counted() {
        assert!(column_text("2024-5-1 10:00:00.5", 0).is_err());
        assert!(column_text("20240501100000.5", 0).is_err());
        assert_eq!(
            column_text("2024-5-1 10:00:00.5", 1).unwrap(),
            "2024-05-01 10:00:00.5"
        );
    }

    #[test]
    fn a_date_column_takes_no_time_of_day() {
        assert_eq!(date_text("2024-05-01").unwrap(), "2024-05-01");
        assert_eq!(date_text("20240501").unwrap(), "20240501");
        assert_eq!(date_text("2024-05-01T00:00:00Z").unwrap(), "2024-05-01");
        assert_eq!(date_text("2024-05-01 00:00:00.000").unwrap(), "2024-05-01");
        for refused in [
            "2024-05-01T10:00:00",
            "2024-05-01T00:00:00+02:00",
            "2024-05-01 00:00:00.5",
            "2024-05-01 10:00",
            "20240501100000",
        ] {
            let e = date_text(refused).unwrap_err();
            assert!(
                e.contains("keeps the date only") || e.contains("fractional"),
                "{refused}: {e}"
            );
        }
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
