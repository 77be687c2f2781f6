//! What `AddrIndex::synchronize` promises (issue 25, findings 1 and 5):
//! * it returns only after every value removed before the call was dropped,
//!   also when another thread's write took the value out of the limbo and
//!   is still inside its `Drop` (finding 1: it returned at once);
//! * it waits for the readers that could see a value when it was removed
//!   (a guard pinned before the removal), which is what the docs now say
//!   (finding 5: they said "every guard pinned before the call", which it
//!   never promised for a guard pinned after the removal).
//!
//! The tests share the process-wide epoch: a lock runs them one at a time.

use latchtree::AddrIndex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A value whose `Drop` takes a while, and says when it started and ended.
struct SlowDrop {
    started: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
}

impl Drop for SlowDrop {
    fn drop(&mut self) {
        self.started.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        self.finished.store(true, Ordering::SeqCst);
    }
}

#[test]
fn synchronize_waits_for_a_drop_running_on_another_thread() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let index = AddrIndex::new();
    let started = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let id = index
        .insert(
            0x1000..0x2000,
            SlowDrop {
                started: Arc::clone(&started),
                finished: Arc::clone(&finished),
            },
        )
        .unwrap();
    // This thread removes it (and lets go of its own reference)…
    drop(index.remove(id));
    std::thread::scope(|s| {
        // …another thread's writes take it out of the limbo once its grace
        // period passed, and drop it after their lock, slowly.
        // Empty batches: the write that takes it retires nothing, so
        // nothing else is left waiting for `synchronize` to see.
        s.spawn(|| {
            while !started.load(Ordering::SeqCst) {
                index.write(|_| ());
            }
        });
        while !started.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // The value is out of the limbo, its `Drop` running over there.
        index.synchronize();
        assert!(
            finished.load(Ordering::SeqCst),
            "synchronize returned while the removed value's Drop was still running"
        );
    });
}

#[test]
fn synchronize_waits_for_a_guard_pinned_before_the_removal() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let index = Arc::new(AddrIndex::new());
    let value = Arc::new(7u32);
    let id = index.insert(0..16, Arc::clone(&value)).unwrap();
    // A reader pinned before the removal, still holding the value.
    let (pinned_tx, pinned_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let reader = std::thread::spawn({
        let index = Arc::clone(&index);
        move || {
            let guard = index.pin();
            let held = Arc::clone(index.get(id, &guard).unwrap());
            pinned_tx.send(()).unwrap();
            release_rx.recv().unwrap();
            drop(guard);
            held
        }
    });
    pinned_rx.recv().unwrap();
    drop(index.remove(id));
    let (done_tx, done_rx) = mpsc::channel();
    let sync = std::thread::spawn({
        let index = Arc::clone(&index);
        move || {
            index.synchronize();
            done_tx.send(()).unwrap();
        }
    });
    assert!(
        done_rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "synchronize returned while a guard pinned before the removal was held"
    );
    release_tx.send(()).unwrap();
    let held = reader.join().unwrap();
    done_rx.recv().unwrap();
    sync.join().unwrap();
    assert_eq!(
        Arc::strong_count(&value),
        2,
        "the index let go: ours and the reader's clone are left"
    );
    drop(held);
}

/// A removed value whose `Drop` calls `synchronize` on its own index (the
/// thread runs that drop, holding its ticket): it returns rather than wait
/// for itself, also when the drop was put off to the end of another
/// tree's write (review of issue 25's fix).
#[test]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std no thread-local tells a nested write (guide::no_std)"
)]
fn synchronize_from_a_removed_values_drop_returns() {
    static INDEX: AddrIndex<Resync> = AddrIndex::new();
    struct Resync;
    impl Drop for Resync {
        fn drop(&mut self) {
            INDEX.synchronize();
        }
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let id = INDEX.insert(0..8, Resync).unwrap();
        drop(INDEX.remove(id));
        INDEX.synchronize();
        // Put off to the end of another tree's write.
        let outer = latchtree::LatchTree::new();
        let id = INDEX.insert(0..8, Resync).unwrap();
        outer.write(|batch| {
            batch.insert(1u8, ());
            drop(INDEX.remove(id));
            INDEX.flush();
        });
        INDEX.synchronize();
        done_tx.send(INDEX.is_empty()).unwrap();
    });
    let empty = done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("synchronize inside a removed value's Drop waited for itself");
    assert!(empty);
}
