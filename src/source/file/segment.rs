//! One input file as read and acknowledged: its open handle, the line splitting, what is
//! known of it on disk, and the acknowledged prefix. A file rotated away stays a segment
//! (handle open) until it is read to its end and every record of it is settled, so
//! acknowledgements of two files can be in flight at once.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::time::Instant;

use super::checkpoint::Entry;
use super::identity::{FileId, fingerprint};
use super::locate::display_name;
use super::on_disk::OnDisk;
use crate::record::{Position, Record};
use crate::source::watermark::Watermark;

pub struct Segment {
    /// The lane of this file's positions: unique per file within a run.
    pub lane: i32,
    /// None for stdin.
    pub id: Option<FileId>,
    /// Where it was opened (the input path, or where a rotated file was found): messages.
    pub path: PathBuf,
    /// The file name it was opened under: origins (`name:line`).
    pub name: String,
    /// The input's name, in the keys of records without `sink.key`; stays when the file
    /// is found under another name (rotated, copied).
    pub key_name: String,
    /// Tells this file's keys from another's with the same name and line numbers (the
    /// file after a rotation or a copytruncate): from its identity and first line, set
    /// once the first line is read. None for stdin.
    key_tag: Option<String>,
    /// Its length, head and the longest it was seen, through a second handle. None for
    /// stdin.
    disk: Option<OnDisk>,
    reader: BufReader<Box<dyn AsyncRead + Unpin + Send>>,
    max_record_bytes: usize,
    /// Byte offset of the next unread line, and its 1-based number.
    offset: u64,
    line: u64,
    /// A line read only in part (no newline yet): its bytes (capped) and its full length.
    partial: Vec<u8>,
    partial_len: u64,
    watermark: Watermark,
    /// Line number that follows each pulled span's end, to record in the checkpoint.
    line_after: BTreeMap<u64, u64>,
    committed_line: u64,
    /// Another file is at the input path now: finish this one, then move on.
    pub superseded: bool,
    /// Last time reading this file found new bytes (or it was superseded).
    pub last_growth: Instant,
    /// Read to its end for good: nothing more will be pulled from it.
    pub done: bool,
    /// The file was cut and no copy holds the rest of what was read: only the bytes
    /// already read into memory are delivered, and nothing of it can be read again.
    pub cut: bool,
    /// No line starting at or after this byte is read (`--until-empty`: the file's size
    /// when the run began). A line begun before it is read whole.
    pub limit: Option<u64>,
}

impl Segment {
    /// A segment on an open file, reading from `offset` (line `line`); `head` is its first
    /// bytes as they are now.
    pub fn on_file(
        lane: i32,
        file: std::fs::File,
        id: FileId,
        path: PathBuf,
        (offset, line): (u64, u64),
        head: Vec<u8>,
        max_record_bytes: usize,
    ) -> std::io::Result<Self> {
        let disk = OnDisk::new(&file, head)?;
        let reader = reader_at(file, offset)?;
        let name = display_name(&path);
        let mut s = Self::new(lane, reader, name, max_record_bytes, offset, line);
        s.path = path;
        s.id = Some(id);
        s.disk = Some(disk);
        Ok(s)
    }

    pub fn new(
        lane: i32,
        reader: Box<dyn AsyncRead + Unpin + Send>,
        name: String,
        max_record_bytes: usize,
        offset: u64,
        line: u64,
    ) -> Self {
        Segment {
            lane,
            id: None,
            path: PathBuf::from(&name),
            key_name: name.clone(),
            key_tag: None,
            name,
            disk: None,
            reader: BufReader::with_capacity(256 * 1024, reader),
            max_record_bytes,
            offset,
            line,
            partial: Vec::new(),
            partial_len: 0,
            watermark: Watermark::new(offset),
            line_after: BTreeMap::new(),
            committed_line: line,
            superseded: false,
            last_growth: Instant::now(),
            done: false,
            cut: false,
            limit: None,
        }
    }

    /// Bytes consumed from the file: whole lines plus a partial one.
    pub fn consumed(&self) -> u64 {
        self.offset + self.partial_len
    }

    /// Its length on disk now (through the open handle, wherever the file is named now).
    pub fn disk_len(&self) -> std::io::Result<Option<u64>> {
        self.disk.as_ref().map(OnDisk::len).transpose()
    }

    /// What is known of the file on disk; None for stdin.
    pub fn disk(&self) -> Option<&OnDisk> {
        self.disk.as_ref()
    }

    /// Looks at the file again (see [`OnDisk::look`]): false if it was cut. A file cut
    /// already, or read to its end for good, is not looked at.
    pub fn look(&mut self) -> std::io::Result<bool> {
        match &mut self.disk {
            Some(disk) if !self.done && !self.cut => disk.look(),
            _ => Ok(true),
        }
    }

    /// Records not yet read, counted from where reading stands. None for stdin.
    pub fn count_unread(&self) -> std::io::Result<Option<u64>> {
        self.count_from(self.offset)
    }

    /// Records the next run will read from this file: from its acknowledged offset to its
    /// end (none from a file whose content is gone). None for stdin.
    pub fn count_unsettled(&self) -> std::io::Result<Option<u64>> {
        if self.cut {
            return Ok(Some(0));
        }
        self.count_from(self.watermark.committed())
    }

    fn count_from(&self, at: u64) -> std::io::Result<Option<u64>> {
        self.disk.as_ref().map(|d| d.count_from(at)).transpose()
    }

    /// The file was renamed: name its records after where it is now.
    pub fn renamed(&mut self, path: PathBuf) {
        self.name = display_name(&path);
        self.path = path;
    }

    /// Continues this content from another file holding the same bytes (a copy made before
    /// a truncation, whose first bytes are `head`), at the byte where reading stopped.
    pub fn move_to(
        &mut self,
        file: std::fs::File,
        id: FileId,
        path: PathBuf,
        head: Vec<u8>,
    ) -> std::io::Result<()> {
        let disk = OnDisk::new(&file, head)?;
        self.reader = BufReader::with_capacity(256 * 1024, reader_at(file, self.consumed())?);
        self.disk = Some(disk);
        self.id = Some(id);
        self.name = display_name(&path);
        self.path = path;
        Ok(())
    }

    /// The next non-blank line as a record, or None at the (current) end of the file. A
    /// last line without a newline is held back until its newline arrives.
    pub async fn next_record(&mut self) -> std::io::Result<Option<Record>> {
        loop {
            if self.partial_len == 0 && self.limit.is_some_and(|limit| self.offset >= limit) {
                return Ok(None);
            }
            let buf = self.reader.fill_buf().await?;
            if buf.is_empty() {
                return Ok(None);
            }
            let newline = buf.iter().position(|&b| b == b'\n');
            let take = newline.map_or(buf.len(), |i| i + 1);
            let at = self.offset + self.partial_len;
            if let Some(disk) = &mut self.disk {
                disk.learn(at, &buf[..take]);
            }
            let room = (self.max_record_bytes + 1).saturating_sub(self.partial.len());
            let content = &buf[..newline.unwrap_or(buf.len())];
            self.partial
                .extend_from_slice(&content[..content.len().min(room)]);
            self.partial_len += take as u64;
            self.reader.consume(take);
            self.last_growth = Instant::now();
            if newline.is_some()
                && let Some(r) = self.finish_line(true)
            {
                return Ok(Some(r));
            }
        }
    }

    /// Nothing more will be read from this file: a last line without a newline is a
    /// record of its own (the writer is done with it).
    pub fn finish(&mut self) -> Option<Record> {
        self.done = true;
        (self.partial_len > 0)
            .then(|| self.finish_line(false))
            .flatten()
    }

    /// The file was cut and no copy holds the rest of it: what was read into memory
    /// already is still delivered, and nothing more. Returns where the last whole line in
    /// hand ends and the longest the file was seen: the bytes between are lost (a line cut
    /// in two among them, never delivered as a fragment).
    pub fn cut_off(&mut self) -> (u64, u64) {
        let in_hand = self.reader.buffer().to_vec();
        let read_to = self.consumed() + in_hand.len() as u64;
        let whole_to = match in_hand.iter().rposition(|&b| b == b'\n') {
            Some(i) => self.consumed() + i as u64 + 1,
            None => self.offset,
        };
        self.reader = BufReader::new(Box::new(std::io::Cursor::new(in_hand)));
        self.cut = true;
        let seen = self.disk.as_ref().map_or(0, OnDisk::seen);
        (whole_to, seen.max(read_to))
    }

    /// Nothing more can be read from this file (its content is gone): a partial line is
    /// dropped rather than delivered as a fragment.
    pub fn abandon(&mut self) {
        self.done = true;
        self.partial.clear();
        self.partial_len = 0;
    }

    /// Closes the line gathered in `partial`; blank lines yield no record.
    fn finish_line(&mut self, newline: bool) -> Option<Record> {
        let start = self.offset;
        let line = self.line;
        let content_len = self.partial_len - u64::from(newline);
        self.offset += self.partial_len;
        self.line += 1;
        self.partial_len = 0;
        let mut payload = std::mem::take(&mut self.partial);
        let oversize = (payload.len() > self.max_record_bytes).then(|| {
            payload.truncate(self.max_record_bytes);
            content_len
        });
        if oversize.is_none() {
            while payload.last() == Some(&b'\r') {
                payload.pop();
            }
            if payload.iter().all(u8::is_ascii_whitespace) {
                return None;
            }
        }
        let origin = format!("{}:{}", self.name, line);
        let fallback_key = match self.key_tag() {
            Some(tag) => format!("{}:{line}:{tag}", self.key_name),
            None => origin.clone(),
        };
        let position = Position {
            lane: self.lane,
            start,
            end: self.offset,
        };
        self.watermark.pulled(start, self.offset);
        self.line_after.insert(self.offset, self.line);
        Some(Record {
            position,
            fallback_key,
            origin,
            payload,
            oversize,
            undecodable: None,
            context: Default::default(),
        })
    }

    fn key_tag(&mut self) -> Option<String> {
        if self.key_tag.is_none()
            && let (Some(id), Some(disk)) = (self.id, &self.disk)
        {
            let head = disk.head();
            let first = head
                .iter()
                .position(|&b| b == b'\n')
                .map_or(head, |n| &head[..n]);
            let mut h = Sha256::new();
            h.update(id.dev.to_le_bytes());
            h.update(id.ino.to_le_bytes());
            h.update(first);
            self.key_tag = Some(hex::encode(&h.finalize()[..6]));
        }
        self.key_tag.clone()
    }

    /// Records a written or dead-lettered span; true if the acknowledged prefix moved.
    pub fn ack(&mut self, start: u64) -> bool {
        if self.watermark.ack(start).is_none() {
            return false;
        }
        let committed = self.watermark.committed();
        if let Some(&line) = self.line_after.get(&committed) {
            self.committed_line = line;
        }
        self.line_after = self.line_after.split_off(&committed);
        true
    }

    /// Lines read to their newline (blank ones included).
    pub fn lines_read(&self) -> u64 {
        self.line - 1
    }

    /// Pulled records not yet settled.
    pub fn outstanding(&self) -> usize {
        self.watermark.outstanding()
    }

    /// Read to its end for good and every record of it settled: nothing to keep.
    pub fn settled(&self) -> bool {
        self.done && self.outstanding() == 0
    }

    /// Its acknowledged progress, for the checkpoint.
    pub fn entry(&self) -> Entry {
        let offset = self.watermark.committed();
        let (covered, fingerprint) = self
            .disk
            .as_ref()
            .map_or_else(|| (0, fingerprint(&[], 0)), |d| d.identity(offset));
        Entry {
            file: self.id,
            name: self.name.clone(),
            offset,
            line: self.committed_line,
            covered: Some(covered),
            fingerprint,
        }
    }
}

fn reader_at(
    file: std::fs::File,
    offset: u64,
) -> std::io::Result<Box<dyn AsyncRead + Unpin + Send>> {
    use std::io::{Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    Ok(Box::new(tokio::fs::File::from_std(file)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(input: &'static [u8], max: usize) -> Segment {
        Segment::new(0, Box::new(input), "t".into(), max, 0, 1)
    }

    async fn all(s: &mut Segment) -> Vec<Record> {
        let mut out = Vec::new();
        while let Some(r) = s.next_record().await.unwrap() {
            out.push(r);
        }
        out.extend(s.finish());
        out
    }

    #[tokio::test]
    async fn splits_lines_and_skips_blanks() {
        let mut s = segment(b"{\"a\":1}\r\n\n  \n{\"a\":2}\n{\"a\":3}", 100);
        let got = all(&mut s).await;
        let text: Vec<(String, String)> = got
            .iter()
            .map(|r| {
                (
                    r.origin.clone(),
                    String::from_utf8(r.payload.clone()).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            text,
            [
                ("t:1".to_string(), "{\"a\":1}".to_string()),
                ("t:4".to_string(), "{\"a\":2}".to_string()),
                ("t:5".to_string(), "{\"a\":3}".to_string())
            ]
        );
        assert_eq!(
            got[0].position,
            Position {
                lane: 0,
                start: 0,
                end: 9
            }
        );
        assert_eq!(got[2].position.end, 28);
    }

    #[tokio::test]
    async fn holds_an_unfinished_last_line_until_finished() {
        let mut s = segment(b"{\"a\":1}\n{\"a\":", 100);
        assert!(s.next_record().await.unwrap().is_some());
        assert!(s.next_record().await.unwrap().is_none());
        assert_eq!(s.consumed(), 13);
        assert_eq!(s.finish().unwrap().payload, b"{\"a\":");
    }

    #[tokio::test]
    async fn an_abandoned_partial_line_is_not_delivered() {
        let mut s = segment(b"{\"a\":1}\n{\"a\":", 100);
        assert!(s.next_record().await.unwrap().is_some());
        assert!(s.next_record().await.unwrap().is_none());
        s.abandon();
        assert!(s.done);
        assert!(s.finish().is_none());
    }

    #[tokio::test]
    async fn oversize_lines_are_cut_and_flagged() {
        let mut s = segment(b"0123456789abcdef\n{}\n", 8);
        let got = all(&mut s).await;
        assert_eq!(got[0].payload, b"01234567");
        assert_eq!(got[0].oversize, Some(16));
        assert_eq!(got[1].oversize, None);
        assert_eq!(got[1].position.start, 17);
    }

    #[tokio::test]
    async fn the_checkpoint_entry_follows_acknowledgements_in_order() {
        let mut s = segment(b"a\n\nb\nc\n", 100);
        let got = all(&mut s).await;
        assert_eq!(s.entry().offset, 0);
        assert_eq!(s.entry().line, 1);
        assert!(!s.ack(got[1].position.start), "b before a: no prefix yet");
        assert!(s.ack(got[0].position.start));
        // a, the blank line and b: the next line is 4 (c), at byte 5.
        assert_eq!((s.entry().offset, s.entry().line), (5, 4));
        assert!(!s.settled());
        assert!(s.ack(got[2].position.start));
        assert!(s.settled());
        assert_eq!((s.entry().offset, s.entry().line), (7, 5));
    }

    #[tokio::test]
    async fn a_limit_stops_before_lines_that_start_at_or_after_it() {
        let mut s = segment(b"a\nbb\nccc\n", 100);
        // Byte 3 is inside "bb": that line began before the limit and is read whole.
        s.limit = Some(3);
        let got = all(&mut s).await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].payload, b"bb");
        assert_eq!(s.consumed(), 5);
    }
}
