//! The difference between what the index holds and what a scan found.
//!
//! Every refresh that rescans runs it over every loaded object: a hash map
//! with a multiply-rotate hasher (the keys are the loader's objects, not
//! an adversary's), one entry a key, no allocation a key.

use core::hash::{BuildHasherDefault, Hash, Hasher};
use std::collections::HashMap;
use std::collections::hash_map::Entry;

/// What changed between two sets of objects.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Diff<Id> {
    /// Positions, in the scan, of the objects that are new (scan order).
    pub(crate) added: Vec<usize>,
    /// The known objects the scan no longer shows (sorted).
    pub(crate) removed: Vec<Id>,
}

/// A fast hasher for a few words (FxHash's step).
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_ne_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
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
    K: Hash + Eq + Copy,
    Id: Ord,
{
    let known = known.into_iter();
    // One id a key; the rare second sighting of a key waits in `more`.
    let mut first: HashMap<K, Id, BuildHasherDefault<Fx>> =
        HashMap::with_capacity_and_hasher(known.size_hint().0, Default::default());
    let mut more: Vec<(K, Id)> = Vec::new();
    for (key, id) in known {
        match first.entry(key) {
            Entry::Occupied(_) => more.push((key, id)),
            Entry::Vacant(v) => {
                v.insert(id);
            }
        }
    }
    let mut added = Vec::new();
    for (i, key) in current.into_iter().enumerate() {
        if first.remove(&key).is_none() {
            added.push(i);
        } else if let Some(j) = more.iter().position(|(k, _)| *k == key) {
            let (k, id) = more.swap_remove(j);
            first.insert(k, id);
        }
    }
    let mut removed: Vec<Id> = (first.into_values())
        .chain(more.into_iter().map(|(_, id)| id))
        .collect();
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
