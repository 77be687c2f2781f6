//! Round-2 review F3 (issue 17): after `flush`, the memory of removed
//! entries goes back to the allocator — `LatchTree`'s node shells kept for
//! reuse, and both front-ends' limbo queues, which used to keep their peak
//! capacity forever. A counting global allocator measures live bytes.
//!
//! One `#[test]` on purpose: the allocator's count is process-wide.

use latchtree::{AddrIndex, LatchTree};
#[path = "common/live_bytes.rs"]
mod live_bytes;
use live_bytes::live;

#[test]
fn flush_returns_the_memory_of_removed_entries() {
    let n: u64 = if cfg!(miri) { 200 } else { 20_000 };
    // Warm up the epoch's thread-local state, which stays.
    latchtree::pin().flush();

    // Large values, so that the node shells the tree keeps for reuse (160,
    // about 90 KiB) weigh against what stays.
    let tree: LatchTree<u64, [u64; 64]> = LatchTree::new();
    let before = live();
    for k in 0..n {
        tree.insert(k, [k; 64]);
    }
    let full = live() - before;
    tree.clear();
    tree.flush();
    let left = live() - before;
    eprintln!("LatchTree: {full} bytes for {n} entries, {left} after clear + flush");
    // What stays: the (empty) tree's own allocations, a small limbo queue
    // and the epoch's bags in flight (a few KiB); not the entries' nodes
    // (before the fix: 64 shells, ~36 KiB, and the queue at its peak of n
    // slots, 320 KiB).
    assert!(left < 16 << 10, "{left} bytes kept after clear + flush");

    let index: AddrIndex<u64> = AddrIndex::new();
    let fill_and_empty = || {
        let ids: Vec<_> = (0..n)
            .map(|k| index.insert(k * 16..k * 16 + 8, k).unwrap())
            .collect();
        let full = live() - before;
        index.write(|b| ids.iter().for_each(|&id| drop(b.remove(id))));
        drop(ids);
        index.flush();
        (full, live() - before)
    };
    let (full, kept) = fill_and_empty();
    let (_, kept_again) = fill_and_empty();
    eprintln!(
        "AddrIndex: {full} bytes with {n} modules, {kept} after removing all and flushing, {kept_again} after a second round"
    );
    // What stays: the index's slab of range nodes (type-stable: reused, freed
    // with the index) and its empty tables. Not the records and values
    // (at least 80 bytes each), and not the limbo's peak queue: a second
    // round, which reuses the slab, keeps no more.
    assert!(
        full - kept >= 80 * n as isize,
        "records or values kept: {} bytes freed",
        full - kept
    );
    assert!(
        kept_again <= kept + (16 << 10),
        "{kept_again} bytes kept after a second round, {kept} after the first"
    );
}
