//! The Confluent wire format's header: a magic byte 0, a 4-byte big-endian schema id, and
//! for Protobuf the indexes of the message within its schema's file.

/// What precedes an encoded body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireHeader {
    pub schema_id: u32,
    /// Protobuf only: the path to the message type, top-level index first.
    pub message_indexes: Vec<usize>,
}

/// The most message indexes read: deeper nesting than this is taken as a corrupt header.
const MAX_INDEXES: i64 = 64;

/// Splits a record into its header and body. `protobuf`: message indexes follow the id.
pub fn split(bytes: &[u8], protobuf: bool) -> Result<(WireHeader, &[u8]), String> {
    match bytes.first() {
        None => return Err("empty record: no wire-format header".into()),
        Some(0) => {}
        Some(other) => {
            return Err(format!(
                "wrong magic byte 0x{other:02x} (the Confluent wire format starts with 0x00): not written by a schema-registry serializer"
            ));
        }
    }
    let Some(id) = bytes.get(1..5) else {
        return Err(format!(
            "truncated record: {} bytes, shorter than the 5-byte wire-format header",
            bytes.len()
        ));
    };
    let schema_id = u32::from_be_bytes(id.try_into().expect("4 bytes"));
    let mut rest = &bytes[5..];
    let mut message_indexes = Vec::new();
    if protobuf {
        let count = zigzag_varint(&mut rest)
            .ok_or("truncated record: the Protobuf message indexes end early")?;
        if !(0..=MAX_INDEXES).contains(&count) {
            return Err(format!("corrupt Protobuf message-index count {count}"));
        }
        if count == 0 {
            // The common case, written as a single 0: the file's first message.
            message_indexes.push(0);
        }
        for _ in 0..count {
            let index = zigzag_varint(&mut rest)
                .ok_or("truncated record: the Protobuf message indexes end early")?;
            let index = usize::try_from(index)
                .map_err(|_| format!("corrupt Protobuf message index {index}"))?;
            message_indexes.push(index);
        }
    }
    Ok((
        WireHeader {
            schema_id,
            message_indexes,
        },
        rest,
    ))
}

/// A zigzag-encoded varint (as the Confluent serializers write the indexes), advancing `at`.
fn zigzag_varint(at: &mut &[u8]) -> Option<i64> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = at.split_first()?;
        *at = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    None
}

/// The header as the serializers write it (for `sluice produce` and tests).
pub fn header(schema_id: u32) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&schema_id.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avro_header_and_body() {
        let (h, body) = split(&[0, 0, 0, 1, 2, 9, 9], false).unwrap();
        assert_eq!(h.schema_id, 258);
        assert!(h.message_indexes.is_empty());
        assert_eq!(body, &[9, 9]);
    }

    #[test]
    fn protobuf_indexes_are_zigzag_varints() {
        // A single 0: the first message.
        let (h, body) = split(&[0, 0, 0, 0, 7, 0, 8], true).unwrap();
        assert_eq!((h.schema_id, h.message_indexes.clone()), (7, vec![0]));
        assert_eq!(body, &[8]);
        // Two indexes, [1, 2]: count 2 → 4, 1 → 2, 2 → 4.
        let (h, body) = split(&[0, 0, 0, 0, 7, 4, 2, 4, 8], true).unwrap();
        assert_eq!(h.message_indexes, vec![1, 2]);
        assert_eq!(body, &[8]);
        // Index 70: zigzag 140 = 0x8c 0x01.
        let (h, _) = split(&[0, 0, 0, 0, 7, 2, 0x8c, 0x01], true).unwrap();
        assert_eq!(h.message_indexes, vec![70]);
    }

    #[test]
    fn malformed_headers_say_what_is_wrong() {
        assert!(split(&[], false).unwrap_err().contains("empty"));
        assert!(
            split(b"{\"a\":1}", false)
                .unwrap_err()
                .contains("magic byte 0x7b")
        );
        assert!(split(&[0, 0, 1], false).unwrap_err().contains("truncated"));
        assert!(
            split(&[0, 0, 0, 0, 1, 4, 2], true)
                .unwrap_err()
                .contains("truncated")
        );
        assert!(
            split(&[0, 0, 0, 0, 1, 3], true)
                .unwrap_err()
                .contains("count -2")
        );
        assert!(
            split(
                &[
                    0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
                ],
                true
            )
            .is_err()
        );
    }
}
