//! The corpus: many adversarial records in one NDJSON file, each naming its case, so one
//! run of the worker per sink covers every case at once.

/// One line of the corpus, as bytes (a few are not even UTF-8), with the case it tests.
pub struct Line {
    pub case: String,
    pub bytes: Vec<u8>,
}

fn record(case: &str, id: &str, rest: &str) -> Line {
    let rest = if rest.is_empty() {
        String::new()
    } else {
        format!(",{rest}")
    };
    Line {
        case: case.into(),
        bytes: format!("{{\"id\":{id},\"case\":\"{case}\"{rest}}}").into_bytes(),
    }
}

/// A JSON string literal of `s`.
fn js(s: &str) -> String {
    serde_json::Value::String(s.into()).to_string()
}

/// Letters and digits no compressor shrinks much (a long key must stay long on disk).
fn noise(len: usize, seed: u64) -> String {
    let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            alphabet[(x % alphabet.len() as u64) as usize] as char
        })
        .collect()
}

fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

/// Keys: bytes that differ are different keys, whatever a collation thinks of them.
pub fn keys() -> Vec<Line> {
    let string_keys: &[(&str, &str)] = &[
        ("lower", "abc"),
        ("upper", "ABC"),
        ("title", "Abc"),
        ("accent-nfc", "\u{e0}bc"),
        ("accent-nfd", "a\u{300}bc"),
        ("trailing-space", "abc "),
        ("leading-space", " abc"),
        ("emoji-1", "😀"),
        ("emoji-2", "😁"),
        ("outside-bmp", "𝄞"),
        ("single-x", "x"),
        ("apostrophe", "it's"),
        ("double-quotes", "say \"hi\""),
        ("backslash", "a\\b"),
        ("tab", "a\tb"),
        ("newline", "a\nb"),
        ("nul", "a\u{0}b"),
        ("digits-as-string", "42"),
        ("true-as-string", "true"),
        ("null-as-string", "null"),
        ("quoted-string", "\"q\""),
        ("sql-injection", "'); DROP TABLE x; --"),
    ];
    let mut lines: Vec<Line> = string_keys
        .iter()
        .map(|(name, key)| record(&format!("keys/{name}"), &js(key), ""))
        .collect();
    for (name, key) in [("number", "42"), ("boolean", "true"), ("exponent", "1e400")] {
        lines.push(record(&format!("keys/{name}"), key, ""));
    }
    for (name, key) in [
        ("255-chars", "k".repeat(255)),
        ("256-chars", "k".repeat(256)),
        ("512-bytes", "é".repeat(256)),
        ("513-bytes", format!("{}x", "é".repeat(256))),
        ("2000-bytes", noise(2000, 7)),
        ("9000-bytes", noise(9000, 9)),
    ] {
        lines.push(record(&format!("keys/{name}"), &js(&key), ""));
    }
    lines.push(record("keys/empty", "\"\"", ""));
    lines.push(record("keys/null", "null", ""));
    lines.push(record("keys/object", "{\"a\":1}", ""));
    lines.push(Line {
        case: "keys/missing".into(),
        bytes: b"{\"case\":\"keys/missing\"}".to_vec(),
    });
    lines
}

/// Values: every number boundary, exact decimals, escapes, nesting, timestamps.
pub fn values() -> Vec<Line> {
    let values: &[(&str, &str)] = &[
        ("int-2^31", "2147483648"),
        ("int-2^31-1", "2147483647"),
        ("int-neg-2^31", "-2147483648"),
        ("int-2^53", "9007199254740992"),
        ("int-2^53+1", "9007199254740993"),
        ("int-neg-2^53-1", "-9007199254740993"),
        ("int-2^63-1", "9223372036854775807"),
        ("int-2^63", "9223372036854775808"),
        ("int-neg-2^63", "-9223372036854775808"),
        ("int-neg-2^63-1", "-9223372036854775809"),
        ("int-2^64-1", "18446744073709551615"),
        ("int-2^64", "18446744073709551616"),
        ("int-neg-2^64+1", "-18446744073709551615"),
        ("decimal-30-digits", "0.123456789012345678901234567890"),
        ("integer-30-digits", "123456789012345678901234567890"),
        ("decimal-trailing-zeros", "1.500"),
        ("exponent", "1.5e10"),
        ("exponent-negative", "1E-7"),
        ("exponent-huge", "1e400"),
        ("minus-zero", "-0"),
        ("minus-zero-fraction", "-0.0"),
        ("every-escape", r#""\"\\\/\b\f\n\r\t\u0001\u001f""#),
        ("escaped-non-ascii", r#""\u00e9\u2028\ud83d\ude00""#),
        ("raw-non-ascii", "\"é😀𝄞\""),
        ("nul-in-string", r#""a\u0000b""#),
        ("empty-string", "\"\""),
        ("true", "true"),
        ("false", "false"),
        ("null", "null"),
        ("empty-object", "{}"),
        ("empty-array", "[]"),
        ("timestamp-z", "\"2024-05-01T10:00:00Z\""),
        ("timestamp-offset", "\"2024-05-01T10:00:00+02:00\""),
        ("timestamp-nanos", "\"2024-05-01T10:00:00.123456789Z\""),
        ("timestamp-no-offset", "\"2024-05-01T10:00:00\""),
    ];
    let mut lines: Vec<Line> = values
        .iter()
        .map(|(name, v)| {
            let case = format!("values/{name}");
            record(&case, &js(&format!("v-{name}")), &format!("\"v\":{v}"))
        })
        .collect();
    for depth in [20, 40, 100] {
        let case = format!("values/nested-{depth}");
        lines.push(record(
            &case,
            &js(&format!("v-nested-{depth}")),
            &format!("\"v\":{}", nested(depth)),
        ));
    }
    lines.push(record(
        "values/duplicate-field",
        "\"v-duplicate-field\"",
        "\"v\":1,\"v\":2",
    ));
    lines.push(Line {
        case: "values/whitespace".into(),
        bytes: b"  { \"id\" : \"v-whitespace\" , \"case\" : \"values/whitespace\" , \"v\" : [ 1 , 2 ] }  "
            .to_vec(),
    });
    lines
}

/// Lines that are no JSON record at all: dead-lettered by every sink alike.
pub fn malformed() -> Vec<Line> {
    let mut lines = vec![
        Line {
            case: "malformed/truncated".into(),
            bytes: b"{\"id\":\"m-truncated\",\"case\":\"malformed/truncated\"".to_vec(),
        },
        Line {
            case: "malformed/lone-surrogate".into(),
            bytes: br#"{"id":"m-surrogate","case":"malformed/lone-surrogate","v":"\ud800"}"#
                .to_vec(),
        },
        Line {
            case: "malformed/nan".into(),
            bytes: br#"{"id":"m-nan","case":"malformed/nan","v":NaN}"#.to_vec(),
        },
        Line {
            case: "malformed/trailing".into(),
            bytes: br#"{"id":"m-trailing","case":"malformed/trailing"} x"#.to_vec(),
        },
        Line {
            case: "malformed/nested-200".into(),
            bytes: format!(
                "{{\"id\":\"m-nested\",\"case\":\"malformed/nested-200\",\"v\":{}}}",
                nested(200)
            )
            .into_bytes(),
        },
    ];
    let mut not_utf8 = br#"{"id":"m-latin1","case":"malformed/not-utf8","v":""#.to_vec();
    not_utf8.extend_from_slice(&[0xe9, 0xff]);
    not_utf8.extend_from_slice(b"\"}");
    lines.push(Line {
        case: "malformed/not-utf8".into(),
        bytes: not_utf8,
    });
    lines
}

/// Keys seen twice: the first record stays, the second is a duplicate — unless the first
/// is one the sink cannot hold (then the second is the row).
pub fn duplicates() -> Vec<Line> {
    vec![
        record("duplicates/first", "\"d-1\"", "\"n\":1"),
        record("duplicates/nul-first", "\"d-2\"", r#""v":"a\u0000b""#),
        record("duplicates/second", "\"d-1\"", "\"n\":2"),
        record("duplicates/after-nul", "\"d-2\"", "\"v\":\"ok\""),
        record("duplicates/third", "\"d-1\"", "\"n\":3"),
    ]
}

/// The insert-mode corpus: every family, interleaved so that batches mix them.
pub fn insert_corpus() -> Vec<Line> {
    let mut families = [keys(), values(), malformed(), duplicates()].map(|f| f.into_iter());
    let mut lines = Vec::new();
    loop {
        let before = lines.len();
        for family in &mut families {
            lines.extend(family.next());
        }
        if lines.len() == before {
            return lines;
        }
    }
}

pub fn write(path: &std::path::Path, lines: &[Line]) {
    let mut body = Vec::new();
    for line in lines {
        body.extend_from_slice(&line.bytes);
        body.push(b'\n');
    }
    std::fs::write(path, body).unwrap();
}
