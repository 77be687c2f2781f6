//! Review 9, findings 1 and 4: the module table's arrays.
//!
//! 1. `Table::grow` rebuilt a `Box` around the array it replaced (to chain
//!    it from the new one) while readers could still be reading that array:
//!    a data race under Stacked Borrows (the retag is a write). Replaced
//!    arrays are now never touched again by the writer and are retired
//!    through the epoch after the lock.
//! 2. Arrays were never freed or shrunk while the index lived: a table that
//!    once held many modules kept its peak capacity (twice, for the chain)
//!    forever. A compaction that leaves the array mostly empty now moves the
//!    live slots into a smaller one; `check_invariants` bounds the capacity.
//!
//! Run under Miri with `-Zmiri-tree-borrows` (a retired array freed while a
//! pinned reader may still read it is a use-after-free there too).
//! `table_growth_vs_unpinned_table_reader` once ran under the default
//! Stacked Borrows, which flags finding 1's retag as a write; since the
//! index reclaims through the writer-side limbo, its writer pins
//! crossbeam's epoch after the lock to retire each replaced array, and
//! crossbeam-epoch 0.9.21 itself trips Stacked Borrows (`internal.rs`), so
//! it runs under Tree Borrows like the others. Finding 1's fix stays
//! structural: `Table::grow` never touches a replaced array again.
//!
//! `table_shrinks_after_mass_removal` found, under Miri (Tree Borrows, seed
//! 1), crossbeam-epoch 0.9.21's own race: on its `cfg(miri)` and non-x86
//! path, `pin` publishes the pin with a `Relaxed` store, which ends the
//! release sequence of the previous unpin, so an epoch advance could free
//! garbage a reader read under its previous guard. The index's `pin` now
//! fences `Release` first (`latchtree::pin`), and these readers pin through it.

use latchtree::AddrIndex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Modules inserted by the growth tests: 8 -> 16 -> 32 slots.
const GROWTH: u64 = 20;

/// A pinned reader on the module table while the writer grows it.
#[test]
fn table_growth_vs_pinned_reader() {
    let index: Arc<AddrIndex<u64>> = Arc::new(AddrIndex::new());
    let first = index.insert(0..1, 0).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let r = {
        let (index, stop) = (Arc::clone(&index), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut seen = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let g = index.pin();
                assert_eq!(index.get(first, &g), Some(&0), "the first module is stable");
                seen += index.modules(&g).count() as u64;
            }
            seen
        })
    };
    for i in 1..GROWTH {
        index.insert(i * 16..i * 16 + 8, i).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    r.join().unwrap();
    index.check_invariants().unwrap();
}

/// The same race with no crossbeam on any path: the reader is
/// `check_invariants` (which reads the tables through the same
/// `Table::slots`), the writer only inserts. (The writer pins after the
/// lock to retire each replaced array; `check_invariants` now runs under the
/// lock, so this is also finding 2's fix at work.)
#[test]
fn table_growth_vs_unpinned_table_reader() {
    let index: Arc<AddrIndex<u64>> = Arc::new(AddrIndex::new());
    index.insert(0..1, 0).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let r = {
        let (index, stop) = (Arc::clone(&index), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                index.check_invariants().unwrap();
            }
        })
    };
    for i in 1..GROWTH {
        index.insert(i * 16..i * 16 + 8, i).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    r.join().unwrap();
}

/// Mass removal shrinks the table (the invariant checker bounds the
/// capacity by the used slots), while a pinned reader walks the tables
/// that are being replaced and retired.
#[test]
fn table_shrinks_after_mass_removal() {
    let n: u64 = if cfg!(miri) { 70 } else { 1000 };
    let keep = 3;
    let index: Arc<AddrIndex<u64>> = Arc::new(AddrIndex::new());
    let ids: Vec<_> = (0..n)
        .map(|i| index.insert(i * 16..i * 16 + 8, i).unwrap())
        .collect();
    index.check_invariants().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let r = {
        let (index, stop, last) = (Arc::clone(&index), Arc::clone(&stop), ids[ids.len() - 1]);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let g = index.pin();
                assert_eq!(
                    index.get(last, &g),
                    Some(&(n - 1)),
                    "a kept module is stable"
                );
                assert!(index.modules(&g).count() as u64 >= keep);
            }
        })
    };
    for &id in &ids[..ids.len() - keep as usize] {
        index.remove(id).unwrap();
        if cfg!(miri) {
            index.check_invariants().unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    r.join().unwrap();
    index.check_invariants().unwrap();
    assert_eq!(index.module_count() as u64, keep);
    // And it grows again.
    for i in n..n + 40 {
        index.insert(i * 16..i * 16 + 8, i).unwrap();
    }
    index.check_invariants().unwrap();
}
