//! Fuzz bodies for the file source's readers (see `crate::fuzz_targets`): the line
//! splitter and the checkpoint, both fed bytes as they may lie on disk.

use super::checkpoint::parse;
use super::segment::Segment;

/// What a plain split of `data` says the records are: each line without its newline, as
/// it is and without trailing CRs; blank ones left out (a line too long for a record is
/// one whatever it holds); a last line without a newline only once the file is finished.
fn plain_lines(data: &[u8], max: usize) -> Vec<(&[u8], &[u8])> {
    let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    lines.pop_if(|l| l.is_empty());
    lines
        .into_iter()
        .map(|raw| {
            let mut l = raw;
            while let [rest @ .., b'\r'] = l {
                l = rest;
            }
            (raw, l)
        })
        .filter(|(raw, l)| raw.len() > max || !l.iter().all(u8::is_ascii_whitespace))
        .collect()
}

/// The line splitter: every record is the next line of a plain split (cut to
/// `max_record_bytes` with its real length when longer), its span follows the last one's,
/// and nothing is left out.
pub fn lines(data: &[u8]) {
    for max in [8, 1 << 20] {
        let reader = Box::new(std::io::Cursor::new(data.to_vec()));
        let mut segment = Segment::new(0, reader, "fuzz".into(), max, 0, 1);
        let mut records = Vec::new();
        while let Some(r) = futures::executor::block_on(segment.next_record()).expect("in memory") {
            records.push(r);
        }
        records.extend(segment.finish());
        let want = plain_lines(data, max);
        assert_eq!(records.len(), want.len(), "one record per line");
        let mut end = 0;
        for (r, (raw, line)) in records.iter().zip(want) {
            assert!(r.position.start >= end && r.position.end > r.position.start);
            end = r.position.end;
            match r.oversize {
                None => assert_eq!(r.payload, line),
                Some(len) => {
                    assert!(len as usize == raw.len() && raw.len() > max);
                    assert_eq!(r.payload, raw[..max]);
                }
            }
        }
        assert!(end <= data.len() as u64);
    }
}

/// The checkpoint: any bytes read as a list of entries or refused, never a panic.
pub fn checkpoint(data: &[u8]) {
    if let Ok(entries) = parse(data) {
        for e in entries {
            let _ = (e.offset, e.line, e.fingerprint.len(), e.name.len());
        }
    }
}
