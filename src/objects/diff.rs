//! The difference between what the index holds and what a scan found.

use std::collections::HashMap;
use std::hash::Hash;

/// What changed between two sets of objects.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Diff<Id> {
    /// Positions, in the scan, of the objects that are new (scan order).
    pub(crate) added: Vec<usize>,
    /// The known objects the scan no longer shows (sorted).
    pub(crate) removed: Vec<Id>,
    /// How many known objects the scan still shows.
    pub(crate) unchanged: usize,
}

/// Matches the objects a scan found (`current`, by key) against the known
/// ones (`known`, by key and id). Keys that appear several times match one
/// for one; whatever is left over is added (in `current`) or removed (in
/// `known`).
pub(crate) fn diff<K, Id>(
    known: impl IntoIterator<Item = (K, Id)>,
    current: impl IntoIterator<Item = K>,
) -> Diff<Id>
where
    K: Hash + Eq,
    Id: Ord,
{
    let mut unmatched: HashMap<K, Vec<Id>> = HashMap::new();
    for (key, id) in known {
        unmatched.entry(key).or_default().push(id);
    }
    let mut added = Vec::new();
    let mut unchanged = 0;
    for (i, key) in current.into_iter().enumerate() {
        match unmatched.get_mut(&key).and_then(Vec::pop) {
            Some(_) => unchanged += 1,
            None => added.push(i),
        }
    }
    let mut removed: Vec<Id> = unmatched.into_values().flatten().collect();
    removed.sort_unstable();
    Diff {
        added,
        removed,
        unchanged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_changed() {
        let d = diff([("a", 1), ("b", 2)], ["b", "a"]);
        assert_eq!(
            d,
            Diff {
                added: vec![],
                removed: vec![],
                unchanged: 2
            }
        );
    }

    #[test]
    fn added_and_removed() {
        let d = diff(
            [("libc", 1), ("libz", 2), ("libm", 3)],
            ["libc", "libssl", "libm", "libcrypto"],
        );
        assert_eq!(
            d,
            Diff {
                added: vec![1, 3],
                removed: vec![2],
                unchanged: 2
            }
        );
    }

    #[test]
    fn from_nothing_and_to_nothing() {
        let d = diff::<&str, u32>([], ["a", "b"]);
        assert_eq!((d.added, d.removed, d.unchanged), (vec![0, 1], vec![], 0));
        let d = diff([("a", 5), ("b", 4)], []);
        assert_eq!((d.added, d.removed, d.unchanged), (vec![], vec![4, 5], 0));
    }

    #[test]
    fn duplicate_keys_match_one_for_one() {
        let d = diff([("x", 1), ("x", 2)], ["x"]);
        assert_eq!((d.added, d.removed.len(), d.unchanged), (vec![], 1, 1));
        let d = diff([("x", 1)], ["x", "x"]);
        assert_eq!((d.added, d.removed, d.unchanged), (vec![1], vec![], 1));
    }
}
