//! The assignment's bookkeeping through rebalances, acks, commits and ends.

use super::*;

const QUIET: Duration = Duration::from_millis(500);

fn held(partitions: &[i32]) -> (Assignment, Instant) {
    let t0 = Instant::now();
    let mut a = Assignment::new(t0);
    a.assign(partitions, t0);
    (a, t0)
}

#[test]
fn commits_only_below_the_first_unsettled_record() {
    let (mut a, _) = held(&[0, 1]);
    for offset in 100..105 {
        assert!(a.admit(0, offset));
    }
    assert!(
        !a.ack(0, 101),
        "nothing settled moves past the unwritten 100"
    );
    assert!(!a.ack(0, 102));
    assert_eq!(a.due(), Vec::new());
    assert!(a.ack(0, 100));
    assert_eq!(a.due(), vec![(0, 103)]);
    a.stored(&[(0, 103)]);
    assert_eq!(a.due(), Vec::new());
    assert!(!a.admit(7, 1), "partition 7 is not ours");
}

#[test]
fn stale_acks_after_a_rebalance_change_nothing() {
    let (mut a, t0) = held(&[0]);
    for offset in 10..13 {
        a.admit(0, offset);
    }
    a.ack(0, 10);
    assert_eq!(a.revoke(&[0], t0), vec![(0, 11)]);
    a.assign(&[0], t0);
    // Refetched from the store: 11 and 12 again.
    a.admit(0, 11);
    a.admit(0, 12);
    // The old delivery of 10 acks again: below the watermark, ignored; it must not
    // mark the unwritten 11 as settled.
    assert!(!a.ack(0, 10));
    assert_eq!(a.due(), Vec::new());
    assert!(a.ack(0, 11));
    assert_eq!(a.due(), vec![(0, 12)]);
}

#[test]
fn records_fetched_before_a_reassignment_are_not_handed_out() {
    let (mut a, t0) = held(&[0, 1]);
    let before = a.epoch();
    a.admit(0, 5);
    a.admit(1, 5);
    // An incremental rebalance takes partition 1 away and gives it back.
    a.revoke(&[1], t0);
    a.assign(&[1], t0);
    assert!(a.held_since(0, before));
    assert!(!a.held_since(1, before));
    assert!(a.held_since(1, a.epoch()));
}

#[test]
fn revoked_partitions_stop_counting_and_no_assignment_is_not_empty() {
    let (mut a, t0) = held(&[0]);
    let later = t0 + Duration::from_secs(5);
    a.reached_end(0);
    assert!(a.caught_up(later, QUIET));
    assert_eq!(a.revoke(&[0], later), Vec::new());
    assert!(!a.caught_up(later + QUIET, QUIET));
    assert_eq!(
        a.unassigned_for(later + Duration::from_secs(2)),
        Some(Duration::from_secs(2))
    );
    a.assign(&[], later);
    assert!(
        a.caught_up(later + QUIET, QUIET),
        "an empty assignment is empty"
    );
}

#[test]
fn caught_up_needs_every_end_no_unsettled_record_and_quiet() {
    let (mut a, t0) = held(&[0, 1]);
    a.admit(0, 0);
    a.reached_end(0);
    a.reached_end(1);
    let later = t0 + Duration::from_secs(1);
    assert!(!a.caught_up(later, QUIET), "offset 0 is in flight");
    a.ack(0, 0);
    assert!(a.caught_up(later, QUIET));
    assert!(
        !a.caught_up(t0 + Duration::from_millis(100), QUIET),
        "not quiet yet"
    );
    a.admit(1, 5);
    assert!(
        !a.caught_up(later + QUIET, QUIET),
        "partition 1 got a record after its end"
    );
}

#[test]
fn backlog_sums_high_minus_committed() {
    let (mut a, _) = held(&[0, 1]);
    assert_eq!(a.backlog(), None);
    a.reported(0, 100, 0, 40);
    a.reported(1, 50, -1001, -1001);
    assert_eq!(a.backlog(), None, "partition 1 start unknown");
    a.reported(1, 50, 5, -1001);
    assert_eq!(
        a.backlog(),
        Some(60 + 45),
        "a group that never committed starts low"
    );
    a.admit(1, 20);
    a.ack(1, 20);
    assert_eq!(a.backlog(), Some(60 + 29));
    // A broker reporting a high watermark below the committed offset counts as 0.
    a.reported(0, 10, 0, 40);
    assert_eq!(a.backlog(), Some(29));
}

#[test]
fn a_bound_stops_each_partition_without_waiting_for_quiet() {
    let t0 = Instant::now();
    let mut a = Assignment::new(t0);
    a.bound_each_partition();
    a.set_bound(0, 3);
    a.restart(t0);
    a.assign(&[0, 1], t0);
    assert!(!a.wants_bound(0), "kept across a restart");
    assert!(a.wants_bound(1));
    a.set_bound(1, 10);
    assert!(a.admit(0, 1));
    assert!(a.admit(0, 2), "the last offset below the bound");
    assert!(!a.admit(0, 3), "past the bound: left for the next run");
    assert_eq!(a.to_pause(), vec![0]);
    assert_eq!(a.to_pause(), Vec::<i32>::new(), "paused once");
    assert!(!a.all_at_end(), "partition 1 is not at its bound");
    assert!(!a.admit(1, 12));
    assert!(a.all_at_end());
    assert!(!a.caught_up(t0, QUIET), "1 and 2 are in flight");
    a.ack(0, 1);
    a.ack(0, 2);
    assert!(
        a.caught_up(t0, QUIET),
        "every partition at its bound: no quiet spell"
    );
    assert_eq!(
        a.committed_offsets(),
        Some(vec![(0, Some(1)), (1, None)]),
        "settled is not committed: a next run resumes where this one started"
    );
    assert_eq!(
        a.settled_offsets(),
        vec![(0, 3)],
        "what the final commit writes"
    );
    a.stored(&a.settled_offsets());
    assert_eq!(a.committed_offsets(), Some(vec![(0, Some(3)), (1, None)]));
}

#[test]
fn partitions_without_a_bound_are_listed_for_their_first_fetch() {
    let (mut a, _) = held(&[0, 1, 2]);
    assert!(a.unbounded().is_empty(), "a run without bounds wants none");
    a.bound_each_partition();
    a.set_bound(1, 7);
    assert_eq!(a.unbounded(), vec![0, 2]);
}

#[test]
fn a_partition_at_its_end_below_the_bound_still_waits_for_quiet() {
    let t0 = Instant::now();
    let mut a = Assignment::new(t0);
    a.bound_each_partition();
    a.assign(&[0], t0);
    a.set_bound(0, 100);
    a.reached_end(0);
    assert!(!a.caught_up(t0, QUIET));
    assert!(a.caught_up(t0 + QUIET, QUIET));
}

#[test]
fn a_failed_async_commit_is_retried() {
    let (mut a, _) = held(&[3]);
    a.admit(3, 0);
    a.ack(3, 0);
    a.stored(&[(3, 1)]);
    assert_eq!(a.due(), Vec::new());
    a.commit_failed(&[3]);
    assert_eq!(a.due(), vec![(3, 1)]);
}
