//! Kept counts against a recount of the rows they count: what a domain's `audit_counts`
//! reports (the counts themselves are kept by statements in the ops, not by triggers; see the
//! last section of `schema.sql`).

use std::collections::BTreeMap;

/// Where `kept` (a count table's rows) and `counted` (a `GROUP BY` over the counted rows)
/// differ, one line per key, in key order: `"{key}: kept {k}, counted {c}"` (a missing row
/// is 0). Empty when they agree.
pub(crate) fn differences(kept: Vec<(String, u64)>, counted: Vec<(String, u64)>) -> Vec<String> {
    let mut both: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (key, total) in kept {
        both.entry(key).or_default().0 += total;
    }
    for (key, total) in counted {
        both.entry(key).or_default().1 += total;
    }
    both.into_iter()
        .filter(|(_, (kept, counted))| kept != counted)
        .map(|(key, (kept, counted))| format!("{key}: kept {kept}, counted {counted}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
        pairs.iter().map(|(key, total)| ((*key).to_owned(), *total)).collect()
    }

    #[test]
    fn agreeing_counts_have_no_difference() {
        let same = rows(&[("a", 1), ("b", 2)]);
        assert!(differences(same.clone(), same).is_empty());
    }

    #[test]
    fn each_difference_is_named_with_both_sides() {
        let kept = rows(&[("a", 1), ("b", 2)]);
        let counted = rows(&[("b", 3), ("c", 4), ("a", 1)]);
        assert_eq!(differences(kept, counted), ["b: kept 2, counted 3", "c: kept 0, counted 4"]);
    }
}
