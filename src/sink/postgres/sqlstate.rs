//! What a PostgreSQL error means for the records that met it, by SQLSTATE (PostgreSQL's
//! errcodes appendix). Each code answers one question: is it "not now" (the server cannot
//! take writes for a while: wait, blame no record), "not this record" (split the batch,
//! dead-letter the record), or "never" (the statement, the schema or the credentials are
//! wrong: stop)? A code the table does not know is judged by evidence instead
//! ([`ErrorClass::Unexplained`]), never by guessing "never" or "not this record".

use sqlx::postgres::{PgDatabaseError, PgErrorPosition};

use crate::sink::WriteOutcome;
use crate::sink::sql_error::{self, ErrorClass};

/// When the error came: while opening a connection or while running a statement. Some
/// codes mean different things at each (55000 at connect is a database closed for
/// maintenance; in a statement it is an object in the wrong state, e.g. a view).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Connect,
    Statement,
}

/// "Not now": the server, or the table, cannot take writes for a while. Nothing here is
/// the records' doing, so they are retried without limit and never dead-lettered for it.
/// Class 08 (connection exceptions) is added whole; it includes 08P01, which PgBouncer
/// also uses for its own waits (`query_wait_timeout`, a paused pool).
const NOT_NOW: &[&str] = &[
    // read_only_sql_transaction: a standby after a failover, or default_transaction_read_only
    // set for maintenance. The connection is closed, so the next one reaches whatever is
    // writable now.
    "25006", "53000", // insufficient_resources
    "53100", // disk_full
    "53300", // too_many_connections
    // object_in_use: another session is using the table (a maintenance command).
    "55006",
    // lock_not_available: lock_timeout ran out behind another session's lock (VACUUM
    // FULL, ALTER TABLE, REINDEX). It clears when that session ends; dead-lettering after
    // max_attempts would throw away a whole maintenance window's records.
    "55P03", "57P01", // admin_shutdown
    "57P02", // crash_shutdown
    "57P03", // cannot_connect_now: starting up, shutting down, in recovery
    // database_dropped: a standby drops our connection when the primary drops the
    // database. The reconnect decides: 3D000 (gone for good) stops the worker.
    "57P04", "57P05", // idle_session_timeout: the server closed an idle connection
];

/// "Never": the credentials, the database or the schema are wrong. No retry and no
/// record changes that, and dead-lettering would throw away every record.
const NEVER: &[&str] = &[
    "3D000", // invalid_catalog_name: the database does not exist
    "3F000", // invalid_schema_name
    "42501", // insufficient_privilege
    "42601", // syntax_error
    "42P01", // undefined_table
    "42703", // undefined_column
    "42809", // wrong_object_type: the table is a view (COPY cannot write it)
    "42883", // undefined_function
    "42P10", // invalid_column_reference (ON CONFLICT without a unique index)
];

/// May pass on retry, but a record can also cause it every time: retried up to
/// `retry.max_attempts`, then split, then dead-lettered.
const MAYBE_THE_BATCH: &[&str] = &[
    // configuration_limit_exceeded: the statement crossed a limit such as temp_file_limit;
    // a smaller batch may pass.
    "53400",
    // query_canceled: statement_timeout (a slow trigger on one record times out every
    // batch holding it) or an operator's cancel.
    "57014", "72000", // snapshot_too_old
];

/// "Not this record": the value, a constraint, or user code judging the row.
const NOT_THIS_RECORD: &[&str] = &[
    "44000", // with_check_option_violation: the row falls outside the view's condition
    // raise_exception: a trigger's plain RAISE EXCEPTION, user code rejecting this row.
    // A trigger that wants writes to wait should raise a "not now" code instead.
    "P0001",
];

/// Program limits (class 54) that one value crosses: an index row over the btree maximum
/// (a 9,000-character key), a row or array too big, a tsvector too long, a value nested
/// past the stack depth. A batch holding such a record is split until it is alone, then
/// dead-lettered; it fails the same way however often it is sent.
const ONE_VALUE_TOO_BIG: &[&str] = &[
    "54000", // program_limit_exceeded
    "54001", // statement_too_complex: "stack depth limit exceeded"
];

/// The 54000s that are the whole database's state, not a value's, told apart by the
/// server routine that raised them (the message is translated, the routine is not).
/// XID and MultiXact wraparound protection refuses every write until a VACUUM: "not now".
const WRAPAROUND: &[&str] = &["GetNewTransactionId", "GetNewMultiXactId"];
/// A table file at the largest size the build allows: no record can fix it.
const TABLE_FULL: &[&str] = &["mdextend", "mdzeroextend"];

/// Sorts a SQLSTATE; `routine` (the server function that raised it, when the server
/// says) separates the few codes that mean one thing for a row and another for the
/// whole database.
pub fn classify(
    code: &str,
    routine: Option<&str>,
    phase: Phase,
    throttle: &[String],
) -> ErrorClass {
    if throttle.iter().any(|t| t == code) {
        return ErrorClass::Throttle;
    }
    let raised_by = |routines: &[&str]| routine.is_some_and(|r| routines.contains(&r));
    match code {
        "54000" if raised_by(WRAPAROUND) => ErrorClass::Unavailable,
        "54000" if raised_by(TABLE_FULL) => ErrorClass::Fatal,
        // object_not_in_prerequisite_state, at connect: "database is not currently
        // accepting connections" (ALLOW_CONNECTIONS false, a maintenance window).
        "55000" if phase == Phase::Connect => ErrorClass::Unavailable,
        // out_of_memory: the server is short of memory, which a smaller batch eases. As a
        // throttle the worker slows down and splits a batch throttled three times, and no
        // record is ever dead-lettered for it.
        "53200" => ErrorClass::Throttle,
        c if c.starts_with("08") || NOT_NOW.contains(&c) => ErrorClass::Unavailable,
        // invalid_authorization_specification: role or password refused.
        c if c.starts_with("28") || NEVER.contains(&c) => ErrorClass::Fatal,
        // transaction_rollback: serialization failure (also a standby's recovery
        // conflict), deadlock.
        c if c.starts_with("40") || MAYBE_THE_BATCH.contains(&c) => ErrorClass::Transient,
        // data exceptions, integrity constraints, and the rest of class 42.
        c if c.starts_with("22")
            || c.starts_with("23")
            || c.starts_with("42")
            || NOT_THIS_RECORD.contains(&c)
            || ONE_VALUE_TOO_BIG.contains(&c) =>
        {
            ErrorClass::Permanent
        }
        // Everything else — internal errors (XX), the other program limits (54011 too
        // many columns, 54023 too many arguments: the statement's, not a value's), other
        // PL/pgSQL errors, 55000 in a statement (e.g. "cannot insert into view") — is
        // judged by evidence.
        _ => ErrorClass::Unexplained,
    }
}

/// Sorts an error into what the delivery should do about it, by its SQLSTATE (or, without
/// one, by whether the connection itself failed).
pub(crate) fn judge(
    err: &sqlx::Error,
    phase: Phase,
    throttle_sqlstates: &[String],
) -> WriteOutcome {
    sql_error::judge(err, |db| {
        let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
        let routine = db
            .try_downcast_ref::<PgDatabaseError>()
            .and_then(PgDatabaseError::routine);
        let class = classify(&code, routine, phase, throttle_sqlstates);
        (class, format!("SQLSTATE {code}: {}", db.message()))
    })
}

/// How a PostgreSQL error reads in logs and in `check`: its SQLSTATE and message, and
/// where in the statement it went wrong when the server says so. Not sqlx's own text,
/// whose "at line 1392" is a line of the server's C source.
pub fn describe(err: &sqlx::Error) -> String {
    match err {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            let mut text = format!("SQLSTATE {code}: {}", db.message());
            let pg = db.try_downcast_ref::<PgDatabaseError>();
            if let Some(PgErrorPosition::Original(at)) = pg.and_then(PgDatabaseError::position) {
                text.push_str(&format!(" (at character {at} of the statement)"));
            }
            text
        }
        // sqlx prefixes "error with configuration" to a message that often says it again.
        sqlx::Error::Configuration(inner) => inner.to_string(),
        other => other.to_string(),
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
            ("08P01", ErrorClass::Unavailable),
            ("25006", ErrorClass::Unavailable),
            ("53000", ErrorClass::Unavailable),
            ("53100", ErrorClass::Unavailable),
            ("53300", ErrorClass::Unavailable),
            ("55006", ErrorClass::Unavailable),
            ("55P03", ErrorClass::Unavailable),
            ("57P01", ErrorClass::Unavailable),
            ("57P03", ErrorClass::Unavailable),
            ("57P04", ErrorClass::Unavailable),
            ("57P05", ErrorClass::Unavailable),
            ("53200", ErrorClass::Throttle),
            ("40001", ErrorClass::Transient),
            ("40P01", ErrorClass::Transient),
            ("57014", ErrorClass::Transient),
            ("53400", ErrorClass::Transient),
            ("72000", ErrorClass::Transient),
            ("23514", ErrorClass::Permanent),
            ("23505", ErrorClass::Permanent),
            ("22P02", ErrorClass::Permanent),
            ("42804", ErrorClass::Permanent),
            ("44000", ErrorClass::Permanent),
            ("P0001", ErrorClass::Permanent),
            ("42P01", ErrorClass::Fatal),
            ("42501", ErrorClass::Fatal),
            ("42809", ErrorClass::Fatal),
            ("28P01", ErrorClass::Fatal),
            ("3D000", ErrorClass::Fatal),
            ("XX000", ErrorClass::Unexplained),
            ("54000", ErrorClass::Permanent),
            ("54001", ErrorClass::Permanent),
            ("54011", ErrorClass::Unexplained),
            ("54023", ErrorClass::Unexplained),
            ("22021", ErrorClass::Permanent),
            ("22P05", ErrorClass::Permanent),
            ("22001", ErrorClass::Permanent),
            ("P0002", ErrorClass::Unexplained),
            ("0A000", ErrorClass::Unexplained),
        ] {
            assert_eq!(
                classify(code, None, Phase::Statement, none),
                class,
                "{code}"
            );
        }
    }

    #[test]
    fn a_database_closed_to_connections_is_an_outage_only_at_connect() {
        let none: &[String] = &[];
        assert_eq!(
            classify("55000", None, Phase::Connect, none),
            ErrorClass::Unavailable
        );
        // "cannot insert into view": the same code in a statement is no outage.
        assert_eq!(
            classify("55000", None, Phase::Statement, none),
            ErrorClass::Unexplained
        );
        assert_eq!(
            classify("28P01", None, Phase::Connect, none),
            ErrorClass::Fatal
        );
    }

    #[test]
    fn a_program_limit_is_the_value_unless_the_whole_database_is_at_it() {
        let none: &[String] = &[];
        let at = Phase::Statement;
        let index_row = Some("index_form_tuple_context");
        assert_eq!(
            classify("54000", index_row, at, none),
            ErrorClass::Permanent
        );
        assert_eq!(
            classify("54000", Some("GetNewTransactionId"), at, none),
            ErrorClass::Unavailable
        );
        assert_eq!(
            classify("54000", Some("GetNewMultiXactId"), at, none),
            ErrorClass::Unavailable
        );
        assert_eq!(
            classify("54000", Some("mdextend"), at, none),
            ErrorClass::Fatal
        );
    }

    #[test]
    fn configured_codes_throttle() {
        let throttle = vec!["53300".to_string(), "57014".to_string()];
        let at = Phase::Statement;
        assert_eq!(classify("53300", None, at, &throttle), ErrorClass::Throttle);
        assert_eq!(classify("57014", None, at, &throttle), ErrorClass::Throttle);
        assert_eq!(
            classify("40001", None, at, &throttle),
            ErrorClass::Transient
        );
    }
}
