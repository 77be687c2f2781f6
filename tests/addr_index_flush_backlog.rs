//! Review 9, finding 3: prompt reclamation with a backlog. crossbeam-epoch
//! frees queued garbage in order, at most 8 sealed bags per collection;
//! `flush` ran a fixed 4 rounds, so once a guard held elsewhere had let more
//! than ~32 removes pile up, neither the first `flush` after that guard was
//! dropped nor the next `remove` (with no guard held anywhere) reached the
//! newest values. `flush` now keeps going while rounds drop retired records.
//!
//! What is guaranteed (the docs on `AddrIndex`, "When a removed value is
//! dropped") and tested here:
//! * after a backlog of this index's own removed values (queued while a
//!   guard was held), the first `flush` once no guard is held drops all of
//!   them, and so does the first removing write, which also drops its own;
//! * with a little of other crossbeam-epoch users' garbage queued ahead (up
//!   to 8 bags), a `remove` with no guard held anywhere still drops its
//!   value before it returns;
//! * with more of it, a value is dropped at a later `flush`: each one works
//!   through at least 16 queued bags.
//!
//! One `#[test]` on purpose: the epoch is process-wide, and a guard held by
//! a test running in parallel would (correctly) delay reclamation.

use latchtree::AddrIndex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};

static ALIVE: AtomicUsize = AtomicUsize::new(0);

struct Counted;

impl Counted {
    fn new() -> Self {
        ALIVE.fetch_add(1, Ordering::SeqCst);
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        ALIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

fn alive() -> usize {
    ALIVE.load(Ordering::SeqCst)
}

/// Runs `f` while another thread holds a guard, then drops that guard.
fn with_guard_held_elsewhere(f: impl FnOnce()) {
    let (pinned_tx, pinned_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        let g = latchtree::pin();
        pinned_tx.send(()).unwrap();
        release_rx.recv().unwrap();
        drop(g);
    });
    pinned_rx.recv().unwrap();
    f();
    release_tx.send(()).unwrap();
    t.join().unwrap();
}

/// Queues `bags` sealed bags of someone else's garbage (a plain
/// crossbeam-epoch user's), each with one deferred function.
fn foreign_garbage(bags: usize) {
    for _ in 0..bags {
        let g = latchtree::pin();
        g.defer(|| ());
        g.flush();
    }
}

/// `n` modules removed one by one while a guard is held elsewhere: `n`
/// sealed bags of this index's garbage.
fn own_backlog(index: &AddrIndex<Counted>, n: u64) {
    let ids: Vec<_> = (0..n)
        .map(|i| index.insert(i * 16..i * 16 + 8, Counted::new()).unwrap())
        .collect();
    let before = alive();
    with_guard_held_elsewhere(|| {
        for id in ids {
            drop(index.remove(id));
        }
        assert_eq!(alive(), before, "the guard keeps them");
    });
}

#[test]
fn flush_backlog() {
    let n: u64 = if cfg!(miri) { 48 } else { 100 };
    let index: Arc<AddrIndex<Counted>> = Arc::new(AddrIndex::new());

    // The reviewer's first reproducer: the first flush after the guard is
    // dropped frees every removed value.
    own_backlog(&index, n);
    index.flush();
    assert_eq!(alive(), 0, "values still alive after the first flush");

    // The first removing write after the guard is dropped: its own value
    // and the whole backlog.
    own_backlog(&index, n);
    let id = index.insert(0..8, Counted::new()).unwrap();
    drop(index.remove(id));
    assert_eq!(alive(), 0, "values still alive after the first remove");

    // A little foreign garbage queued ahead: still before `remove` returns.
    with_guard_held_elsewhere(|| foreign_garbage(8));
    let id = index.insert(0..8, Counted::new()).unwrap();
    drop(index.remove(id));
    assert_eq!(
        alive(),
        0,
        "removed value still alive after `remove` returned with no guard held anywhere"
    );

    // The reviewer's second reproducer: much foreign garbage queued ahead
    // (not guaranteed to be reached by `remove`), then a value is dropped
    // within the documented number of flushes.
    let bags = n as usize;
    with_guard_held_elsewhere(|| foreign_garbage(bags));
    let id = index.insert(0..8, Counted::new()).unwrap();
    drop(index.remove(id));
    let flushes = (1..=bags.div_ceil(16) + 1)
        .find(|_| {
            index.flush();
            alive() == 0
        })
        .expect("removed value still alive after the documented flushes");
    eprintln!("{bags} foreign bags ahead: dropped after {flushes} flush(es)");
}
