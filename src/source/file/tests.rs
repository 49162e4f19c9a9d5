//! The file source against real files: rotation, truncation, and the checkpoint per file.
//! Time is paused, so the rotate-wait is stepped over with `advance`, not slept.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::*;
use crate::record::Record;
use identity::fingerprint;

pub(super) const WAIT: Duration = Duration::from_secs(5);

pub(super) fn config(dir: &Path) -> FileSettings {
    FileSettings {
        path: Some(dir.join("in.ndjson")),
        rotate_wait: WAIT,
        ..FileSettings::default()
    }
}

pub(super) fn append(path: &Path, text: &str) {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

pub(super) fn lines(prefix: &str, range: std::ops::RangeInclusive<u32>) -> String {
    range
        .map(|i| format!("{{\"id\":\"{prefix}{i}\"}}\n"))
        .collect()
}

pub(super) fn ids(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
            v["id"].as_str().unwrap().to_string()
        })
        .collect()
}

pub(super) async fn pull_all(s: &mut FileSource) -> Vec<Record> {
    s.pull(10_000).await.unwrap().records
}

pub(super) async fn ack_all(s: &mut FileSource, records: &[Record]) {
    let positions: Vec<Position> = records.iter().map(|r| r.position).collect();
    s.ack(&positions).await.unwrap();
}

pub(super) fn checkpoint(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("in.ndjson.sluice-checkpoint")).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub(super) struct Input {
    _dir: tempfile::TempDir,
    pub(super) dir: PathBuf,
    pub(super) path: PathBuf,
}

pub(super) fn input(text: &str) -> Input {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.ndjson");
    std::fs::write(&path, text).unwrap();
    Input {
        dir: dir.path().to_path_buf(),
        _dir: dir,
        path,
    }
}

#[tokio::test(start_paused = true)]
async fn the_new_file_is_read_while_the_rotated_one_is_finished() {
    let i = input(&lines("a", 1..=3));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    let first = pull_all(&mut s).await;
    assert_eq!(ids(&first), ["a1", "a2", "a3"]);

    // The writer keeps its handle: after the rename its lines still go to the old file.
    let mut writer = std::fs::OpenOptions::new()
        .append(true)
        .open(&i.path)
        .unwrap();
    std::fs::rename(&i.path, i.dir.join("in.ndjson.1")).unwrap();
    append(&i.path, &lines("b", 1..=2));
    writer.write_all(lines("a", 4..=4).as_bytes()).unwrap();
    let p = s.pull(10_000).await.unwrap();
    assert_eq!(
        ids(&p.records),
        ["a4", "b1", "b2"],
        "both files, the old one first"
    );
    assert!(p.caught_up);
    assert_eq!(p.records[0].origin, "in.ndjson.1:4");
    assert_eq!(p.records[1].origin, "in.ndjson:1");
    assert_ne!(p.records[0].position.lane, p.records[1].position.lane);

    tokio::time::advance(WAIT - Duration::from_millis(1)).await;
    writer.write_all(b"{\"id\":\"a5\"}\n{\"id\":").unwrap();
    append(&i.path, &lines("b", 3..=3));
    assert_eq!(
        ids(&pull_all(&mut s).await),
        ["a5", "b3"],
        "the old one still growing: read on"
    );
    tokio::time::advance(WAIT - Duration::from_millis(1)).await;
    writer.write_all(b"\"a6\"}").unwrap();
    drop(writer);
    assert!(pull_all(&mut s).await.is_empty(), "grew, but no whole line");
    tokio::time::advance(WAIT - Duration::from_millis(1)).await;
    assert!(pull_all(&mut s).await.is_empty(), "not quiet long enough");
    tokio::time::advance(Duration::from_millis(1)).await;
    let p = pull_all(&mut s).await;
    assert_eq!(ids(&p), ["a6"], "the old file's unterminated last line");
    assert_eq!(p[0].origin, "in.ndjson.1:6");
}

#[tokio::test(start_paused = true)]
async fn acknowledgements_of_two_files_advance_each_checkpoint_entry() {
    let i = input(&lines("a", 1..=3));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    let old = pull_all(&mut s).await;
    std::fs::rename(&i.path, i.dir.join("in.ndjson.1")).unwrap();
    append(&i.path, &lines("b", 1..=2));
    let new = pull_all(&mut s).await;
    assert_eq!(ids(&new), ["b1", "b2"]);

    // The new file's records settle first, then only part of the old file's.
    ack_all(&mut s, &new).await;
    ack_all(&mut s, &old[..1]).await;
    s.close(false).await.unwrap();
    let cp = checkpoint(&i.dir);
    let files = cp["files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{cp}");
    assert_eq!(files[0]["name"], "in.ndjson.1");
    assert_eq!(files[0]["line"], 2);
    assert_eq!(files[1]["name"], "in.ndjson");
    assert_eq!(files[1]["line"], 3);
    assert_ne!(files[0]["file"], files[1]["file"]);

    // The rest of the old file settles once it is finished: it leaves the checkpoint.
    tokio::time::advance(WAIT).await;
    assert!(pull_all(&mut s).await.is_empty());
    ack_all(&mut s, &old[1..]).await;
    s.close(false).await.unwrap();
    let cp = checkpoint(&i.dir);
    assert_eq!(cp["files"].as_array().unwrap().len(), 1, "{cp}");
    assert_eq!(cp["files"][0]["name"], "in.ndjson");
}

#[tokio::test(start_paused = true)]
async fn a_restart_resumes_the_rotated_file_and_the_new_one_each_where_it_stood() {
    let i = input(&lines("a", 1..=4));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    let old = pull_all(&mut s).await;
    ack_all(&mut s, &old[..2]).await;
    std::fs::rename(&i.path, i.dir.join("in.ndjson.1")).unwrap();
    append(&i.path, &lines("b", 1..=3));
    assert_eq!(
        pull_all(&mut s).await.len(),
        3,
        "the new file, read at once"
    );
    s.close(false).await.unwrap();
    drop(s);

    // Stopped mid-way through the old file, nothing of the new one acknowledged; the
    // writer added one more line to the old one.
    append(&i.dir.join("in.ndjson.1"), &lines("a", 5..=5));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    let p = pull_all(&mut s).await;
    assert_eq!(
        ids(&p),
        ["a3", "a4", "a5", "b1", "b2", "b3"],
        "each file from its checkpoint, the old one first"
    );
    ack_all(&mut s, &p[..4]).await;
    tokio::time::advance(WAIT).await;
    assert!(pull_all(&mut s).await.is_empty());
    s.close(false).await.unwrap();
    drop(s);

    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    assert_eq!(
        ids(&pull_all(&mut s).await),
        ["b2", "b3"],
        "the new file from its own checkpoint, the finished old one not again"
    );
}

#[tokio::test(start_paused = true)]
async fn an_old_offset_is_never_applied_to_a_new_file() {
    let i = input(&lines("a", 1..=5));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    let old = pull_all(&mut s).await;
    ack_all(&mut s, &old).await;
    s.close(false).await.unwrap();
    drop(s);
    // Rotated while the worker was down, and the old file deleted.
    std::fs::remove_file(&i.path).unwrap();
    append(&i.path, &lines("b", 1..=2));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    assert_eq!(ids(&pull_all(&mut s).await), ["b1", "b2"]);
}

#[tokio::test(start_paused = true)]
async fn copytruncate_finishes_the_old_content_from_the_copy_then_reads_the_file_again() {
    let i = input(&lines("a", 1..=3));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    assert_eq!(ids(&pull_all(&mut s).await), ["a1", "a2", "a3"]);
    // Written, then copied and truncated before the worker read it.
    append(&i.path, &lines("a", 4..=5));
    std::fs::copy(&i.path, i.dir.join("in.ndjson.1")).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&i.path)
        .unwrap()
        .set_len(0)
        .unwrap();
    append(&i.path, &lines("b", 1..=2));
    let p = pull_all(&mut s).await;
    assert_eq!(
        ids(&p),
        ["a4", "a5", "b1", "b2"],
        "from the copy, and the truncated file from its start"
    );
    assert_eq!(p[0].origin, "in.ndjson.1:4");
    assert_eq!(p[2].origin, "in.ndjson:1");
}

#[tokio::test(start_paused = true)]
async fn a_truncation_rewritten_past_the_offset_is_seen_by_its_head() {
    let i = input(&lines("a", 1..=2));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    assert_eq!(pull_all(&mut s).await.len(), 2);
    // Rewritten longer than what was read, no copy kept: read again from the start, no
    // fragment from the old offset.
    std::fs::write(&i.path, lines("bbbbbbbb", 1..=4)).unwrap();
    let p = pull_all(&mut s).await;
    assert_eq!(
        ids(&p),
        ["bbbbbbbb1", "bbbbbbbb2", "bbbbbbbb3", "bbbbbbbb4"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_truncation_is_noticed_while_reading_behind() {
    let i = input(&lines("a", 1..=6));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    assert_eq!(ids(&s.pull(2).await.unwrap().records), ["a1", "a2"]);
    std::fs::copy(&i.path, i.dir.join("in.ndjson.1")).unwrap();
    std::fs::write(&i.path, lines("b", 1..=9)).unwrap();
    let p = pull_all(&mut s).await;
    assert_eq!(&ids(&p)[..4], ["a3", "a4", "a5", "a6"]);
    assert_eq!(p.len(), 4 + 9, "and the rewritten file from its start");
}

#[tokio::test]
async fn an_unmatched_checkpoint_starts_the_file_from_the_beginning() {
    let i = input(&lines("a", 1..=3));
    std::fs::write(
        i.dir.join("in.ndjson.sluice-checkpoint"),
        r#"{"offset":12,"line":2,"fingerprint":"00"}"#,
    )
    .unwrap();
    let mut s = FileSource::open(&config(&i.dir), false).await.unwrap();
    assert_eq!(pull_all(&mut s).await.len(), 3);
}

#[tokio::test]
async fn a_single_file_checkpoint_of_an_earlier_version_is_resumed() {
    let i = input(&lines("a", 1..=3));
    let first_line = lines("a", 1..=1);
    std::fs::write(
        i.dir.join("in.ndjson.sluice-checkpoint"),
        format!(
            r#"{{"offset":{},"line":2,"fingerprint":"{}"}}"#,
            first_line.len(),
            fingerprint(first_line.as_bytes(), first_line.len() as u64)
        ),
    )
    .unwrap();
    let mut s = FileSource::open(&config(&i.dir), false).await.unwrap();
    let p = pull_all(&mut s).await;
    assert_eq!(ids(&p), ["a2", "a3"]);
    assert_eq!(p[0].origin, "in.ndjson:2");
}

#[tokio::test]
async fn until_empty_reads_an_unterminated_last_line_and_counts_the_backlog() {
    let i = input("{\"id\":\"a\"}\n\n{\"id\":\"b\"}");
    let mut s = FileSource::open(&config(&i.dir), false).await.unwrap();
    assert_eq!(s.count_backlog().await.unwrap(), Some(2));
    let p = s.pull(10).await.unwrap();
    assert_eq!(ids(&p.records), ["a", "b"]);
    assert!(p.caught_up);
    ack_all(&mut s, &p.records).await;
    s.close(true).await.unwrap();
    assert!(!i.dir.join("in.ndjson.sluice-checkpoint").exists());
}

#[tokio::test]
async fn follow_mode_holds_an_unfinished_last_line() {
    let i = input("{\"a\":1}\n{\"a\":");
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    let p = s.pull(10).await.unwrap();
    assert_eq!(p.records.len(), 1);
    assert!(p.caught_up);
}

#[tokio::test]
async fn pulls_no_more_than_asked() {
    let i = input("1\n2\n3\n4\n5\n");
    let mut s = FileSource::open(&config(&i.dir), false).await.unwrap();
    let p = s.pull(2).await.unwrap();
    assert_eq!(p.records.len(), 2);
    assert!(!p.caught_up);
    assert_eq!(s.pull(10).await.unwrap().records.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn keys_without_sink_key_tell_a_rotated_file_from_the_old_one() {
    let i = input(&lines("a", 1..=2));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    let old = pull_all(&mut s).await;
    std::fs::rename(&i.path, i.dir.join("in.ndjson.1")).unwrap();
    // The same lines again: only the file tells them apart.
    append(&i.path, &lines("a", 1..=2));
    let new = pull_all(&mut s).await;
    assert_eq!(new.len(), 2);
    assert!(old[0].fallback_key.starts_with("in.ndjson:1:"));
    assert!(new[0].fallback_key.starts_with("in.ndjson:1:"));
    assert_ne!(old[0].fallback_key, new[0].fallback_key);
    s.close(false).await.unwrap();
    drop(s);

    // Nothing was acknowledged: a restart reads both files again, the old one under its
    // new name, with the same keys, so the sink deduplicates them.
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    let again = pull_all(&mut s).await;
    assert_eq!(again[0].origin, "in.ndjson.1:1");
    let keys = |r: &[Record]| r.iter().map(|r| r.fallback_key.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&again), [keys(&old), keys(&new)].concat());
}
