//! A backlog that a guard kept through a mass removal goes a bounded slice a
//! write once the guard is dropped, for both front-ends: each later write
//! drops at most 1,024 of those values (the limbo's `HAND_OUT_OLDER`; one
//! write used to drop all of them: for 196,608 records, 11-14 ms of CPU,
//! 7.9 M instructions of it under the writer lock), the writes that follow
//! drop all of them, and one `flush` drops them all at once (its rounds go
//! on past the bound: 40,000 values need more than its 32 rounds of 1,024).
//! Without `std` the epoch moves far more slowly for a writer alone (as
//! before): there the test allows more writes and flushes, and checks the
//! bound.
//!
//! One `#[test]` on purpose: the epoch is process-wide, and a guard held by
//! a test running in parallel would (correctly) delay reclamation.

use latchtree::{AddrIndex, Guard, LatchTree};
use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What one write may drop of an older backlog (the docs' figure).
const SLICE: usize = 1024;

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

/// Runs `f` while another thread holds a guard from `pin`, then drops it.
fn with_guard_held_elsewhere(pin: &(dyn Fn() -> Guard + Sync), f: impl FnOnce()) {
    let (pinned, release) = (Barrier::new(2), Barrier::new(2));
    std::thread::scope(|s| {
        s.spawn(|| {
            let guard = pin();
            pinned.wait();
            release.wait();
            drop(guard);
        });
        pinned.wait();
        f();
        release.wait();
    });
}

/// One front-end, seen as its writes: `fill` inserts `n` counted values,
/// `remove_all` removes them one write each, `churn` is one write that
/// drops no counted value of its own, `flush` is the front-end's.
struct Front<'a> {
    name: &'static str,
    pin: &'a (dyn Fn() -> Guard + Sync),
    fill: &'a dyn Fn(usize),
    remove_all: &'a dyn Fn(),
    churn: &'a dyn Fn(usize),
    flush: &'a dyn Fn(),
}

/// A backlog of `n` values a guard kept: `n` values alive after the
/// removals, the guard then dropped.
fn backlog(f: &Front<'_>, n: usize) {
    (f.fill)(n);
    with_guard_held_elsewhere(f.pin, || {
        (f.remove_all)();
        assert_eq!(alive(), n, "{}: the guard keeps them", f.name);
    });
}

fn check(f: &Front<'_>) {
    // Later writes: at most a slice each, and the bound binds (a write
    // drops a whole slice), until none is left.
    let n = 6 * SLICE;
    backlog(f, n);
    // Without `std` the epoch moves slowly under a writer alone (each pin
    // registers a participant: `guide::no_std`): some 770 writes before the
    // announcement passes, in the previous `main` too.
    let patience = if cfg!(feature = "std") { 64 } else { 4_000 };
    let (mut writes, mut largest) = (0, 0);
    while alive() > 0 {
        writes += 1;
        assert!(
            writes <= n / SLICE + patience,
            "{}: {} of {n} values alive after {writes} writes",
            f.name,
            alive()
        );
        let before = alive();
        (f.churn)(writes);
        let dropped = before - alive();
        assert!(
            dropped <= SLICE,
            "{}: write {writes} dropped {dropped} values of an older backlog",
            f.name
        );
        largest = largest.max(dropped);
    }
    assert_eq!(largest, SLICE, "{}: no write dropped a whole slice", f.name);
    eprintln!(
        "{}: a backlog of {n} gone after {writes} writes, at most {largest} a write",
        f.name
    );

    // One flush drops a backlog that needs more rounds than it counts.
    let n = 40_000;
    backlog(f, n);
    (f.flush)();
    if !cfg!(feature = "std") {
        // There a flush gives up before the announcement passes (in the
        // previous `main` too): the next ones go on.
        for _ in 0..1000 {
            if alive() == 0 {
                break;
            }
            (f.flush)();
        }
    }
    assert_eq!(alive(), 0, "{}: flush left values of {n}", f.name);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "tens of thousands of writes; the limbo's paths run under Miri in reclaim_bound"
)]
fn a_kept_backlog_goes_a_slice_a_write_and_whole_in_a_flush() {
    let index: AddrIndex<Option<Counted>> = AddrIndex::new();
    let ids = std::sync::Mutex::new(Vec::new());
    check(&Front {
        name: "AddrIndex",
        pin: &|| index.pin(),
        fill: &|n| {
            let mut ids = ids.lock().unwrap();
            for i in 0..n as u64 {
                ids.push(
                    index
                        .insert(i * 16..i * 16 + 8, Some(Counted::new()))
                        .unwrap(),
                );
            }
        },
        remove_all: &|| {
            for id in ids.lock().unwrap().drain(..) {
                drop(index.remove(id));
            }
        },
        churn: &|w| {
            let at = 1 << 40 | (w as u64) << 4;
            index.insert(at..at + 8, None).unwrap();
        },
        flush: &|| index.flush(),
    });

    let tree: LatchTree<usize, Option<Counted>> = LatchTree::new();
    let keys = std::sync::Mutex::new(0..0);
    check(&Front {
        name: "LatchTree",
        pin: &|| tree.pin(),
        fill: &|n| {
            for k in 0..n {
                tree.insert(k, Some(Counted::new()));
            }
            *keys.lock().unwrap() = 0..n;
        },
        remove_all: &|| {
            for k in keys.lock().unwrap().clone() {
                tree.remove(&k);
            }
        },
        churn: &|w| {
            tree.insert(usize::MAX - w, None);
        },
        flush: &|| tree.flush(),
    });
}
