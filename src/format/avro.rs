//! Avro bodies to JSON, exactly: decimals keep every digit, timestamps become RFC 3339 text,
//! bytes base64, enums their symbol, a union the value of its branch (no type wrapper).

use std::collections::HashMap;
use std::io::Write;

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::{Name, ResolvedSchema};
use apache_avro::types::Value as Avro;
use base64::Engine;
use chrono::{DateTime, NaiveDate, NaiveTime};

/// A writer's schema, parsed once and kept for the process's life (registry ids are
/// immutable): leaked, so the datum reader that borrows it can be kept beside it.
pub struct AvroSchema {
    schema: &'static Schema,
    reader: GenericDatumReader<'static>,
    names: HashMap<Name, &'static Schema>,
}

impl std::fmt::Debug for AvroSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroSchema")
            .field("schema", self.schema)
            .finish()
    }
}

impl AvroSchema {
    /// Parses `text` (an `.avsc` document), with the schemas it references by name.
    pub fn parse(text: &str, references: &[String]) -> Result<Self, String> {
        let (schema, schemata) = Schema::parse_str_with_list(text, references)
            .map_err(|e| format!("not an Avro schema: {e}"))?;
        let schema: &'static Schema = Box::leak(Box::new(schema));
        let schemata: &'static [Schema] = Box::leak(schemata.into_boxed_slice());
        // Resolved in order: what is referenced before what references it.
        let all: Vec<&'static Schema> = schemata.iter().chain(std::iter::once(schema)).collect();
        let resolved = ResolvedSchema::new_with_schemata(all.clone())
            .map_err(|e| format!("Avro schema: {e}"))?;
        let names = resolved.get_names().clone();
        let reader = GenericDatumReader::builder(schema)
            .resolved_writer_schemata(resolved)
            .build()
            .map_err(|e| format!("Avro schema: {e}"))?;
        Ok(AvroSchema {
            schema,
            reader,
            names,
        })
    }

    pub(crate) fn schema(&self) -> &'static Schema {
        self.schema
    }

    /// A named type's definition; any other schema as it is.
    pub(crate) fn named<'a>(&'a self, schema: &'a Schema) -> Result<&'a Schema, String> {
        self.resolve(schema)
    }

    /// The JSON text of one datum; the whole body must be the datum.
    pub fn to_json(&self, mut body: &[u8]) -> Result<String, String> {
        let value = self
            .reader
            .read_value(&mut body)
            .map_err(|e| format!("does not decode with its Avro schema: {e}"))?;
        if !body.is_empty() {
            return Err(format!(
                "does not decode with its Avro schema: {} bytes left after the datum",
                body.len()
            ));
        }
        let mut out = Vec::with_capacity(body.len() * 3);
        self.write(&value, self.schema, &mut out)?;
        Ok(String::from_utf8(out).expect("JSON written from UTF-8 text"))
    }

    fn resolve<'a>(&'a self, schema: &'a Schema) -> Result<&'a Schema, String> {
        match schema {
            Schema::Ref { name } => self
                .names
                .get(name)
                .copied()
                .ok_or_else(|| format!("Avro schema: unknown type {}", name.fullname(None))),
            other => Ok(other),
        }
    }

    /// Writes `value`'s JSON to `out` directly (no intermediate tree: this runs once per
    /// record).
    fn write(&self, value: &Avro, schema: &Schema, out: &mut Vec<u8>) -> Result<(), String> {
        let schema = self.resolve(schema)?;
        match value {
            Avro::Null => out.extend_from_slice(b"null"),
            Avro::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Avro::Int(i) => write_display(out, i),
            Avro::Long(i) => write_display(out, i),
            Avro::Float(x) => write_float(out, f64::from(*x), x),
            Avro::Double(x) => write_float(out, *x, x),
            Avro::Bytes(b) | Avro::Fixed(_, b) => write_string(out, &base64(b)),
            Avro::String(s) | Avro::Enum(_, s) => write_string(out, s),
            Avro::Union(index, inner) => {
                let Schema::Union(union) = schema else {
                    return Err("Avro: a union value without a union schema".into());
                };
                let branch = union
                    .variants()
                    .get(*index as usize)
                    .ok_or_else(|| format!("Avro: union branch {index} out of range"))?;
                self.write(inner, branch, out)?;
            }
            Avro::Array(items) => {
                let Schema::Array(array) = schema else {
                    return Err("Avro: an array value without an array schema".into());
                };
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.write(item, &array.items, out)?;
                }
                out.push(b']');
            }
            Avro::Map(entries) => {
                let Schema::Map(map) = schema else {
                    return Err("Avro: a map value without a map schema".into());
                };
                // Keys in order: the same record is the same text every time (a redelivery
                // must read as the duplicate it is).
                let mut keys: Vec<&String> = entries.keys().collect();
                keys.sort_unstable();
                out.push(b'{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_string(out, key);
                    out.push(b':');
                    self.write(&entries[key], &map.types, out)?;
                }
                out.push(b'}');
            }
            Avro::Record(fields) => {
                let Schema::Record(record) = schema else {
                    return Err("Avro: a record value without a record schema".into());
                };
                out.push(b'{');
                for (i, ((name, v), field)) in fields.iter().zip(&record.fields).enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_string(out, name);
                    out.push(b':');
                    self.write(v, &field.schema, out)?;
                }
                out.push(b'}');
            }
            Avro::Decimal(decimal) => {
                let Schema::Decimal(d) = schema else {
                    return Err("Avro: a decimal value without a decimal schema".into());
                };
                let bytes =
                    <Vec<u8>>::try_from(decimal).map_err(|e| format!("Avro decimal: {e}"))?;
                let unscaled = num_bigint::BigInt::from_signed_bytes_be(&bytes);
                out.extend_from_slice(scaled(&unscaled.to_string(), d.scale).as_bytes());
            }
            Avro::BigDecimal(big) => write_display(out, big),
            Avro::Uuid(u) => write_string(out, &u.to_string()),
            Avro::Date(days) => {
                let date = NaiveDate::from_ymd_opt(1970, 1, 1)
                    .and_then(|epoch| {
                        epoch.checked_add_signed(chrono::Duration::days(i64::from(*days)))
                    })
                    .ok_or_else(|| {
                        format!("Avro date {days} days from 1970-01-01 is out of range")
                    })?;
                write_string(out, &date.format("%Y-%m-%d").to_string());
            }
            Avro::TimeMillis(ms) => write_string(out, &time(i64::from(*ms) * 1_000_000, 3)?),
            Avro::TimeMicros(us) => write_string(out, &time(us.saturating_mul(1_000), 6)?),
            Avro::TimestampMillis(ms) => {
                write_string(out, &timestamp(i128::from(*ms) * 1_000_000, 3, true)?)
            }
            Avro::TimestampMicros(us) => {
                write_string(out, &timestamp(i128::from(*us) * 1_000, 6, true)?)
            }
            Avro::TimestampNanos(ns) => write_string(out, &timestamp(i128::from(*ns), 9, true)?),
            Avro::LocalTimestampMillis(ms) => {
                write_string(out, &timestamp(i128::from(*ms) * 1_000_000, 3, false)?)
            }
            Avro::LocalTimestampMicros(us) => {
                write_string(out, &timestamp(i128::from(*us) * 1_000, 6, false)?)
            }
            Avro::LocalTimestampNanos(ns) => {
                write_string(out, &timestamp(i128::from(*ns), 9, false)?)
            }
            Avro::Duration(d) => {
                let _ = write!(
                    out,
                    r#"{{"months":{},"days":{},"milliseconds":{}}}"#,
                    u32::from(d.months()),
                    u32::from(d.days()),
                    u32::from(d.millis())
                );
            }
        }
        Ok(())
    }
}

fn write_display(out: &mut Vec<u8>, value: &impl std::fmt::Display) {
    let _ = write!(out, "{value}");
}

/// A JSON string, escaped as serde_json escapes.
fn write_string(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("a string serializes");
}

/// A float as its shortest round-trip text (so a `float` 1.1 reads 1.1, not
/// 1.100000023841858); the three values JSON has no number for as strings.
fn write_float(out: &mut Vec<u8>, x: f64, shortest: &impl std::fmt::Display) {
    if x.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if x.is_infinite() {
        out.extend_from_slice(if x > 0.0 {
            b"\"Infinity\""
        } else {
            b"\"-Infinity\""
        });
    } else {
        write_display(out, shortest);
    }
}

pub(crate) fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `unscaled` × 10^-scale as decimal text: exactly `scale` digits after the point.
fn scaled(unscaled: &str, scale: usize) -> String {
    let (sign, digits) = match unscaled.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", unscaled),
    };
    if scale == 0 {
        return unscaled.to_string();
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    format!("{sign}{whole}.{fraction}")
}

fn time(nanos: i64, digits: usize) -> Result<String, String> {
    use std::fmt::Write as _;
    let secs = nanos.div_euclid(1_000_000_000);
    let sub = nanos.rem_euclid(1_000_000_000);
    let t = u32::try_from(secs)
        .ok()
        .and_then(|s| NaiveTime::from_num_seconds_from_midnight_opt(s, sub as u32))
        .ok_or_else(|| format!("Avro time of day {nanos} ns is out of range"))?;
    let mut out = t.format("%H:%M:%S").to_string();
    let _ = write!(
        out,
        ".{:0width$}",
        sub / 10_i64.pow(9 - digits as u32),
        width = digits
    );
    Ok(out)
}

/// RFC 3339 text with exactly `digits` fraction digits; `utc`: with a `Z` (a local
/// timestamp has no zone, so none is written).
fn timestamp(nanos: i128, digits: usize, utc: bool) -> Result<String, String> {
    use std::fmt::Write as _;
    let secs = i64::try_from(nanos.div_euclid(1_000_000_000))
        .map_err(|_| "Avro timestamp out of range".to_string())?;
    let sub = nanos.rem_euclid(1_000_000_000) as u32;
    let t = DateTime::from_timestamp(secs, sub)
        .filter(|t| (0..=9999).contains(&chrono::Datelike::year(t)))
        .ok_or_else(|| format!("Avro timestamp {nanos} ns from the epoch is out of range"))?;
    let mut out = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let _ = write!(
        out,
        ".{:0width$}",
        sub / 10_u32.pow(9 - digits as u32),
        width = digits
    );
    if utc {
        out.push('Z');
    }
    Ok(out)
}

#[cfg(test)]
#[path = "avro_tests.rs"]
mod tests;
