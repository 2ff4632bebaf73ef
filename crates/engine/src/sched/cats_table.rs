//! The Geist-Ross table: the order of pending reads that minimises the sum of their
//! completion times (so mean response time) when serving a request costs
//! X = R/2 + S * d / D for a seek of d sectors, found by dynamic programming in O(N^2).
//!
//! The table is over intervals of the sector-sorted requests around the head: having
//! served the `i` nearest below and the `j` nearest above, the head is at one end of
//! that interval, and the next request is the next one out on either side. While m
//! requests remain, every move's cost delays all m, so a move costs m * X. With R = 0
//! (cost = distance, as in the paper's Table 1) this is the exact optimum over all
//! orders; with R > 0 the constant R/2 per request adds the same total to every order,
//! and the table stays optimal among orders that never pass a request by.

/// Positions (sectors) of the pending reads, in the order to serve them: indices into
/// `positions`. `seek_ns_per_sector` is S / D; `half_rotation_ns` is R / 2.
pub(super) fn optimal_order(
    head: u64,
    positions: &[u64],
    half_rotation_ns: f64,
    seek_ns_per_sector: f64,
) -> Vec<usize> {
    let n = positions.len();
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by_key(|&i| (positions[i], i));
    let split = idx.partition_point(|&i| positions[i] <= head);
    // Nearest first on each side.
    let left: Vec<usize> = idx[..split].iter().rev().copied().collect();
    let right: Vec<usize> = idx[split..].to_vec();
    let (nl, nr) = (left.len(), right.len());
    let pos_at = |i: usize, j: usize, side: usize| -> u64 {
        match (side, i, j) {
            (0, 0, _) | (1, _, 0) => head,
            (0, i, _) => positions[left[i - 1]],
            (_, _, j) => positions[right[j - 1]],
        }
    };
    let cell = |i: usize, j: usize, side: usize| (i * (nr + 1) + j) * 2 + side;
    let mut cost = vec![0.0f64; (nl + 1) * (nr + 1) * 2];
    // The move from each state: true = next on the left.
    let mut go_left = vec![false; cost.len()];
    for served in (0..n).rev() {
        let m = (n - served) as f64;
        for i in served.saturating_sub(nr)..=served.min(nl) {
            let j = served - i;
            for side in 0..2 {
                let at = pos_at(i, j, side);
                let step =
                    |to: u64| m * (half_rotation_ns + seek_ns_per_sector * at.abs_diff(to) as f64);
                let l = (i < nl).then(|| step(positions[left[i]]) + cost[cell(i + 1, j, 0)]);
                let r = (j < nr).then(|| step(positions[right[j]]) + cost[cell(i, j + 1, 1)]);
                let c = cell(i, j, side);
                (cost[c], go_left[c]) = match (l, r) {
                    (Some(l), Some(r)) if l <= r => (l, true),
                    (Some(l), None) => (l, true),
                    (_, Some(r)) => (r, false),
                    (None, None) => (0.0, false),
                };
            }
        }
    }
    let (mut i, mut j, mut side) = (0, 0, 0);
    let mut order = Vec::with_capacity(n);
    while i + j < n {
        if go_left[cell(i, j, side)] {
            order.push(left[i]);
            (i, side) = (i + 1, 0);
        } else {
            order.push(right[j]);
            (j, side) = (j + 1, 1);
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sum of completion times of serving `order` from `head` at cost = distance.
    fn total_response(head: u64, order: &[u64]) -> u64 {
        let (mut at, mut t, mut sum) = (head, 0, 0);
        for &p in order {
            t += at.abs_diff(p);
            sum += t;
            at = p;
        }
        sum
    }

    #[test]
    fn the_papers_table_1() {
        let reqs = [20u64, 82, 120, 200];
        let order: Vec<u64> = optimal_order(100, &reqs, 0.0, 1.0)
            .into_iter()
            .map(|i| reqs[i])
            .collect();
        assert_eq!(order, vec![120, 82, 20, 200]);
        // Mean response 124.5 for the optimum vs 131.5 for greedy (82, 120, 200, 20).
        assert_eq!(total_response(100, &order), 498);
        assert_eq!(total_response(100, &[82, 120, 200, 20]), 526);
    }

    fn permutations(v: &[u64]) -> Vec<Vec<u64>> {
        if v.len() <= 1 {
            return vec![v.to_vec()];
        }
        let mut out = Vec::new();
        for k in 0..v.len() {
            let mut rest = v.to_vec();
            let x = rest.remove(k);
            for mut p in permutations(&rest) {
                p.insert(0, x);
                out.push(p);
            }
        }
        out
    }

    #[test]
    fn matches_brute_force_over_every_order() {
        let mut x: u64 = 12345;
        for _ in 0..200 {
            let n = 1 + (x % 7) as usize;
            let reqs: Vec<u64> = (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 33) % 1000
                })
                .collect();
            let head = (x >> 20) % 1000;
            let order: Vec<u64> = optimal_order(head, &reqs, 0.0, 1.0)
                .into_iter()
                .map(|i| reqs[i])
                .collect();
            let best = permutations(&reqs)
                .iter()
                .map(|p| total_response(head, p))
                .min()
                .expect("some order");
            assert_eq!(
                total_response(head, &order),
                best,
                "head {head} reqs {reqs:?}"
            );
        }
    }
}
