//! `Serialize` and `Deserialize` for [`LatchTree`] (feature `serde`): a tree
//! is a map; it is serialized from one version ([`LatchTree::snapshot`]) and
//! deserialized through the O(n) bulk loader (for equal keys the last wins,
//! as with `BTreeMap`).

use super::LatchTree;
use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, Serializer};

impl<K: Ord + Serialize, V: Serialize> Serialize for LatchTree<K, V> {
    /// ```
    /// let tree: latchtree::LatchTree<_, _> = [(1, "a")].into_iter().collect();
    /// assert_eq!(serde_json::to_string(&tree).unwrap(), r#"{"1":"a"}"#);
    /// ```
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let guard = self.pin();
        serializer.collect_map(self.snapshot(&guard))
    }
}

impl<'de, K, V> Deserialize<'de> for LatchTree<K, V>
where
    K: Ord + Send + 'static + Deserialize<'de>,
    V: Send + 'static + Deserialize<'de>,
{
    /// ```
    /// let tree: latchtree::LatchTree<u32, String> = serde_json::from_str(r#"{"2":"b","1":"a"}"#).unwrap();
    /// assert_eq!(tree.to_vec(), vec![(1, "a".to_string()), (2, "b".to_string())]);
    /// ```
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MapVisitor(PhantomData))
    }
}

/// Collects a map's entries, then bulk-loads them.
struct MapVisitor<K, V>(PhantomData<fn() -> (K, V)>);

impl<'de, K, V> Visitor<'de> for MapVisitor<K, V>
where
    K: Ord + Send + 'static + Deserialize<'de>,
    V: Send + 'static + Deserialize<'de>,
{
    type Value = LatchTree<K, V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(entries.into_iter().collect())
    }
}
