//! What a SQL sink's error means for the records that met it, whichever the database:
//! each backend sorts its own codes (PostgreSQL's SQLSTATEs in `postgres::sqlstate`,
//! MySQL's error numbers in `mysql::errno`) into one [`ErrorClass`], and [`judge`] turns
//! it, or an error without a code, into what the delivery does.

use sqlx::error::DatabaseError;

use super::WriteOutcome;

/// The pipeline's view of a database error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Slow down, like HTTP 429: a code listed in `sink.throttle_sqlstates` /
    /// `sink.throttle_errors`, too many connections, out of memory. Retried without limit.
    Throttle,
    /// The database cannot be reached or cannot take any write now; not the records'
    /// fault, retried for as long as it lasts.
    Unavailable,
    /// May pass on retry but may also be the batch's doing (deadlock, lock wait,
    /// statement timeout): retried, then split, then dead-lettered.
    Transient,
    /// Some record can never be written (bad value, constraint, a trigger rejecting it):
    /// the batch is split to the bad rows.
    Permanent,
    /// The statement, the schema or the credentials are wrong (table dropped, privilege
    /// revoked, password refused): no record is at fault and none should be dead-lettered.
    Fatal,
    /// No rule says whose fault it is: split the batch; a record failing alone is
    /// dead-lettered only if a write without it succeeds afterwards, otherwise the worker
    /// stops (see `write/delivery.rs`).
    Unexplained,
}

impl ErrorClass {
    /// What the delivery is told, `reason` the error as the logs say it.
    pub fn outcome(self, reason: String) -> WriteOutcome {
        match self {
            ErrorClass::Throttle => WriteOutcome::Throttled {
                retry_after: None,
                unit: None,
                reason,
            },
            ErrorClass::Unavailable => WriteOutcome::Unavailable(reason),
            ErrorClass::Transient => WriteOutcome::Transient(reason),
            ErrorClass::Permanent => WriteOutcome::Rejected { rows: None, reason },
            ErrorClass::Fatal => WriteOutcome::Fatal(reason),
            ErrorClass::Unexplained => WriteOutcome::Unexplained(reason),
        }
    }
}

/// Sorts an error into what the delivery should do about it: a server's error by
/// `database` (its backend's class and words for it), any other by whether the
/// connection itself failed.
pub fn judge(
    err: &sqlx::Error,
    database: impl FnOnce(&dyn DatabaseError) -> (ErrorClass, String),
) -> WriteOutcome {
    match err {
        sqlx::Error::Database(db) => {
            let (class, reason) = database(db.as_ref());
            class.outcome(reason)
        }
        // A certificate refused either way is no outage: waiting cannot fix it.
        sqlx::Error::Io(_) | sqlx::Error::Tls(_)
            if crate::tls::certificate_refused(err).is_some() =>
        {
            let why = crate::tls::certificate_refused(err).unwrap_or_default();
            WriteOutcome::Fatal(format!("TLS handshake failed: {why}"))
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => WriteOutcome::Unavailable(err.to_string()),
        _ => WriteOutcome::Fatal(err.to_string()),
    }
}
