//! Batching of one step's tool calls (pure).
//!
//! Owns: which calls may run together. Walking the calls in model order, consecutive
//! parallel-safe calls form one batch and every other call is a batch of its own. The
//! caller runs a batch with at most [`MAX_PARALLEL`] calls at once, waits for the whole
//! batch before starting the next, and reports results in call order.

/// Result text of a call stopped by a cancel.
pub const CANCELLED: &str = "cancelled";

/// At most this many tool calls of one batch run at the same time.
pub const MAX_PARALLEL: usize = 5;

/// Groups call indices (0-based, model order) into batches to run one after another.
///
/// `parallel_safe[i]` is the declared `parallel_safe` of call `i`. The batches cover every
/// index exactly once, in increasing order.
#[must_use]
pub(crate) fn plan_batches(parallel_safe: &[bool]) -> Vec<Vec<usize>> {
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut open_parallel = false;
    for (index, &safe) in parallel_safe.iter().enumerate() {
        match batches.last_mut() {
            Some(batch) if safe && open_parallel => batch.push(index),
            _ => batches.push(vec![index]),
        }
        open_parallel = safe;
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::plan_batches;

    #[test]
    fn batches_follow_model_order() {
        let cases: &[(&[bool], Vec<Vec<usize>>)] = &[
            (&[], vec![]),
            (&[true], vec![vec![0]]),
            (&[false], vec![vec![0]]),
            (&[true, true, true], vec![vec![0, 1, 2]]),
            (&[false, false], vec![vec![0], vec![1]]),
            (
                &[true, true, false, true, true],
                vec![vec![0, 1], vec![2], vec![3, 4]],
            ),
            (&[false, true, true], vec![vec![0], vec![1, 2]]),
            (
                &[true, false, false, true],
                vec![vec![0], vec![1], vec![2], vec![3]],
            ),
            (&[true; 7], vec![vec![0, 1, 2, 3, 4, 5, 6]]),
        ];
        for (input, expected) in cases {
            assert_eq!(&plan_batches(input), expected, "input {input:?}");
        }
    }
}
