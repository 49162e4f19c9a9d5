//! Whether a typed column holds a value exactly, for the SQL sinks' mapped tables. Both
//! servers change some values without an error, even in strict mode: PostgreSQL and
//! MySQL round a decimal to the column's scale, cut a `varchar(n)`'s excess trailing
//! spaces, round (PostgreSQL) or drop (MySQL) fractional seconds beyond the column's
//! precision, and MySQL stores a float too small for its type as 0; times: see `time`.
//! Each check here turns such a value into a reason, so the record is dead-lettered
//! instead.

/// A number's exact value: significant `digits` (no leading or trailing zeros) × 10^
/// `exponent`; zero has no digits.
#[derive(Debug, Clone, PartialEq)]
pub struct Digits {
    pub negative: bool,
    pub digits: String,
    pub exponent: i64,
}

/// Farther than any column's range reaches; keeps the arithmetic on exponents in `i64`.
const EXPONENT_LIMIT: i64 = 1 << 40;

impl Digits {
    /// Reads a JSON number's text, or a number as MySQL reads a string (a `+` sign, `.5`
    /// and `5.` too). `None`: not a number.
    pub fn parse(text: &str) -> Option<Digits> {
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.len() + fraction.len() == 0 || !all_digits(whole) || !all_digits(fraction) {
            return None;
        }
        let exponent = match exponent {
            None => 0,
            Some(e) => {
                let (sign, e) = match e.as_bytes().first()? {
                    b'-' => (-1, &e[1..]),
                    b'+' => (1, &e[1..]),
                    _ => (1, e),
                };
                if e.is_empty() || !all_digits(e) {
                    return None;
                }
                let e = e.trim_start_matches('0');
                let magnitude = if e.len() > 13 {
                    EXPONENT_LIMIT
                } else {
                    e.parse::<i64>().unwrap_or(0).min(EXPONENT_LIMIT)
                };
                sign * magnitude
            }
        };
        let all = format!("{whole}{fraction}");
        let significant = all.trim_start_matches('0');
        let trimmed = significant.trim_end_matches('0');
        if trimmed.is_empty() {
            return Some(Digits {
                negative: false,
                digits: String::new(),
                exponent: 0,
            });
        }
        Some(Digits {
            negative,
            digits: trimmed.to_string(),
            exponent: exponent - fraction.len() as i64 + (significant.len() - trimmed.len()) as i64,
        })
    }

    /// Digits before the decimal point (0 for zero and for a value below 1).
    fn whole_digits(&self) -> i64 {
        (self.digits.len() as i64 + self.exponent).max(0)
    }

    /// Significant digits after the decimal point.
    fn decimal_places(&self) -> i64 {
        if self.digits.is_empty() {
            0
        } else {
            (-self.exponent).max(0)
        }
    }
}

/// The integer a number's text denotes, whatever its notation (`1e3`, `1000.0`): refused
/// when it has a fraction or does not fit `min..=max`. Exact: no float in between.
pub fn integer_within(text: &str, min: i128, max: i128) -> Result<i128, String> {
    let Some(d) = Digits::parse(text) else {
        return Err(format!("{text} is not a number"));
    };
    if d.decimal_places() > 0 {
        return Err(format!("{text} is not an integer"));
    }
    let out_of_range = || format!("{text} is out of range ({min}..{max})");
    if d.whole_digits() > 39 {
        return Err(out_of_range());
    }
    let magnitude: i128 = format!("{}{}", d.digits, "0".repeat(d.exponent.max(0) as usize))
        .parse()
        .unwrap_or(0);
    let value = if d.negative { -magnitude } else { magnitude };
    if value < min || value > max {
        return Err(out_of_range());
    }
    Ok(value)
}

/// A decimal column of `precision` digits, `scale` of them after the point (PostgreSQL
/// allows a negative scale: multiples of 10^-scale). The server would round the rest.
pub fn decimal_within(text: &str, precision: u32, scale: i32) -> Result<(), String> {
    let Some(d) = Digits::parse(text) else {
        return Err(format!("{text} is not a number"));
    };
    if d.digits.is_empty() {
        return Ok(());
    }
    let scale = i64::from(scale);
    if d.exponent < -scale {
        return Err(match scale {
            0.. => format!(
                "{text} has {} decimal places; the column keeps {scale} (not rounded)",
                d.decimal_places()
            ),
            _ => format!("{text} is not a multiple of 1e{} (not rounded)", -scale),
        });
    }
    let room = i64::from(precision) - scale;
    if d.digits.len() as i64 + d.exponent > room {
        return Err(format!(
            "{text} is out of range: the column holds {room} digits before the point"
        ));
    }
    Ok(())
}

/// A binary floating-point column: single (`real`, `FLOAT`) or double precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Float {
    Single,
    Double,
}

/// A float column holds the nearest value of its type: the user chose an approximate
/// type, so `0.1` or 2^53 + 1 is rounded as every database rounds it. Out of its range
/// (`1e400`), or so small that it would be stored as 0, is refused: that is no rounding.
pub fn float_within(text: &str, float: Float) -> Result<(), String> {
    let Some(d) = Digits::parse(text) else {
        return Err(format!("{text} is not a number"));
    };
    let (name, zero, infinite) = match float {
        Float::Single => {
            let v: f32 = text
                .trim_start_matches('+')
                .parse()
                .unwrap_or(f32::INFINITY);
            ("single", v == 0.0, v.is_infinite())
        }
        Float::Double => {
            let v: f64 = text
                .trim_start_matches('+')
                .parse()
                .unwrap_or(f64::INFINITY);
            ("double", v == 0.0, v.is_infinite())
        }
    };
    if infinite {
        return Err(format!("{text} is out of range for {name} precision"));
    }
    if zero && !d.digits.is_empty() {
        return Err(format!(
            "{text} is too small for {name} precision: it would be stored as 0"
        ));
    }
    Ok(())
}

/// A string column's limits: at most `chars` characters and `bytes` bytes; `padded`: a
/// CHAR(n) column, which pads with spaces and gives its value back without trailing ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TextLimit {
    pub chars: Option<u64>,
    pub bytes: Option<u64>,
    pub padded: bool,
}

impl TextLimit {
    /// Whether `s` goes in and comes back as it is. A string over the length is refused
    /// by the servers, except that its excess trailing spaces are cut without a word.
    pub fn check(&self, s: &str) -> Result<(), String> {
        if let Some(most) = self.chars {
            let n = s.chars().count() as u64;
            if n > most {
                return Err(format!(
                    "has {n} characters; the column holds {most} (not cut)"
                ));
            }
        }
        if let Some(most) = self.bytes
            && s.len() as u64 > most
        {
            return Err(format!(
                "has {} bytes; the column holds {most} (not cut)",
                s.len()
            ));
        }
        if self.padded && s.ends_with(' ') {
            return Err("ends in a space, which a CHAR column does not give back (not cut)".into());
        }
        Ok(())
    }
}

/// A time's text whose seconds have more significant fractional digits than a column of
/// `precision` keeps: the reason it is refused (the servers round or drop them).
pub fn fraction_within(text: &str, precision: u32) -> Result<(), String> {
    let digits = fraction_digits(text);
    if digits > precision as usize {
        return Err(format!(
            "{text:?} has {digits} significant fractional digits; the column keeps {precision} (not rounded)"
        ));
    }
    Ok(())
}

/// Significant digits of the seconds' fraction (trailing zeros are exact): after the
/// `.` that follows the seconds — the part after a time's second `:` (`10:00:00.5`,
/// RFC 3339's offset comes after it), or MySQL's compact `20240501100000.5`.
fn fraction_digits(text: &str) -> usize {
    let seconds = match text.splitn(3, ':').nth(2) {
        Some(seconds) => seconds.trim_start_matches(|c: char| c.is_ascii_digit()),
        None => {
            let rest = text.trim_start_matches(|c: char| c.is_ascii_digit());
            // `2024.05.01` is a date with dots, not a fraction.
            if text.len() - rest.len() < 12 {
                return 0;
            }
            rest
        }
    };
    let Some(fraction) = seconds.strip_prefix('.') else {
        return 0;
    };
    let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
    fraction[..digits].trim_end_matches('0').len()
}

pub mod time;

#[cfg(test)]
#[path = "column_fit/tests.rs"]
mod tests;
