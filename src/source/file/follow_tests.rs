//! Files cut while followed, against real files: a copy is found by what was seen of the
//! file even if nothing was read from it, the rotated file and its successor are both in
//! play when the successor is cut, a cut without a copy delivers what was read into memory
//! and counts the rest as lost, and a restart finds the copy of a file nothing was
//! acknowledged from. Time is paused.

use std::io::Write;

use super::tests::{WAIT, ack_all, append, checkpoint, config, ids, input, lines, pull_all};
use super::*;

fn copy_and_truncate(path: &Path, copy: &Path) {
    std::fs::copy(path, copy).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(0)
        .unwrap();
}

/// The case: renamed away, the new file written, then copytruncated before a line
/// of it was read (the old one was being read first): its lines come from the copy.
#[tokio::test(start_paused = true)]
async fn a_file_cut_before_a_line_of_it_was_read_is_finished_from_its_copy() {
    let i = input(&lines("a", 1..=2));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    assert_eq!(pull_all(&mut s).await.len(), 2);
    let mut writer = std::fs::OpenOptions::new()
        .append(true)
        .open(&i.path)
        .unwrap();
    std::fs::rename(&i.path, i.dir.join("in.ndjson.1")).unwrap();
    append(&i.path, "");
    writer.write_all(lines("a", 3..=4).as_bytes()).unwrap();
    assert!(pull_all(&mut s).await.len() == 2, "the rotation is seen");

    // Lines in the new file, seen by a look but not read (the pull asked for one record,
    // which the old file gave).
    writer.write_all(lines("a", 5..=5).as_bytes()).unwrap();
    append(&i.path, &lines("b", 1..=3));
    assert_eq!(ids(&s.pull(1).await.unwrap().records), ["a5"]);
    copy_and_truncate(&i.path, &i.dir.join("in.ndjson.2"));
    append(&i.path, &lines("b", 4..=4));
    let p = pull_all(&mut s).await;
    assert_eq!(ids(&p), ["b1", "b2", "b3", "b4"]);
    assert_eq!(p[0].origin, "in.ndjson.2:1", "from the copy");
    assert_eq!(p[3].origin, "in.ndjson:1", "the cut file from its start");
    assert_eq!(s.lost_bytes, 0);
}

/// Copytruncated while the rotated file before it is still being finished, with part of
/// it read: the rest comes from the copy, the three files are all in play, and each one's
/// acknowledged progress is its own checkpoint entry.
#[tokio::test(start_paused = true)]
async fn a_new_file_cut_while_the_rotated_one_is_finished_is_read_from_its_copy() {
    let i = input(&lines("a", 1..=2));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    let old = pull_all(&mut s).await;
    std::fs::rename(&i.path, i.dir.join("in.ndjson.1")).unwrap();
    append(&i.path, &lines("b", 1..=4));
    let p = s.pull(4).await.unwrap().records;
    assert_eq!(ids(&p), ["b1", "b2", "b3", "b4"]);
    append(&i.path, &lines("b", 5..=6));
    assert_eq!(ids(&s.pull(1).await.unwrap().records), ["b5"]);
    copy_and_truncate(&i.path, &i.dir.join("in.ndjson.2"));
    append(&i.path, &lines("c", 1..=1));
    let rest = pull_all(&mut s).await;
    assert_eq!(ids(&rest), ["b6", "c1"]);
    ack_all(&mut s, &old).await;
    ack_all(&mut s, &p).await;
    s.close(false).await.unwrap();
    let cp = checkpoint(&i.dir);
    let names: Vec<&str> = cp["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["in.ndjson.1", "in.ndjson.2", "in.ndjson"], "{cp}");
    assert_eq!(cp["files"][1]["line"], 5, "b1..b4 acknowledged: {cp}");
    drop(s);

    // Restarted: b5, b6 again from the copy, c1 again from the file at the path.
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    assert_eq!(ids(&pull_all(&mut s).await), ["b5", "b6", "c1"]);
}

/// Cut with no copy: the lines read into memory before the cut are still delivered; the
/// bytes seen on disk and not read are lost, and counted.
#[tokio::test(start_paused = true)]
async fn a_cut_without_a_copy_delivers_what_was_read_and_counts_the_rest_lost() {
    let i = input(&lines("a", 1..=4));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    assert_eq!(ids(&s.pull(1).await.unwrap().records), ["a1"]);
    // Appended, seen by a look, never read: the first read took the file as it was.
    let late = lines("a", 5..=6);
    append(&i.path, &late);
    assert!(s.pull(0).await.unwrap().records.is_empty());
    std::fs::write(&i.path, lines("b", 1..=1)).unwrap();
    let p = pull_all(&mut s).await;
    assert_eq!(ids(&p), ["a2", "a3", "a4", "b1"]);
    assert_eq!(s.lost_bytes, late.len() as u64);
    ack_all(&mut s, &p[..1]).await;
    s.close(false).await.unwrap();
    assert_eq!(
        s.remaining().await,
        Some(1),
        "a3, a4 cannot be read again; b1 is left"
    );
}

/// A new file seen (lines in it) but nothing of it acknowledged when the worker stopped,
/// copytruncated while it was down: the restart finds its copy by the first line seen
/// (the checkpoint's fingerprint covers it), instead of taking the cut file for it.
#[tokio::test(start_paused = true)]
async fn a_restart_finds_the_copy_of_a_file_nothing_was_acknowledged_from() {
    let i = input(&lines("b", 1..=3));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    assert_eq!(pull_all(&mut s).await.len(), 3);
    s.close(false).await.unwrap();
    let cp = checkpoint(&i.dir);
    assert_eq!(cp["files"][0]["offset"], 0, "{cp}");
    assert_eq!(
        cp["files"][0]["covered"],
        lines("b", 1..=1).len(),
        "the first line identifies it: {cp}"
    );
    drop(s);
    copy_and_truncate(&i.path, &i.dir.join("in.ndjson.1"));
    append(&i.path, &lines("c", 1..=1));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    assert_eq!(ids(&pull_all(&mut s).await), ["b1", "b2", "b3", "c1"]);
}

/// `remaining` is what the next run reads: from the acknowledged offset, records pulled
/// and not acknowledged included.
#[tokio::test]
async fn remaining_counts_from_the_checkpoint() {
    let i = input(&lines("a", 1..=5));
    let mut s = FileSource::open(&config(&i.dir), false).await.unwrap();
    let p = pull_all(&mut s).await;
    ack_all(&mut s, &p[..2]).await;
    ack_all(&mut s, &p[3..4]).await;
    s.close(false).await.unwrap();
    assert_eq!(s.remaining().await, Some(3));
    drop(s);
    let mut s = FileSource::open(&config(&i.dir), false).await.unwrap();
    assert_eq!(pull_all(&mut s).await.len(), 3, "what the next run read");
}

/// Waited for: the rotated file is finished after its quiet wait while the new one was
/// read all along.
#[tokio::test(start_paused = true)]
async fn a_rotated_file_still_finishes_after_its_quiet_wait() {
    let i = input(&lines("a", 1..=1));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    assert_eq!(pull_all(&mut s).await.len(), 1);
    append(&i.path, "{\"id\":\"a2\"}");
    std::fs::rename(&i.path, i.dir.join("in.ndjson.1")).unwrap();
    append(&i.path, &lines("b", 1..=1));
    assert_eq!(ids(&pull_all(&mut s).await), ["b1"]);
    tokio::time::advance(WAIT).await;
    assert_eq!(ids(&pull_all(&mut s).await), ["a2"]);
}

/// A tick that pulls nothing (a Retry-After pause) still looks at the files: lines
/// appended then and cut before any pull are counted lost, not left unknown.
#[tokio::test(start_paused = true)]
async fn a_tick_without_a_pull_still_looks_at_the_files() {
    let i = input(&lines("a", 1..=2));
    let mut s = FileSource::open(&config(&i.dir), true).await.unwrap();
    assert_eq!(pull_all(&mut s).await.len(), 2);
    let late = lines("a", 3..=3);
    append(&i.path, &late);
    assert!(!s.watch().await.unwrap());
    std::fs::write(&i.path, lines("b", 1..=1)).unwrap();
    assert_eq!(ids(&pull_all(&mut s).await), ["b1"]);
    assert_eq!(s.lost_bytes, late.len() as u64);
}
