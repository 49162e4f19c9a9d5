//! JSON to an Avro datum, by the mapping `avro` decodes with read backwards, so that
//! `sluice produce` can rehearse an Avro topic from NDJSON: decimals from exact JSON
//! numbers, timestamps from RFC 3339 text, bytes from base64, enums from their symbol, a
//! union's branch chosen by the value.

use apache_avro::Schema;
use apache_avro::schema::UnionSchema;
use apache_avro::types::Value as Avro;
use base64::Engine;
use chrono::{NaiveDate, NaiveDateTime, NaiveTime, Timelike};
use serde_json::Value as Json;

use super::avro::AvroSchema;

impl AvroSchema {
    /// The Avro datum of `json` under this schema.
    pub fn encode(&self, json: &Json) -> Result<Vec<u8>, String> {
        let value = self.value(json, self.schema(), "")?;
        apache_avro::writer::datum::GenericDatumWriter::builder(self.schema())
            .build()
            .and_then(|w| w.write_value_to_vec(value))
            .map_err(|e| e.to_string())
    }

    fn value(&self, json: &Json, schema: &Schema, at: &str) -> Result<Avro, String> {
        let schema = self.named(schema)?;
        let wrong = || {
            format!(
                "{}: {json} is not a {}",
                if at.is_empty() { "/" } else { at },
                kind(schema)
            )
        };
        Ok(match schema {
            Schema::Null => json.is_null().then_some(Avro::Null).ok_or_else(wrong)?,
            Schema::Boolean => Avro::Boolean(json.as_bool().ok_or_else(wrong)?),
            Schema::Int => Avro::Int(
                json.as_i64()
                    .and_then(|i| i32::try_from(i).ok())
                    .ok_or_else(wrong)?,
            ),
            Schema::Long => Avro::Long(json.as_i64().ok_or_else(wrong)?),
            Schema::Float => Avro::Float(float(json).ok_or_else(wrong)? as f32),
            Schema::Double => Avro::Double(float(json).ok_or_else(wrong)?),
            Schema::String => Avro::String(json.as_str().ok_or_else(wrong)?.to_string()),
            Schema::Bytes => Avro::Bytes(bytes(json).ok_or_else(wrong)?),
            Schema::Fixed(f) => Avro::Fixed(
                f.size,
                bytes(json)
                    .filter(|b| b.len() == f.size)
                    .ok_or_else(wrong)?,
            ),
            Schema::Uuid(_) => Avro::Uuid(
                json.as_str()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(wrong)?,
            ),
            Schema::Enum(e) => {
                let symbol = json.as_str().ok_or_else(wrong)?;
                let index = e
                    .symbols
                    .iter()
                    .position(|s| s == symbol)
                    .ok_or_else(wrong)?;
                Avro::Enum(index as u32, symbol.to_string())
            }
            Schema::Union(union) => self.branch(json, union, at)?,
            Schema::Array(a) => Avro::Array(
                json.as_array()
                    .ok_or_else(wrong)?
                    .iter()
                    .enumerate()
                    .map(|(i, item)| self.value(item, &a.items, &format!("{at}/{i}")))
                    .collect::<Result<_, _>>()?,
            ),
            Schema::Map(m) => Avro::Map(
                json.as_object()
                    .ok_or_else(wrong)?
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), self.value(v, &m.types, &format!("{at}/{k}"))?)))
                    .collect::<Result<_, String>>()?,
            ),
            Schema::Record(r) => {
                let object = json.as_object().ok_or_else(wrong)?;
                let mut fields = Vec::with_capacity(r.fields.len());
                for field in &r.fields {
                    let path = format!("{at}/{}", field.name);
                    let value = match (object.get(&field.name), &field.default) {
                        (Some(v), _) => self.value(v, &field.schema, &path)?,
                        (None, Some(default)) => {
                            self.value(default, first_branch(&field.schema), &path)?
                        }
                        (None, None) => {
                            return Err(format!("{path}: missing, and the field has no default"));
                        }
                    };
                    fields.push((field.name.clone(), value));
                }
                Avro::Record(fields)
            }
            Schema::Decimal(d) => {
                let text = match json {
                    Json::Number(n) => n.to_string(),
                    Json::String(s) => s.clone(),
                    _ => return Err(wrong()),
                };
                let unscaled = unscaled(&text, d.scale).ok_or_else(wrong)?;
                let mut bytes = unscaled.to_signed_bytes_be();
                if let apache_avro::schema::InnerDecimalSchema::Fixed(f) = &d.inner {
                    if bytes.len() > f.size {
                        return Err(wrong());
                    }
                    let fill = if unscaled.sign() == num_bigint::Sign::Minus {
                        0xff
                    } else {
                        0
                    };
                    let mut padded = vec![fill; f.size - bytes.len()];
                    padded.append(&mut bytes);
                    bytes = padded;
                }
                Avro::Decimal(apache_avro::Decimal::from(bytes))
            }
            Schema::BigDecimal => Avro::BigDecimal(
                json.to_string()
                    .trim_matches('"')
                    .parse()
                    .map_err(|_| wrong())?,
            ),
            Schema::Date => {
                let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).expect("a date");
                let day = json
                    .as_str()
                    .and_then(|s| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok())
                    .ok_or_else(wrong)?;
                Avro::Date(i32::try_from((day - epoch).num_days()).map_err(|_| wrong())?)
            }
            Schema::TimeMillis => {
                Avro::TimeMillis((time(json).ok_or_else(wrong)? / 1_000_000) as i32)
            }
            Schema::TimeMicros => Avro::TimeMicros(time(json).ok_or_else(wrong)? / 1_000),
            Schema::TimestampMillis => Avro::TimestampMillis(
                timestamp(json, true)
                    .ok_or_else(wrong)?
                    .and_utc()
                    .timestamp_millis(),
            ),
            Schema::TimestampMicros => Avro::TimestampMicros(
                timestamp(json, true)
                    .ok_or_else(wrong)?
                    .and_utc()
                    .timestamp_micros(),
            ),
            Schema::TimestampNanos => Avro::TimestampNanos(
                timestamp(json, true)
                    .ok_or_else(wrong)?
                    .and_utc()
                    .timestamp_nanos_opt()
                    .ok_or_else(wrong)?,
            ),
            Schema::LocalTimestampMillis => Avro::LocalTimestampMillis(
                timestamp(json, false)
                    .ok_or_else(wrong)?
                    .and_utc()
                    .timestamp_millis(),
            ),
            Schema::LocalTimestampMicros => Avro::LocalTimestampMicros(
                timestamp(json, false)
                    .ok_or_else(wrong)?
                    .and_utc()
                    .timestamp_micros(),
            ),
            Schema::LocalTimestampNanos => Avro::LocalTimestampNanos(
                timestamp(json, false)
                    .ok_or_else(wrong)?
                    .and_utc()
                    .timestamp_nanos_opt()
                    .ok_or_else(wrong)?,
            ),
            Schema::Duration(_) => {
                let part = |name: &str| {
                    json.get(name)
                        .and_then(Json::as_u64)
                        .and_then(|v| u32::try_from(v).ok())
                };
                let (Some(m), Some(d), Some(ms)) =
                    (part("months"), part("days"), part("milliseconds"))
                else {
                    return Err(wrong());
                };
                Avro::Duration(apache_avro::Duration::new(
                    apache_avro::Months::new(m),
                    apache_avro::Days::new(d),
                    apache_avro::Millis::new(ms),
                ))
            }
            Schema::Ref { .. } => unreachable!("resolved by named()"),
        })
    }

    /// The first branch of the union `json` fits (null first for a null).
    fn branch(&self, json: &Json, union: &UnionSchema, at: &str) -> Result<Avro, String> {
        let mut first_error = None;
        for (i, branch) in union.variants().iter().enumerate() {
            if json.is_null() != matches!(branch, Schema::Null) {
                continue;
            }
            match self.value(json, branch, at) {
                Ok(v) => return Ok(Avro::Union(i as u32, Box::new(v))),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.unwrap_or_else(|| format!("{at}: {json} fits no branch of the union")))
    }
}

/// A field's default is written in the union's first branch.
fn first_branch(schema: &Schema) -> &Schema {
    match schema {
        Schema::Union(u) => u.variants().first().unwrap_or(schema),
        other => other,
    }
}

fn kind(schema: &Schema) -> String {
    format!("{:?}", apache_avro::schema::SchemaKind::from(schema)).to_lowercase()
}

fn float(json: &Json) -> Option<f64> {
    match json {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

fn bytes(json: &Json) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(json.as_str()?)
        .ok()
}

/// Exact decimal text as an integer of `scale` places; None if it has more places.
fn unscaled(text: &str, scale: usize) -> Option<num_bigint::BigInt> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > scale || text.contains(['e', 'E']) {
        return None;
    }
    format!("{whole}{fraction:0<scale$}").parse().ok()
}

/// Nanoseconds since midnight of "HH:MM:SS[.fraction]".
fn time(json: &Json) -> Option<i64> {
    let t = NaiveTime::parse_from_str(json.as_str()?, "%H:%M:%S%.f").ok()?;
    Some(i64::from(t.num_seconds_from_midnight()) * 1_000_000_000 + i64::from(t.nanosecond()))
}

/// RFC 3339 text (`utc`: with a zone, taken to UTC; else a local timestamp without one).
fn timestamp(json: &Json, utc: bool) -> Option<NaiveDateTime> {
    let text = json.as_str()?;
    if utc {
        chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.naive_utc())
    } else {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").ok()
    }
}
