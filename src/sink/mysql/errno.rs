//! MySQL / MariaDB error numbers sorted by what the delivery should do about them: wait,
//! retry, split the batch to the bad rows, or stop (the [`ErrorClass`] every SQL sink
//! shares).

pub use crate::sink::sql_error::ErrorClass;

/// Sorts a server error number; `throttle_errors` (from `sink.throttle_errors`) win.
pub fn classify(number: u16, throttle_errors: &[u16]) -> ErrorClass {
    if throttle_errors.contains(&number) {
        return ErrorClass::Throttle;
    }
    match number {
        // ER_CON_COUNT_ERROR, ER_TOO_MANY_USER_CONNECTIONS, ER_USER_LIMIT_REACHED.
        1040 | 1203 | 1226 => ErrorClass::Throttle,
        // Client-side "server gone" numbers, in case a driver reports them as server
        // errors; ER_SERVER_SHUTDOWN, ER_OPTION_PREVENTS_STATEMENT (read-only after a
        // failover), ER_CONNECTION_KILLED (MariaDB).
        2002 | 2003 | 2006 | 2013 | 1053 | 1290 | 1927 => ErrorClass::Unavailable,
        // Deadlock, lock wait timeout, MariaDB's and MySQL's statement timeouts.
        1213 | 1205 | 1969 | 3024 => ErrorClass::Transient,
        // NOT NULL, duplicate on a secondary unique key, out of range, data truncated
        // (`12abc` for a number), bad date, bad value, too long, invalid JSON; CHECK
        // constraints (MariaDB 4025, MySQL 3819).
        1048 | 1062 | 1264 | 1265 | 1292 | 1366 | 1406 | 3140 | 4025 | 3819 => {
            ErrorClass::Permanent
        }
        // No such table, unknown column, table access denied; database access denied,
        // login refused, unknown database, column access denied.
        1146 | 1054 | 1142 | 1044 | 1045 | 1049 | 1143 => ErrorClass::Fatal,
        _ => ErrorClass::Unexplained,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_the_numbers_the_issue_lists() {
        for n in [1040, 1203, 1226] {
            assert_eq!(classify(n, &[]), ErrorClass::Throttle, "{n}");
        }
        for n in [2002, 2003, 2006, 2013] {
            assert_eq!(classify(n, &[]), ErrorClass::Unavailable, "{n}");
        }
        for n in [1213, 1205, 1969, 3024] {
            assert_eq!(classify(n, &[]), ErrorClass::Transient, "{n}");
        }
        for n in [1048, 1062, 1264, 1292, 1366, 1406, 3140] {
            assert_eq!(classify(n, &[]), ErrorClass::Permanent, "{n}");
        }
        for n in [1146, 1054, 1142] {
            assert_eq!(classify(n, &[]), ErrorClass::Fatal, "{n}");
        }
        assert_eq!(classify(1105, &[]), ErrorClass::Unexplained);
    }

    #[test]
    fn configured_numbers_mean_slow_down() {
        assert_eq!(classify(1205, &[1205]), ErrorClass::Throttle);
        assert_eq!(classify(1105, &[1105]), ErrorClass::Throttle);
    }
}
