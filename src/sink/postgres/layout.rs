//! The two table shapes the PostgreSQL sink writes, each as one statement per batch
//! (one round trip), with `ON CONFLICT … DO NOTHING` so a redelivered key is a duplicate
//! rather than a second row.

use serde_json::{Map, Value};
use sqlx::postgres::{PgArguments, Postgres};
use sqlx::query::Query;
use sqlx::{Arguments, AssertSqlSafe};
use std::sync::Arc;

use super::coerce::{Coerce, ColumnKind, convert};
use crate::record::Row;
use crate::sink::identifier::quote;

/// Counts the rows of a batch whose key the table does not hold.
pub type Absent = sqlx::query::QueryScalar<'static, Postgres, i64, PgArguments>;

/// One column of an existing table and where its value comes from.
#[derive(Debug, Clone)]
pub struct MappedColumn {
    pub name: String,
    /// JSON pointer into the payload; `""` is the whole payload.
    pub pointer: String,
    pub kind: ColumnKind,
}

/// Rows of a batch that can never go in, and why (one reason: the first met).
#[derive(Debug, Clone, PartialEq)]
pub struct RefusedRows {
    pub rows: Vec<usize>,
    pub reason: String,
}

impl RefusedRows {
    /// What the sink answers for them: rows to dead-letter, or, with no row to blame
    /// (the batch could not be encoded), a fatal error.
    pub fn outcome(self) -> crate::sink::WriteOutcome {
        if self.rows.is_empty() {
            crate::sink::WriteOutcome::Fatal(self.reason)
        } else {
            crate::sink::WriteOutcome::Rejected {
                rows: Some(self.rows),
                reason: self.reason,
            }
        }
    }

    /// Row `row` cannot go in for `reason`: it joins the rows refused for the first
    /// reason met (the others wait for a later attempt to be named).
    pub fn note(refused: &mut Option<RefusedRows>, row: usize, reason: String) {
        match refused {
            Some(r) if r.reason == reason => r.rows.push(row),
            Some(_) => {}
            None => {
                *refused = Some(RefusedRows {
                    rows: vec![row],
                    reason,
                })
            }
        }
    }
}

/// Where each row goes and the statement that puts it there.
#[derive(Debug, Clone)]
pub enum Layout {
    /// The table sluice creates: `key, payload jsonb, source, ingested_at`. A batch is
    /// first COPYed straight in (the fast path, ~2.5x an INSERT); a batch holding a key
    /// that is already there (a redelivery) fails as a whole with a unique violation and
    /// is inserted instead, as three parallel arrays unnested server-side.
    Created {
        copy: Arc<str>,
        insert: Arc<str>,
        absent: Arc<str>,
    },
    /// An existing table: the key column gets the record key, each mapped column the
    /// value at its JSON pointer, converted by the JSON × column table of `coerce`. Rows
    /// travel as one JSON array that PostgreSQL turns into the table's row type; numbers
    /// keep their exact text all the way (jsonb numbers are `numeric`).
    Mapped {
        insert: Arc<str>,
        absent: Arc<str>,
        key_column: String,
        columns: Vec<MappedColumn>,
        coerce: Coerce,
    },
}

impl Layout {
    pub fn created(table: &str) -> Self {
        let table = quote(table);
        Layout::Created {
            copy: format!("COPY {table} (key, payload, source) FROM STDIN").into(),
            insert: format!(
                "INSERT INTO {table} (key, payload, source) \
                 SELECT * FROM UNNEST($1::text[], $2::text[]::jsonb[], $3::text[]) \
                 ON CONFLICT (key) DO NOTHING"
            )
            .into(),
            absent: format!(
                "SELECT count(*) FROM UNNEST($1::text[]) AS b(key) \
                 WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE t.key = b.key)"
            )
            .into(),
        }
    }

    /// `table`: the schema-qualified, quoted name (`"public"."money"`): unqualified, a
    /// table named after a type (money, interval) would name the type in `NULL::table`.
    /// Column names are validated identifiers.
    pub fn mapped(
        table: &str,
        key_column: &str,
        columns: Vec<MappedColumn>,
        coerce: Coerce,
    ) -> Self {
        let names: Vec<String> = std::iter::once(key_column)
            .chain(columns.iter().map(|c| c.name.as_str()))
            .map(quote)
            .collect();
        let selected: Vec<String> = names.iter().map(|n| format!("r.{n}")).collect();
        Layout::Mapped {
            insert: format!(
                "INSERT INTO {table} ({}) \
                 SELECT {} FROM jsonb_populate_recordset(NULL::{table}, $1::text::jsonb) AS r \
                 ON CONFLICT ({}) DO NOTHING",
                names.join(", "),
                selected.join(", "),
                quote(key_column)
            )
            .into(),
            absent: format!(
                "SELECT count(*) FROM jsonb_populate_recordset(NULL::{table}, $1::text::jsonb) AS b \
                 WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE t.{key} = b.{key})",
                key = quote(key_column)
            )
            .into(),
            key_column: key_column.to_string(),
            columns,
            coerce,
        }
    }

    /// The statement a batch runs (`check` prepares it to prove the mapping works).
    pub fn statement(&self) -> &str {
        match self {
            Layout::Created { insert, .. } | Layout::Mapped { insert, .. } => insert,
        }
    }

    /// How many of `rows` have no row of their key in the table: after a write that
    /// inserted fewer rows than it sent, those the table's own code skipped (a trigger
    /// returning NULL, a rule) rather than duplicates.
    pub fn absent(&self, rows: &[Row]) -> Result<Absent, sqlx::Error> {
        let keys: Vec<String> = rows.iter().map(|r| r.key.clone()).collect();
        let mut args = PgArguments::default();
        let sql = match self {
            Layout::Created { absent, .. } => {
                args.add(keys).map_err(sqlx::Error::Encode)?;
                absent.clone()
            }
            Layout::Mapped {
                absent, key_column, ..
            } => {
                let objects: Vec<Value> = keys
                    .into_iter()
                    .map(|k| {
                        Value::Object(Map::from_iter([(key_column.clone(), Value::String(k))]))
                    })
                    .collect();
                args.add(Value::Array(objects).to_string())
                    .map_err(sqlx::Error::Encode)?;
                absent.clone()
            }
        };
        Ok(sqlx::query_scalar_with(AssertSqlSafe(sql), args))
    }

    /// The COPY statement of the fast path, if this layout has one.
    pub fn copy(&self) -> Option<&str> {
        match self {
            Layout::Created { copy, .. } => Some(copy),
            Layout::Mapped { .. } => None,
        }
    }

    /// Appends a row in COPY's text format: key, payload, source.
    pub fn copy_line(row: &Row, data: &mut Vec<u8>) {
        copy_field(&row.key, data);
        data.push(b'\t');
        copy_field(&row.payload, data);
        data.push(b'\t');
        copy_field(&row.origin, data);
        data.push(b'\n');
    }

    /// The batch's insert statement with its arguments bound, or the rows that cannot go in.
    pub fn insert(
        &self,
        rows: &[Row],
    ) -> Result<Query<'static, Postgres, PgArguments>, RefusedRows> {
        let encoding = |e: sqlx::error::BoxDynError| RefusedRows {
            rows: Vec::new(),
            reason: format!("cannot encode the batch: {e}"),
        };
        let mut args = PgArguments::default();
        let sql = match self {
            Layout::Created { insert, .. } => {
                let keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
                let payloads: Vec<&str> = rows.iter().map(|r| r.payload.as_str()).collect();
                let origins: Vec<&str> = rows.iter().map(|r| r.origin.as_str()).collect();
                args.add(keys).map_err(encoding)?;
                args.add(payloads).map_err(encoding)?;
                args.add(origins).map_err(encoding)?;
                insert.clone()
            }
            Layout::Mapped {
                insert,
                key_column,
                columns,
                coerce,
                ..
            } => {
                let mut objects = Vec::with_capacity(rows.len());
                let mut refused: Option<RefusedRows> = None;
                for (i, row) in rows.iter().enumerate() {
                    match mapped_object(row, key_column, columns, *coerce) {
                        Ok(object) => objects.push(object),
                        Err(reason) => RefusedRows::note(&mut refused, i, reason),
                    }
                }
                if let Some(refused) = refused {
                    return Err(refused);
                }
                args.add(Value::Array(objects).to_string())
                    .map_err(encoding)?;
                insert.clone()
            }
        };
        Ok(sqlx::query_with(AssertSqlSafe(sql), args))
    }
}

/// Escapes a field for COPY's text format (backslash, tab, newline, carriage return).
fn copy_field(field: &str, out: &mut Vec<u8>) {
    let bytes = field.as_bytes();
    let mut plain = 0;
    while let Some(at) = first_special(&bytes[plain..]) {
        let i = plain + at;
        out.extend_from_slice(&bytes[plain..i]);
        out.extend_from_slice(match bytes[i] {
            b'\\' => b"\\\\",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            _ => b"\\r",
        });
        plain = i + 1;
    }
    out.extend_from_slice(&bytes[plain..]);
}

fn is_special(b: &u8) -> bool {
    matches!(b, b'\\' | b'\t' | b'\n' | b'\r')
}

/// The first byte COPY must escape, looking at eight bytes at a time: payloads rarely
/// hold one, and this scan is most of the cost of formatting a batch.
fn first_special(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Non-zero exactly when some byte of `word` equals `b`.
    let holds = |word: u64, b: u8| {
        let x = word ^ (ONES * u64::from(b));
        x.wrapping_sub(ONES) & !x & HIGH
    };
    let mut chunks = bytes.chunks_exact(8);
    let mut base = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        if holds(word, b'\\') | holds(word, b'\t') | holds(word, b'\n') | holds(word, b'\r') != 0 {
            return chunk.iter().position(is_special).map(|i| base + i);
        }
        base += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(is_special)
        .map(|i| base + i)
}

/// `{key_column: key, column: value at its pointer, …}`; a missing or null value is left
/// out (NULL in the row). The key goes in as text, for the key column's input function.
pub(super) fn mapped_object(
    row: &Row,
    key_column: &str,
    columns: &[MappedColumn],
    coerce: Coerce,
) -> Result<Value, String> {
    // The row travels as jsonb, which cannot hold it: the whole batch would fail.
    if row.key.contains('\0') {
        return Err(format!(
            "the key for column {key_column} holds \\u0000 (0x00), which PostgreSQL's text cannot"
        ));
    }
    let payload: Value = serde_json::from_str(&row.payload).unwrap_or(Value::Null);
    let mut object = Map::with_capacity(columns.len() + 1);
    object.insert(key_column.to_string(), Value::String(row.key.clone()));
    for column in columns {
        if let Some(value) = payload.pointer(&column.pointer).filter(|v| !v.is_null()) {
            let value = convert(value, &column.kind, coerce)
                .map_err(|e| format!("column {} (from {:?}) {e}", column.name, column.pointer))?;
            object.insert(column.name.clone(), value);
        }
    }
    Ok(Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, pointer: &str, kind: ColumnKind) -> MappedColumn {
        MappedColumn {
            name: name.into(),
            pointer: pointer.into(),
            kind,
        }
    }

    #[test]
    fn statements_quote_every_name() {
        let Layout::Created { insert, copy, .. } = Layout::created("ingest.records") else {
            unreachable!()
        };
        assert!(insert.starts_with("INSERT INTO \"ingest\".\"records\" (key, payload, source)"));
        assert_eq!(
            &*copy,
            "COPY \"ingest\".\"records\" (key, payload, source) FROM STDIN"
        );
        let columns = vec![column(
            "amount",
            "/amount",
            ColumnKind::Numeric { digits: None },
        )];
        let mapped = Layout::mapped("\"public\".\"money\"", "order_id", columns, Coerce::Strict);
        assert_eq!(
            mapped.statement(),
            "INSERT INTO \"public\".\"money\" (\"order_id\", \"amount\") SELECT r.\"order_id\", r.\"amount\" \
             FROM jsonb_populate_recordset(NULL::\"public\".\"money\", $1::text::jsonb) AS r \
             ON CONFLICT (\"order_id\") DO NOTHING"
        );
    }

    #[test]
    fn copy_data_escapes_what_the_text_format_needs() {
        let rows = [Row {
            key: "a\tb".into(),
            payload: "{\"s\":\"x\\\"y\\\\z\"}".into(),
            origin: "t/0/1\r\n".into(),
            ..Default::default()
        }];
        let mut data = Vec::new();
        Layout::copy_line(&rows[0], &mut data);
        assert_eq!(
            String::from_utf8(data).unwrap(),
            "a\\tb\t{\"s\":\"x\\\\\"y\\\\\\\\z\"}\tt/0/1\\r\\n\n"
        );
    }

    #[test]
    fn the_word_scan_finds_what_a_byte_scan_finds() {
        let alphabet = ['a', '\\', '\t', '\n', '\r', 'é', '"', '\u{7f}', '\u{80}'];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in 0..40 {
            for _ in 0..50 {
                let text: String = (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        // Mostly plain text, now and then a special character.
                        if seed.is_multiple_of(5) {
                            alphabet[(seed / 5 % alphabet.len() as u64) as usize]
                        } else {
                            'x'
                        }
                    })
                    .collect();
                let expected = text.bytes().position(|b| is_special(&b));
                assert_eq!(first_special(text.as_bytes()), expected, "{text:?}");
            }
        }
    }

    #[test]
    fn mapped_rows_take_values_at_their_pointers() {
        let row = Row {
            key: "7".into(),
            payload:
                r#"{"id":7,"o":{"amount":12.5},"note":null,"big":123456789012345678901234567890}"#
                    .into(),
            origin: "t/0/1".into(),
            ..Default::default()
        };
        let columns = vec![
            column("amount", "/o/amount", ColumnKind::Numeric { digits: None }),
            column("note", "/note", ColumnKind::Text(Default::default())),
            column("missing", "/nope", ColumnKind::Text(Default::default())),
            column("doc", "", ColumnKind::Json),
        ];
        let object = mapped_object(&row, "order_id", &columns, Coerce::Strict).unwrap();
        assert_eq!(object["order_id"], "7");
        assert_eq!(object["amount"], 12.5);
        assert!(object.get("note").is_none());
        assert!(object.get("missing").is_none());
        assert_eq!(object["doc"]["id"], 7);
        assert_eq!(
            object["doc"]["big"].to_string(),
            "123456789012345678901234567890"
        );
        let nul = Row {
            key: "a\0b".into(),
            ..row
        };
        let e = mapped_object(&nul, "order_id", &columns, Coerce::Strict).unwrap_err();
        assert!(e.contains("column order_id holds \\u0000 (0x00)"), "{e}");
    }

    #[test]
    fn a_batch_names_the_rows_that_cannot_go_in() {
        let columns = vec![column("n", "/n", ColumnKind::Integer { min: 0, max: 9 })];
        let layout = Layout::mapped("\"t\"", "k", columns, Coerce::Strict);
        let row = |payload: &str| Row {
            key: "k".into(),
            payload: payload.into(),
            origin: "o".into(),
            ..Default::default()
        };
        let rows = [
            row(r#"{"n":1.5}"#),
            row(r#"{"n":1}"#),
            row(r#"{"n":2.5}"#),
            row(r#"{"n":"x"}"#),
        ];
        let Err(refused) = layout.insert(&rows) else {
            panic!("1.5 is no integer")
        };
        assert_eq!(refused.rows, vec![0]);
        assert!(refused.reason.contains("column n"), "{}", refused.reason);
        assert!(layout.insert(&rows[1..2]).is_ok());
    }
}
