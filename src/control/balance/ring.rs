//! Deterministic aperture's ring (Finagle's idea): the `count` workers and the endpoints
//! are each laid on a unit ring in equal slices, endpoints in an order every worker agrees
//! on. Worker `index` covers an arc that starts at its own slice and is a whole number of
//! worker slices wide — the fewest that hold `aperture` endpoint slices. Workers with the
//! same aperture then cover every point of the ring equally often, so every endpoint gets
//! the same share of the fleet's traffic, and two workers' subsets overlap only where the
//! slices do not line up. An endpoint cut by the arc's edge is in the subset with the share
//! of its slice that lies inside (its weight).
//!
//! Positions are counted in units of 1/(workers × endpoints), so that every slice edge is
//! a whole number and no share is lost to rounding.

/// This worker's place among its peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coordinate {
    pub index: u32,
    pub count: u32,
}

/// How many worker slices wide the arc is: the fewest that cover `aperture` endpoint
/// slices, at least one and at most the whole ring.
pub fn worker_slices(coord: Coordinate, endpoints: usize, aperture: usize) -> u64 {
    let (n, m) = (u64::from(coord.count.max(1)), endpoints.max(1) as u64);
    (aperture as u64 * n).div_ceil(m).clamp(1, n)
}

/// The endpoints (positions in the agreed order) the arc of `coord` touches, each with
/// the share of its slice inside the arc, in (0, 1].
pub fn arc(coord: Coordinate, endpoints: usize, aperture: usize) -> Vec<(usize, f64)> {
    if endpoints == 0 {
        return Vec::new();
    }
    let (n, m) = (u64::from(coord.count.max(1)), endpoints as u64);
    let ring = n * m;
    let start = u64::from(coord.index) % n * m;
    let width = worker_slices(coord, endpoints, aperture) * m;
    (0..endpoints)
        .filter_map(|j| {
            let (lo, hi) = (j as u64 * n, (j as u64 + 1) * n);
            // The arc may wrap past the ring's end: count it as two straight pieces.
            let first = overlap(lo, hi, start, (start + width).min(ring));
            let wrapped = overlap(lo, hi, 0, (start + width).saturating_sub(ring));
            let inside = first + wrapped;
            (inside > 0).then(|| (j, inside as f64 / n as f64))
        })
        .collect()
}

fn overlap(lo: u64, hi: u64, a: u64, b: u64) -> u64 {
    hi.min(b).saturating_sub(lo.max(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coord(index: u32, count: u32) -> Coordinate {
        Coordinate { index, count }
    }

    #[test]
    fn six_workers_over_thirty_endpoints_cover_each_endpoint_once() {
        let mut covered = [0.0; 30];
        for i in 0..6 {
            let arc = arc(coord(i, 6), 30, 1);
            assert_eq!(arc.len(), 5, "worker {i}: {arc:?}");
            for (j, w) in arc {
                assert_eq!(w, 1.0);
                covered[j] += w;
            }
        }
        assert_eq!(covered, [1.0; 30]);
    }

    #[test]
    fn every_endpoint_is_covered_equally_whatever_the_shapes() {
        // Workers with one aperture cover the ring uniformly: the weights over all
        // workers add up to the same for every endpoint, slices lined up or not.
        for (workers, endpoints) in [(6, 30), (4, 10), (7, 3), (3, 7), (50, 24), (1, 5)] {
            for aperture in 1..=endpoints {
                let mut covered = vec![0.0; endpoints];
                for i in 0..workers {
                    for (j, w) in arc(coord(i, workers), endpoints, aperture) {
                        covered[j] += w;
                    }
                }
                // Every point lies in the arcs of as many workers as an arc has slices.
                let each = worker_slices(coord(0, workers), endpoints, aperture) as f64;
                for c in &covered {
                    assert!(
                        (c - each).abs() < 1e-9,
                        "{workers}×{endpoints} at {aperture}: {covered:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_arc_is_the_fewest_worker_slices_holding_the_aperture() {
        // 4 workers, 10 endpoints: a worker slice is 2.5 endpoints.
        let a = arc(coord(1, 4), 10, 2);
        assert_eq!(a, vec![(2, 0.5), (3, 1.0), (4, 1.0)]);
        // Aperture 3 needs two worker slices (5 endpoints), wrapping for the last worker.
        let a = arc(coord(3, 4), 10, 3);
        assert_eq!(
            a,
            vec![(0, 1.0), (1, 1.0), (2, 0.5), (7, 0.5), (8, 1.0), (9, 1.0)]
        );
        // The whole ring at most.
        assert_eq!(arc(coord(0, 4), 10, 40).len(), 10);
        assert!(arc(coord(0, 4), 0, 3).is_empty());
    }
}
