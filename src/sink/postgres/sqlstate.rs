//! What a PostgreSQL error means for the records that met it, by SQLSTATE.

/// The pipeline's view of an error class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Listed in `sink.throttle_sqlstates`: slow down, like HTTP 429.
    Throttle,
    /// The database cannot be reached or cannot take any write now; not the records'
    /// fault, retried for as long as it lasts.
    Unavailable,
    /// May pass on retry but may also be the batch's doing (deadlock, lock or statement
    /// timeout): retried, then split, then dead-lettered.
    Transient,
    /// Some record can never be written (bad value, constraint): split the batch.
    Permanent,
    /// The statement or the schema is wrong (table dropped, privilege revoked): no record
    /// is at fault and none should be dead-lettered for it.
    Fatal,
}

/// Codes of the 42 class that describe the schema or the statement, not a record.
const SCHEMA_ERRORS: &[&str] = &[
    "42501", // insufficient_privilege
    "42601", // syntax_error
    "42P01", // undefined_table
    "42703", // undefined_column
    "42883", // undefined_function
    "42P10", // invalid_column_reference (ON CONFLICT without a unique index)
];

pub fn classify(code: &str, throttle: &[String]) -> ErrorClass {
    if throttle.iter().any(|t| t == code) {
        return ErrorClass::Throttle;
    }
    match code {
        // connection_exception; admin/crash shutdown, cannot connect now; too many
        // connections; disk full.
        c if c.starts_with("08") => ErrorClass::Unavailable,
        "57P01" | "57P02" | "57P03" | "53300" | "53100" => ErrorClass::Unavailable,
        // serialization failure, deadlock, out of memory, configuration limit, lock not
        // available, statement timeout / cancel.
        "40001" | "40P01" | "53200" | "53400" | "55P03" | "57014" => ErrorClass::Transient,
        c if SCHEMA_ERRORS.contains(&c) => ErrorClass::Fatal,
        c if c.starts_with("22") || c.starts_with("23") || c.starts_with("42") => {
            ErrorClass::Permanent
        }
        _ => ErrorClass::Fatal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_sqlstate() {
        let none: &[String] = &[];
        for (code, class) in [
            ("08006", ErrorClass::Unavailable),
            ("57P01", ErrorClass::Unavailable),
            ("57P03", ErrorClass::Unavailable),
            ("53300", ErrorClass::Unavailable),
            ("40001", ErrorClass::Transient),
            ("40P01", ErrorClass::Transient),
            ("55P03", ErrorClass::Transient),
            ("57014", ErrorClass::Transient),
            ("53400", ErrorClass::Transient),
            ("23514", ErrorClass::Permanent),
            ("23505", ErrorClass::Permanent),
            ("22P02", ErrorClass::Permanent),
            ("42804", ErrorClass::Permanent),
            ("42P01", ErrorClass::Fatal),
            ("42501", ErrorClass::Fatal),
            ("XX000", ErrorClass::Fatal),
        ] {
            assert_eq!(classify(code, none), class, "{code}");
        }
    }

    #[test]
    fn configured_codes_throttle() {
        let throttle = vec!["53300".to_string(), "57014".to_string()];
        assert_eq!(classify("53300", &throttle), ErrorClass::Throttle);
        assert_eq!(classify("57014", &throttle), ErrorClass::Throttle);
        assert_eq!(classify("40001", &throttle), ErrorClass::Transient);
    }
}
