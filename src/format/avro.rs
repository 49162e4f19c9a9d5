//! Avro bodies to JSON, exactly: decimals keep every digit, timestamps become RFC 3339 text,
//! bytes base64, enums their symbol, a union the value of its branch (no type wrapper).

use std::collections::HashMap;
use std::fmt::Write;

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::schema::{Name, ResolvedSchema};
use apache_avro::types::Value as Avro;
use base64::Engine;
use chrono::{DateTime, NaiveDate, NaiveTime};
use serde_json::Value as Json;

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
        let json = self.json(&value, self.schema)?;
        Ok(json.to_string())
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

    fn json(&self, value: &Avro, schema: &Schema) -> Result<Json, String> {
        let schema = self.resolve(schema)?;
        Ok(match value {
            Avro::Null => Json::Null,
            Avro::Boolean(b) => Json::Bool(*b),
            Avro::Int(i) => Json::from(*i),
            Avro::Long(i) => Json::from(*i),
            Avro::Float(x) => float(f64::from(*x), x.to_string()),
            Avro::Double(x) => float(*x, x.to_string()),
            Avro::Bytes(b) | Avro::Fixed(_, b) => Json::String(base64(b)),
            Avro::String(s) => Json::String(s.clone()),
            Avro::Enum(_, symbol) => Json::String(symbol.clone()),
            Avro::Union(index, inner) => {
                let Schema::Union(union) = schema else {
                    return Err("Avro: a union value without a union schema".into());
                };
                let branch = union
                    .variants()
                    .get(*index as usize)
                    .ok_or_else(|| format!("Avro: union branch {index} out of range"))?;
                self.json(inner, branch)?
            }
            Avro::Array(items) => {
                let Schema::Array(array) = schema else {
                    return Err("Avro: an array value without an array schema".into());
                };
                Json::Array(
                    items
                        .iter()
                        .map(|v| self.json(v, &array.items))
                        .collect::<Result<_, _>>()?,
                )
            }
            Avro::Map(entries) => {
                let Schema::Map(map) = schema else {
                    return Err("Avro: a map value without a map schema".into());
                };
                let mut keys: Vec<_> = entries.keys().collect();
                keys.sort();
                let mut object = serde_json::Map::with_capacity(keys.len());
                for key in keys {
                    object.insert(key.clone(), self.json(&entries[key], &map.types)?);
                }
                Json::Object(object)
            }
            Avro::Record(fields) => {
                let Schema::Record(record) = schema else {
                    return Err("Avro: a record value without a record schema".into());
                };
                let mut object = serde_json::Map::with_capacity(fields.len());
                for ((name, v), field) in fields.iter().zip(&record.fields) {
                    object.insert(name.clone(), self.json(v, &field.schema)?);
                }
                Json::Object(object)
            }
            Avro::Decimal(decimal) => {
                let Schema::Decimal(d) = schema else {
                    return Err("Avro: a decimal value without a decimal schema".into());
                };
                let bytes =
                    <Vec<u8>>::try_from(decimal).map_err(|e| format!("Avro decimal: {e}"))?;
                let unscaled = num_bigint::BigInt::from_signed_bytes_be(&bytes);
                number(&scaled(&unscaled.to_string(), d.scale))?
            }
            Avro::BigDecimal(big) => number(&big.to_string())?,
            Avro::Uuid(u) => Json::String(u.to_string()),
            Avro::Date(days) => {
                let date = NaiveDate::from_ymd_opt(1970, 1, 1)
                    .and_then(|epoch| {
                        epoch.checked_add_signed(chrono::Duration::days(i64::from(*days)))
                    })
                    .ok_or_else(|| {
                        format!("Avro date {days} days from 1970-01-01 is out of range")
                    })?;
                Json::String(date.format("%Y-%m-%d").to_string())
            }
            Avro::TimeMillis(ms) => time(i64::from(*ms) * 1_000_000, 3)?,
            Avro::TimeMicros(us) => time(us.saturating_mul(1_000), 6)?,
            Avro::TimestampMillis(ms) => timestamp(i128::from(*ms) * 1_000_000, 3, true)?,
            Avro::TimestampMicros(us) => timestamp(i128::from(*us) * 1_000, 6, true)?,
            Avro::TimestampNanos(ns) => timestamp(i128::from(*ns), 9, true)?,
            Avro::LocalTimestampMillis(ms) => timestamp(i128::from(*ms) * 1_000_000, 3, false)?,
            Avro::LocalTimestampMicros(us) => timestamp(i128::from(*us) * 1_000, 6, false)?,
            Avro::LocalTimestampNanos(ns) => timestamp(i128::from(*ns), 9, false)?,
            Avro::Duration(d) => serde_json::json!({
                "months": u32::from(d.months()),
                "days": u32::from(d.days()),
                "milliseconds": u32::from(d.millis()),
            }),
        })
    }
}

pub(crate) fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A float as its shortest round-trip text (so a `float` 1.1 reads 1.1, not
/// 1.100000023841858); the three values JSON has no number for as strings.
fn float(x: f64, text: String) -> Json {
    if x.is_nan() {
        Json::String("NaN".into())
    } else if x.is_infinite() {
        Json::String(if x > 0.0 { "Infinity" } else { "-Infinity" }.into())
    } else {
        number(&text).unwrap_or(Json::Null)
    }
}

/// A JSON number from exact decimal text (serde_json keeps every digit).
fn number(text: &str) -> Result<Json, String> {
    serde_json::from_str::<serde_json::Number>(text)
        .map(Json::Number)
        .map_err(|e| format!("not a number {text:?}: {e}"))
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

fn time(nanos: i64, digits: usize) -> Result<Json, String> {
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
    Ok(Json::String(out))
}

/// RFC 3339 text with exactly `digits` fraction digits; `utc`: with a `Z` (a local
/// timestamp has no zone, so none is written).
fn timestamp(nanos: i128, digits: usize, utc: bool) -> Result<Json, String> {
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
    Ok(Json::String(out))
}

#[cfg(test)]
#[path = "avro_tests.rs"]
mod tests;
