//! Counted nouns in the CLI's output: `1 event`, `2 events`, never `1 events`.

/// `n` followed by `singular`, or by its plural (`singular` + `s`) unless `n` is 1.
pub fn count(n: u64, singular: &str) -> String {
    if n == 1 {
        format!("{n} {singular}")
    } else {
        format!("{n} {singular}s")
    }
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1, "event"), "1 event");
        assert_eq!(count(0, "event"), "0 events");
        assert_eq!(count(2, "turn"), "2 turns");
        assert_eq!(count(11, "session"), "11 sessions");
    }
}
