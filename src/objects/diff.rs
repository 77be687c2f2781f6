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
    for (i, key) in current.into_iter().enumerate() {
        if unmatched.get_mut(&key).and_then(Vec::pop).is_none() {
            added.push(i);
        }
    }
    let mut removed: Vec<Id> = unmatched.into_values().flatten().collect();
    removed.sort_unstable();
    Diff { added, removed }
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
                removed: vec![]
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
                removed: vec![2]
            }
        );
    }

    #[test]
    fn from_nothing_and_to_nothing() {
        let d = diff::<&str, u32>([], ["a", "b"]);
        assert_eq!((d.added, d.removed), (vec![0, 1], vec![]));
        let d = diff([("a", 5), ("b", 4)], []);
        assert_eq!((d.added, d.removed), (vec![], vec![4, 5]));
    }

    #[test]
    fn duplicate_keys_match_one_for_one() {
        let d = diff([("x", 1), ("x", 2)], ["x"]);
        assert_eq!((d.added, d.removed.len()), (vec![], 1));
        let d = diff([("x", 1)], ["x", "x"]);
        assert_eq!((d.added, d.removed), (vec![1], vec![]));
    }
}
