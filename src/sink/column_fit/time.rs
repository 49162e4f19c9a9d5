//! Times for timestamp, DATETIME/TIMESTAMP and date columns. MariaDB refuses RFC 3339's
//! `Z` and offsets (error 1292), PostgreSQL's `timestamp` takes them and drops the offset
//! (`10:00+02:00` is stored 10:00), both servers round or drop fractional digits beyond
//! the column's precision without a word (`05.12345` into DATETIME(3) is stored `05.123`),
//! and both drop a date column's time of day. So a string with an offset is converted to
//! UTC — exact, the sessions run in UTC — and a time with more fractional digits than the
//! column keeps is refused, never rounded or cut; so is a time of day for a date column.
//! `None`: a string in no form read here, for the caller to refuse or to hand to the
//! server as it is (MySQL takes `20240102`, …, or refuses it with its number).

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime};

use super::fraction_within;

/// The text a timestamp column of `precision` digits is sent for `text`.
pub fn time_text(text: &str, precision: u32) -> Result<Option<String>, String> {
    fraction_within(text, precision)?;
    Ok(parse(text).map(|at| format(at, precision)))
}

/// The text a date column is sent for `text`: a time of day other than midnight (UTC,
/// for one with an offset) is refused, not dropped; so is text of another form longer
/// than any of MySQL's date forms, which carries more than a date.
pub fn date_text(text: &str) -> Result<Option<String>, String> {
    fraction_within(text, 0)?;
    let refused = Err(format!(
        "{text:?} is more than a date; the column keeps the date only (not cut)"
    ));
    match parse(text) {
        Some(at) if at.time() == NaiveTime::MIN => Ok(Some(at.format("%Y-%m-%d").to_string())),
        Some(_) => refused,
        None if text.chars().count() > "YYYY-MM-DD".len() => refused,
        None => Ok(None),
    }
}

/// A time in RFC 3339 (in UTC), `YYYY-MM-DD[T ]HH:MM:SS[.fraction]` or MySQL's compact
/// `YYYYMMDDHHMMSS[.fraction]` without an offset, or a date `YYYY-MM-DD` (its midnight).
fn parse(text: &str) -> Option<NaiveDateTime> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Some(at.naive_utc());
    }
    [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y%m%d%H%M%S%.f",
    ]
    .iter()
    .find_map(|form| NaiveDateTime::parse_from_str(text, form).ok())
    .or_else(|| {
        NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .ok()
            .map(|day| day.and_time(NaiveTime::MIN))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_utc_at_the_columns_precision() {
        assert_eq!(
            time_text("2024-01-02T03:04:05.123Z", 3).unwrap().unwrap(),
            "2024-01-02 03:04:05.123"
        );
        assert_eq!(
            time_text("2024-01-02T05:04:05.1+02:00", 6)
                .unwrap()
                .unwrap(),
            "2024-01-02 03:04:05.100000"
        );
        assert_eq!(
            time_text("2024-06-30T23:59:59.123456-01:00", 6)
                .unwrap()
                .unwrap(),
            "2024-07-01 00:59:59.123456"
        );
        assert_eq!(
            time_text("2024-01-02t03:04:05z", 0).unwrap().unwrap(),
            "2024-01-02 03:04:05"
        );
        assert_eq!(
            time_text("2024-01-02T03:04:05.120000Z", 2)
                .unwrap()
                .unwrap(),
            "2024-01-02 03:04:05.12"
        );
    }

    #[test]
    fn digits_the_column_would_drop_are_refused() {
        let e = time_text("2024-01-02T03:04:05.1234Z", 3).unwrap_err();
        assert!(
            e.contains("4 significant fractional digits; the column keeps 3"),
            "{e}"
        );
        assert!(time_text("2024-01-02 03:04:05.5", 0).is_err());
        assert!(time_text("2024-01-02T03:04:05.000000001Z", 6).is_err());
    }

    #[test]
    fn fractions_in_any_form_are_counted() {
        assert!(time_text("2024-5-1 10:00:00.5", 0).is_err());
        assert!(time_text("20240501100000.5", 0).is_err());
        assert_eq!(
            time_text("2024-5-1 10:00:00.5", 1).unwrap().unwrap(),
            "2024-05-01 10:00:00.5"
        );
    }

    #[test]
    fn a_date_column_takes_no_time_of_day() {
        let date = |t: &str| date_text(t).unwrap();
        assert_eq!(date("2024-05-01").as_deref(), Some("2024-05-01"));
        assert_eq!(date("20240501"), None, "for the server to read");
        assert_eq!(date("2024-05-01T00:00:00Z").as_deref(), Some("2024-05-01"));
        assert_eq!(
            date("2024-05-01 00:00:00.000").as_deref(),
            Some("2024-05-01")
        );
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
    fn other_forms_are_left_to_the_caller() {
        assert_eq!(
            time_text("2024-01-02T03:04:05", 0).unwrap().unwrap(),
            "2024-01-02 03:04:05"
        );
        let time = |t: &str| time_text(t, 0).unwrap();
        assert_eq!(time("2024-01-02").as_deref(), Some("2024-01-02 00:00:00"));
        assert_eq!(
            time("20240102030405").as_deref(),
            Some("2024-01-02 03:04:05")
        );
        assert_eq!(time("20240102"), None);
        assert_eq!(time("not a time"), None);
    }
}
