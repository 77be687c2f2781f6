//! Review 9, finding 2: `check_invariants` (safe, `pub`, doc-hidden) held
//! the writer lock only for the tree's own checks, then read the module
//! tables and dereferenced records with no lock and no guard: a
//! use-after-free racing a `remove` (Miri, Tree Borrows), and `Table::dump`
//! sliced the slots by an unclamped length (a panic when it read a length
//! of one version and the array of another). It now runs whole under the
//! writer lock, and `dump` clamps like every other reader.
//!
//! Run under Miri: `-Zmiri-tree-borrows -Zmiri-disable-isolation
//! -Zmiri-ignore-leaks -Zmiri-many-seeds=0..8`.

use latchtree::AddrIndex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[test]
fn check_invariants_vs_remove() {
    // Debug builds: a quarter of the rounds (the checker holds the writer
    // lock for long there, and the writer waits for it: 28 s for 200).
    let rounds: u64 = if cfg!(miri) {
        1
    } else if cfg!(debug_assertions) {
        50
    } else {
        200
    };
    let index: Arc<AddrIndex<u64>> = Arc::new(AddrIndex::new());
    let stop = Arc::new(AtomicBool::new(false));
    let c = {
        let (index, stop) = (Arc::clone(&index), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                index.check_invariants().unwrap();
            }
        })
    };
    // The reviewer's reproducer: one module in, one out (10 times under
    // Miri, where each write waits for a check of a second or more).
    for i in 0..if cfg!(miri) { 10 } else { 20 } {
        let id = index.insert(0..8, i).unwrap();
        drop(index.remove(id));
    }
    // Then growth and compaction too: 17 live slots, then tombstones.
    for i in 0..rounds {
        let ids: Vec<_> = (0..17)
            .map(|j| index.insert(j * 16..j * 16 + 8, i).unwrap())
            .collect();
        for id in ids {
            drop(index.remove(id));
        }
    }
    stop.store(true, Ordering::Relaxed);
    c.join().unwrap();
    index.check_invariants().unwrap();
}
