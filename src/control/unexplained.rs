//! Whose fault is an error no rule explains? The delivery splits the batch that met it
//! and asks this tracker at the end. A record is blamed only on evidence: it failed
//! alone, and a write succeeded after the failure was first seen — the error disappears
//! without that record. If nothing could be written since, the failure hit every record
//! the batch tried: a schema or server problem, not a row's, and the worker stops rather
//! than dead-letter the batch. A batch of one record has no neighbour to clear it, so it
//! stops too; the sink's error classes keep known row errors out of this path.

use crate::record::DeadLetter;

/// One batch's unexplained failures and the evidence about them.
#[derive(Debug, Default)]
pub struct UnexplainedFailures {
    seen: bool,
    cleared: bool,
    suspects: Vec<DeadLetter>,
}

impl UnexplainedFailures {
    /// A piece of several records failed: it is split, and the halves will tell.
    pub fn failed(&mut self) {
        self.seen = true;
    }

    /// A record failed alone; it is dead-lettered as `letter` if the evidence allows.
    pub fn failed_alone(&mut self, letter: DeadLetter) {
        self.seen = true;
        self.suspects.push(letter);
    }

    /// A write of the batch succeeded.
    pub fn written(&mut self) {
        self.cleared |= self.seen;
    }

    /// At the end of the batch: the records to dead-letter, or why the worker must stop.
    pub fn verdict(self) -> Result<Vec<DeadLetter>, String> {
        match self.suspects.first() {
            Some(first) if !self.cleared => Err(format!(
                "{} (every record tried alone failed and none could be written: not a row's fault)",
                first.reason
            )),
            _ => Ok(self.suspects),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(key: &str) -> DeadLetter {
        let row = crate::record::Row {
            key: key.into(),
            payload: "{}".into(),
            origin: format!("t:{key}"),
            ..Default::default()
        };
        DeadLetter::from_row(&row, "SQLSTATE XX000: odd", 1)
    }

    #[test]
    fn a_record_failing_alone_is_blamed_once_a_write_succeeds_after_the_failure() {
        let mut f = UnexplainedFailures::default();
        f.failed();
        f.failed_alone(letter("a"));
        f.written();
        f.failed_alone(letter("b"));
        let blamed: Vec<_> = f.verdict().unwrap().into_iter().map(|l| l.key).collect();
        assert_eq!(blamed, [Some("a".into()), Some("b".into())]);
    }

    #[test]
    fn a_write_before_the_first_failure_is_no_evidence() {
        let mut f = UnexplainedFailures::default();
        f.written();
        f.failed();
        f.failed_alone(letter("a"));
        f.failed_alone(letter("b"));
        let err = f.verdict().unwrap_err();
        assert!(err.starts_with("SQLSTATE XX000: odd"), "{err}");
        assert!(err.contains("not a row's fault"), "{err}");
    }

    #[test]
    fn a_single_record_batch_that_fails_has_no_evidence() {
        let mut f = UnexplainedFailures::default();
        f.failed_alone(letter("a"));
        assert!(f.verdict().is_err());
    }

    #[test]
    fn failures_that_cleared_on_smaller_pieces_blame_nobody() {
        let mut f = UnexplainedFailures::default();
        f.failed();
        f.written();
        f.written();
        assert!(f.verdict().unwrap().is_empty());
        assert!(UnexplainedFailures::default().verdict().unwrap().is_empty());
    }
}
