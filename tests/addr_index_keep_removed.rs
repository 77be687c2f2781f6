//! Removed modules an `AddrIndex` keeps for late samples
//! (`AddrIndex::keeping_removed`): opt-in, bounded (`Last(n)`) or until
//! forgotten; a module the index misses is found kept; a rolled-back
//! removal is not kept; what the store lets go of is dropped after every
//! lock of the index, never under one.

use latchtree::{AddrIndex, KeepRemoved, ModuleId};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// Counts its drops in the given counter.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Relaxed);
    }
}

/// The tests here count drops, which a reader pinning in a test beside
/// them can delay (without `std` above all): one at a time. And they count
/// after `synchronize`, not `flush`: the thread of the test before, exiting
/// after it let go of this lock, pins once more to hand crossbeam its bag,
/// and a `flush` that meets that pin leaves what it could not drop (one
/// run in 15 failed so).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Iterations: fewer under Miri.
fn size(native: usize, miri: usize) -> usize {
    if cfg!(miri) { miri } else { native }
}

#[test]
fn new_keeps_nothing() {
    let _serial = serial();
    let index = AddrIndex::new();
    assert_eq!(index.keeps_removed(), KeepRemoved::Last(0));
    let id = index.insert(0..10, "a").unwrap();
    assert!(index.remove(id).is_some());
    assert!(index.removed(id).is_none() && !index.forget(id));
    assert_eq!(index.removed_count(), 0);
    index.check_invariants().unwrap();
}

#[test]
fn last_n_keeps_the_latest_removals_and_drops_the_ones_pushed_out() {
    let _serial = serial();
    let dropped = Arc::new(AtomicUsize::new(0));
    let index = AddrIndex::keeping_removed(KeepRemoved::Last(3));
    let ids: Vec<ModuleId> = (0..6u64)
        .map(|i| {
            let value = Counted(Arc::clone(&dropped));
            index.insert(i * 16..i * 16 + 16, value).unwrap()
        })
        .collect();
    // Removed in another order than the ids': the bound goes by removal.
    let order = [4, 0, 5, 2, 1, 3];
    for (n, &i) in order.iter().enumerate() {
        drop(index.remove(ids[i]).unwrap());
        index.check_invariants().unwrap();
        assert_eq!(index.removed_count(), (n + 1).min(3));
    }
    index.synchronize();
    for (n, &i) in order.iter().enumerate() {
        let kept = index.removed(ids[i]);
        assert_eq!(kept.is_some(), n >= 3, "#{i}, removed {n}th");
        if let Some(r) = kept {
            let start = i as u64 * 16;
            assert_eq!(
                (r.id(), r.segments()[0].range.clone()),
                (ids[i], start..start + 16)
            );
        }
    }
    assert_eq!(
        dropped.load(Relaxed),
        3,
        "the three pushed out were dropped"
    );
    // Forgetting one makes room: the next removal pushes nothing out.
    assert!(index.forget(ids[1]));
    assert_eq!(dropped.load(Relaxed), 4);
    let seventh = index
        .insert(0x1000..0x1010, Counted(Arc::clone(&dropped)))
        .unwrap();
    assert!(ids.iter().all(|&id| id < seventh), "ids are never reused");
    drop(index.remove(seventh));
    assert_eq!(index.removed_count(), 3);
    assert_eq!(dropped.load(Relaxed), 4);
    assert!(index.removed(seventh).is_some());
    index.check_invariants().unwrap();
    drop(index);
    assert_eq!(dropped.load(Relaxed), 7, "every value dropped once");
}

#[test]
fn until_forgotten_keeps_every_removal() {
    let _serial = serial();
    let dropped = Arc::new(AtomicUsize::new(0));
    let index = AddrIndex::keeping_removed(KeepRemoved::UntilForgotten);
    let n = size(300, 20);
    for i in 0..n as u64 {
        let id = index
            .insert(i * 16..i * 16 + 16, Counted(Arc::clone(&dropped)))
            .unwrap();
        // Batches too: a removal inside one is kept when it commits.
        index.write(|b| assert!(b.remove(id).is_some()));
    }
    index.synchronize();
    assert_eq!(index.removed_count(), n);
    assert_eq!(dropped.load(Relaxed), 0, "kept values live on");
    let first = ModuleId::from_raw(1);
    assert_eq!(index.removed(first).map(|r| r.base()), Some(0));
    assert!(index.forget(first) && index.removed(first).is_none());
    assert_eq!(dropped.load(Relaxed), 1);
    assert_eq!(index.forget_removed(), n - 1);
    assert_eq!((index.removed_count(), dropped.load(Relaxed)), (0, n));
    index.check_invariants().unwrap();
}

/// A removal in a batch that panics is rolled back: the module stays
/// registered and is not kept, now or at a later commit.
#[test]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std a panic inside a write aborts (unwind.rs)"
)]
fn a_rolled_back_removal_is_not_kept() {
    let _serial = serial();
    let index = AddrIndex::keeping_removed(KeepRemoved::UntilForgotten);
    let id = index.insert(0..10, 'a').unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        index.write(|b| {
            b.remove(id);
            panic!("abort the batch");
        })
    }));
    assert!(r.is_err());
    assert!(index.lookup(5).is_some() && index.removed(id).is_none());
    index.insert(20..30, 'b').unwrap();
    assert!(
        index.removed(id).is_none(),
        "a later commit keeps nothing stale"
    );
    index.check_invariants().unwrap();
    assert!(index.remove(id).is_some());
    assert!(index.removed(id).is_some());
}

/// A reader that misses a module in the index finds it kept: the removal
/// enters the store before the flip that takes the module out.
#[test]
fn a_module_the_index_misses_is_kept() {
    let _serial = serial();
    let index = AddrIndex::keeping_removed(KeepRemoved::UntilForgotten);
    let rounds = size(20_000, 60);
    // The last id the writer registered (before removing it).
    let issued = std::sync::atomic::AtomicU64::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Relaxed) {
                // Acquire: pairs with the writer's Release store, after
                // the module's insert returned.
                let newest = issued.load(std::sync::atomic::Ordering::Acquire);
                for raw in newest.saturating_sub(2).max(1)..=newest {
                    let id = ModuleId::from_raw(raw);
                    if index.get(id, &index.pin()).is_none() {
                        assert!(
                            index.removed(id).is_some(),
                            "#{raw} neither registered nor kept"
                        );
                    }
                }
            }
        });
        for i in 0..rounds as u64 {
            let id = index.insert(0..10, i).unwrap();
            // Release: pairs with the reader's Acquire load.
            issued.store(id.get(), std::sync::atomic::Ordering::Release);
            index.remove(id);
        }
        done.store(true, Relaxed);
    });
    assert_eq!(index.removed_count(), rounds);
}

/// What the store lets go of is dropped after the writer lock and the
/// store's own: a value whose `Drop` writes to its index and asks it for
/// removed modules neither panics (a write inside a write) nor deadlocks.
#[test]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std no thread-local tells a nested write (guide::no_std)"
)]
fn values_the_store_lets_go_of_are_dropped_after_every_lock() {
    let _serial = serial();
    static INDEX: AddrIndex<Reentrant> = AddrIndex::keeping_removed(KeepRemoved::Last(1));
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct Reentrant(bool);
    impl Drop for Reentrant {
        fn drop(&mut self) {
            if self.0 {
                let _ =
                    INDEX.removed_count() + INDEX.removed(ModuleId::from_raw(1)).map_or(0, |_| 1);
                drop(INDEX.insert(0x9000..0x9010, Reentrant(false)));
                DROPS.fetch_add(1, Relaxed);
            }
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let a = INDEX.insert(0..16, Reentrant(true)).unwrap();
        let b = INDEX.insert(16..32, Reentrant(true)).unwrap();
        let c = INDEX.insert(32..48, Reentrant(true)).unwrap();
        drop(INDEX.remove(a));
        INDEX.synchronize(); // the store's is now the last reference
        drop(INDEX.remove(b)); // pushes `a` out
        let evicted = DROPS.load(Relaxed);
        INDEX.synchronize();
        // Forgotten inside a batch closure: dropped after that write.
        INDEX.write(|batch| {
            assert!(INDEX.forget(b));
            assert_eq!(DROPS.load(Relaxed), evicted, "not under the writer lock");
            batch.remove(c);
        });
        INDEX.synchronize();
        tx.send((evicted, DROPS.load(Relaxed))).unwrap();
    });
    let (evicted, all) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a value's Drop panicked or deadlocked under a lock of its index");
    assert_eq!((evicted, all), (1, 2));
    INDEX.check_invariants().unwrap();
}
