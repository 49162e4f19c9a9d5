//! Dead letters into `sluice_dead_letters`, cut into statements under the server's
//! `max_allowed_packet` as rows are (one statement per chunk: storing a letter twice keeps
//! one, by its fingerprint, so no transaction is needed). A letter too large for any
//! statement is stored cut to fit — its record, key, source key or headers, the longest
//! first — and its reason says what was cut, with each cut value's length and SHA-256,
//! so the record can still be told and found in its source.

use std::borrow::Cow;

use sha2::{Digest, Sha256};
use sqlx::MySqlConnection;

use super::statement::{self, VALUE_OVERHEAD};
use super::tables::{DEAD_LETTER_COLUMNS, DEAD_LETTERS};
use crate::record::DeadLetter;
use crate::sink::dead_letter_fingerprint;
use crate::sink::dead_letters::headers_json;

/// The most of a reason stored: the column is a TEXT (65,535 bytes).
const REASON_MOST: usize = 16 * 1024;

/// Room kept in a cut letter for the note its reason gains.
const NOTE_ROOM: usize = 1024;

/// One letter as its row binds it.
struct Stored<'a> {
    fingerprint: String,
    position: &'a str,
    key: Option<Cow<'a, str>>,
    raw: Cow<'a, [u8]>,
    reason: Cow<'a, str>,
    attempts: i32,
    source_key: Option<Cow<'a, [u8]>>,
    headers: Option<Cow<'a, str>>,
}

impl<'a> Stored<'a> {
    fn new(target: &str, letter: &'a DeadLetter, headers: Option<&'a str>) -> Self {
        Stored {
            fingerprint: dead_letter_fingerprint(target, letter),
            position: &letter.origin,
            key: letter.key.as_deref().map(Cow::Borrowed),
            raw: Cow::Borrowed(&letter.raw),
            reason: Cow::Borrowed(&letter.reason),
            attempts: i32::try_from(letter.attempts).unwrap_or(i32::MAX),
            source_key: letter.context.key.as_deref().map(Cow::Borrowed),
            headers: headers.map(Cow::Borrowed),
        }
    }

    /// Bytes of values, the target's included.
    fn size(&self, target: &str) -> usize {
        self.fixed(target)
            + self.raw.len()
            + self.key.as_ref().map_or(0, |k| k.len())
            + self.source_key.as_ref().map_or(0, |k| k.len())
            + self.headers.as_ref().map_or(0, |h| h.len())
    }

    /// Bytes that are never cut (a reason is capped, not cut to fit).
    fn fixed(&self, target: &str) -> usize {
        self.fingerprint.len()
            + self.position.len()
            + self.reason.len()
            + 4
            + target.len()
            + DEAD_LETTER_COLUMNS.len() * VALUE_OVERHEAD
    }

    /// Cuts the letter to `budget` bytes: the reason to `REASON_MOST`, then the values
    /// that may be large to an equal share of the room left (the shorter ones whole).
    fn fit(mut self, target: &str, budget: usize) -> Self {
        let mut notes = Vec::new();
        if self.reason.len() > REASON_MOST {
            let full = self.reason.len();
            let cut = self.reason.floor_char_boundary(REASON_MOST);
            self.reason = Cow::Owned(self.reason[..cut].to_string());
            notes.push(format!("reason of {full} bytes, first {cut} kept"));
        }
        if self.size(target) + NOTE_ROOM > budget {
            let room = budget.saturating_sub(self.fixed(target) + NOTE_ROOM);
            let lengths = [
                self.raw.len(),
                self.key.as_ref().map_or(0, |k| k.len()),
                self.source_key.as_ref().map_or(0, |k| k.len()),
                self.headers.as_ref().map_or(0, |h| h.len()),
            ];
            let most = equal_share(&lengths, room);
            if let Some(note) = cut_bytes(&mut self.raw, most, "record") {
                notes.push(note);
            }
            if let Some(key) = &mut self.key
                && let Some(note) = cut_text(key, most, "key")
            {
                notes.push(note);
            }
            if let Some(source_key) = &mut self.source_key
                && let Some(note) = cut_bytes(source_key, most, "source key")
            {
                notes.push(note);
            }
            if let Some(headers) = &mut self.headers
                && let Some(note) = cut_text(headers, most, "headers")
            {
                notes.push(note);
            }
        }
        if !notes.is_empty() {
            self.reason = Cow::Owned(format!(
                "{} [stored cut to fit max_allowed_packet: {}]",
                self.reason,
                notes.join("; ")
            ));
        }
        self
    }
}

/// The largest share `most` such that values of `lengths`, each cut to `most`, take at
/// most `room` bytes: a value shorter than its share stays whole and leaves the rest to
/// the longer ones.
fn equal_share(lengths: &[usize], room: usize) -> usize {
    let mut sorted = lengths.to_vec();
    sorted.sort_unstable();
    let mut left = room;
    for (i, len) in sorted.iter().enumerate() {
        let sharing = sorted.len() - i;
        if len * sharing > left {
            return left / sharing;
        }
        left -= len;
    }
    usize::MAX
}

fn cut_bytes(value: &mut Cow<'_, [u8]>, most: usize, what: &str) -> Option<String> {
    if value.len() <= most {
        return None;
    }
    let note = note(what, value, most);
    *value = Cow::Owned(value[..most].to_vec());
    Some(note)
}

fn cut_text(value: &mut Cow<'_, str>, most: usize, what: &str) -> Option<String> {
    if value.len() <= most {
        return None;
    }
    let cut = value.floor_char_boundary(most);
    let note = note(what, value.as_bytes(), cut);
    *value = Cow::Owned(value[..cut].to_string());
    Some(note)
}

fn note(what: &str, full: &[u8], kept: usize) -> String {
    format!(
        "{what} of {} bytes (sha256 {}), first {kept} kept",
        full.len(),
        hex::encode(Sha256::digest(full))
    )
}

/// The insert of `letters` letters; one already stored (the same fingerprint) is kept.
pub(super) fn insert(letters: usize) -> String {
    format!(
        "{} ON DUPLICATE KEY UPDATE fingerprint = fingerprint",
        statement::plain_insert(
            DEAD_LETTERS,
            &DEAD_LETTER_COLUMNS.map(String::from),
            letters
        )
    )
}

/// Stores `letters` for `target` in statements of at most `budget` bytes of values.
pub(super) async fn store(
    conn: &mut MySqlConnection,
    target: &str,
    letters: &[DeadLetter],
    budget: usize,
) -> Result<(), sqlx::Error> {
    let headers: Vec<Option<String>> = letters.iter().map(|l| headers_json(&l.context)).collect();
    let stored: Vec<Stored> = letters
        .iter()
        .zip(&headers)
        .map(|(letter, headers)| {
            Stored::new(target, letter, headers.as_deref()).fit(target, budget)
        })
        .collect();
    let sizes = stored
        .iter()
        .map(|s| s.size(target) - DEAD_LETTER_COLUMNS.len() * VALUE_OVERHEAD);
    // Every letter fits now: a statement of one always does.
    let runs = statement::chunks(sizes, DEAD_LETTER_COLUMNS.len(), budget)
        .unwrap_or_else(|_| (0..stored.len()).map(|i| i..i + 1).collect());
    for run in runs {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(insert(run.len())));
        for s in &stored[run] {
            query = query
                .bind(s.fingerprint.as_str())
                .bind(s.position)
                .bind(s.key.as_deref())
                .bind(s.raw.as_ref())
                .bind(s.reason.as_ref())
                .bind(s.attempts)
                .bind(target)
                .bind(s.source_key.as_deref())
                .bind(s.headers.as_deref());
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::SourceContext;

    fn letter(raw: usize, key: usize) -> DeadLetter {
        DeadLetter {
            origin: "in.ndjson:7".into(),
            key: Some("k".repeat(key)),
            raw: vec![b'x'; raw],
            reason: "the record is larger than the server's max_allowed_packet".into(),
            attempts: 1,
            context: Box::new(SourceContext::default()),
        }
    }

    #[test]
    fn shares_leave_short_values_whole() {
        assert_eq!(equal_share(&[10, 20], 100), usize::MAX);
        assert_eq!(equal_share(&[10, 1000, 0, 0], 110), 100);
        assert_eq!(equal_share(&[500, 1000], 600), 300);
    }

    #[test]
    fn a_letter_too_large_for_a_statement_is_cut_to_fit_and_says_so() {
        let big = letter(2_000_000, 3);
        let stored = Stored::new("t", &big, None).fit("t", 1_000_000);
        assert!(stored.size("t") <= 1_000_000, "{}", stored.size("t"));
        assert!(stored.raw.len() > 990_000, "{}", stored.raw.len());
        assert_eq!(stored.key.as_deref(), Some("kkk"));
        let sha = hex::encode(Sha256::digest(&big.raw));
        assert!(
            stored.reason.ends_with(&format!(
                "[stored cut to fit max_allowed_packet: record of 2000000 bytes (sha256 {sha}), first {} kept]",
                stored.raw.len()
            )),
            "{}",
            stored.reason
        );
        // The fingerprint is the whole letter's: a redelivery is still one letter.
        assert_eq!(stored.fingerprint, dead_letter_fingerprint("t", &big));
    }

    #[test]
    fn a_huge_key_is_cut_too_and_a_letter_that_fits_is_untouched() {
        let both = letter(600_000, 600_000);
        let stored = Stored::new("t", &both, None).fit("t", 500_000);
        assert!(stored.size("t") <= 500_000);
        assert!(
            stored.reason.contains("record of 600000 bytes"),
            "{}",
            stored.reason
        );
        assert!(
            stored.reason.contains("key of 600000 bytes"),
            "{}",
            stored.reason
        );
        let small = letter(100, 3);
        let stored = Stored::new("t", &small, None).fit("t", 500_000);
        assert_eq!(stored.raw.len(), 100);
        assert_eq!(stored.reason, small.reason);
    }

    #[test]
    fn text_is_cut_on_a_character_boundary() {
        let mut text = Cow::Borrowed("ééé");
        let note = cut_text(&mut text, 3, "key").unwrap();
        assert_eq!(text, "é");
        assert!(note.starts_with("key of 6 bytes"), "{note}");
    }
}
