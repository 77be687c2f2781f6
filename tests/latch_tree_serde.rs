//! The optional `serde` feature: `cargo test --features serde --test latch_tree_serde`.

#![cfg(feature = "serde")]

use latchtree::LatchTree;

#[test]
fn serde_round_trip_is_a_map_and_loads_in_one_write() {
    let tree: LatchTree<u32, String> = (0..100).rev().map(|k| (k, format!("v{k}"))).collect();
    let json = serde_json::to_string(&tree).unwrap();
    assert!(json.starts_with(r#"{"0":"v0","1":"v1","#), "{json}");
    let back: LatchTree<u32, String> = serde_json::from_str(&json).unwrap();
    assert!(back == tree);
    assert_eq!(back.stats().writes, 1, "deserialized by one bulk load");
    back.check_invariants().unwrap();
    // Equal keys: the last wins, as for `BTreeMap`.
    let dup: LatchTree<u32, u32> = serde_json::from_str(r#"{"2":1,"1":5,"2":3}"#).unwrap();
    assert_eq!(dup.to_vec(), vec![(1, 5), (2, 3)]);
    // Not a map: a typed error, no panic.
    assert!(serde_json::from_str::<LatchTree<u32, u32>>("[1, 2]").is_err());
    let empty: LatchTree<u32, u32> = serde_json::from_str("{}").unwrap();
    assert!(empty.is_empty());
}
