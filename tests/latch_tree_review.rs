//! Regressions for the independent review of `LatchTree` (issue 10) and the
//! tree's own `Drop` (issue 8, item 7), each named after the bug.
//!
//! Two of the bugs aborted the process; their tests run the scenario in a
//! child process (this test binary, re-run with an environment variable) so
//! that an abort fails one test instead of killing the whole binary.

use latchtree::LatchTree;
use std::cmp::Ordering;
use std::process::Command;

/// A value whose `Drop` removes a companion entry from the same tree.
struct Companion(Option<u64>);

static COMPANIONS: LatchTree<u64, Companion> = LatchTree::new();

impl Drop for Companion {
    fn drop(&mut self) {
        if let Some(k) = self.0 {
            assert!(COMPANIONS.remove(&k), "companion {k} was not registered");
        }
    }
}

/// Review finding 1: a guarded read inside a batch closure took an outermost
/// epoch pin under the writer lock; crossbeam ran deferred value drops there,
/// a drop that wrote to the same tree hit the re-entrancy check, and the
/// panic was swallowed: 188 of 2,000 such writes vanished in one run.
#[test]
fn drop_time_writes_from_deferred_drops_are_never_lost() {
    const BASE: u64 = 1 << 40;
    let n = if cfg!(miri) { 150 } else { 2000 };
    let panics_before = latchtree::swallowed_drop_panics();
    for i in 0..n {
        assert!(COMPANIONS.insert(BASE + i, Companion(None)));
        assert!(COMPANIONS.insert(i, Companion(Some(BASE + i))));
        COMPANIONS.write(|batch| {
            assert!(batch.remove(&i));
            // Guarded reads of the same tree inside the batch: each pins.
            let _ = COMPANIONS.contains_key(&(BASE + i));
            let _ = COMPANIONS.pin();
            let _ = format!("{:?}", COMPANIONS.len());
        });
    }
    for _ in 0..100_000 {
        if COMPANIONS.is_empty() {
            break;
        }
        COMPANIONS.flush();
        std::thread::yield_now();
    }
    assert_eq!(
        COMPANIONS.len(),
        0,
        "companions left in the tree: a value's Drop lost its write"
    );
    assert_eq!(
        latchtree::swallowed_drop_panics(),
        panics_before,
        "a deferred drop panicked"
    );
    COMPANIONS.check_invariants().unwrap();
}

/// Runs the test `name` of this binary in a child process with `CHILD` set,
/// and returns whether the child exited normally with success.
fn run_child(name: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("LATCHTREE_REVIEW_CHILD", name)
        .output()
        .unwrap()
}

fn is_child(name: &str) -> bool {
    std::env::var("LATCHTREE_REVIEW_CHILD").as_deref() == Ok(name)
}

/// A key whose `Ord` panics on one key and whose `Drop` writes to the same
/// tree.
struct Fickle(u64);

static FICKLE: LatchTree<Fickle, u64> = LatchTree::new();
static FICKLE_LOG: LatchTree<u64, ()> = LatchTree::new();

impl PartialEq for Fickle {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Fickle {}
impl PartialOrd for Fickle {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Fickle {
    fn cmp(&self, other: &Self) -> Ordering {
        if self.0 == 666 || other.0 == 666 {
            panic!("Fickle::cmp refuses 666");
        }
        self.0.cmp(&other.0)
    }
}
impl Drop for Fickle {
    fn drop(&mut self) {
        if self.0 == 666 {
            // A write to the same tree from the key's `Drop`.
            FICKLE.remove(&Fickle(1));
            FICKLE_LOG.insert(666, ());
        }
    }
}

/// Review finding 2: a key whose `Ord` panicked was dropped while unwinding
/// under the writer lock; its `Drop` wrote to the same tree, hit the
/// re-entrancy check, and the second panic aborted the process.
#[test]
#[cfg_attr(miri, ignore = "spawns a child process")]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std a panic inside a write or a drop aborts (unwind.rs)"
)]
fn panicking_ord_with_a_writing_drop_does_not_abort() {
    const NAME: &str = "panicking_ord_with_a_writing_drop_does_not_abort";
    if is_child(NAME) {
        FICKLE.insert(Fickle(1), 1);
        FICKLE.insert(Fickle(2), 2);
        let r = std::panic::catch_unwind(|| FICKLE.insert(Fickle(666), 0));
        assert!(r.is_err(), "the Ord panic propagates to the writer");
        // The key's drop ran (outside the lock) and its writes took effect.
        for _ in 0..100_000 {
            if FICKLE_LOG.contains_key(&666) {
                break;
            }
            FICKLE.flush();
            std::thread::yield_now();
        }
        assert!(FICKLE_LOG.contains_key(&666), "the key's Drop did not run");
        assert!(
            !FICKLE.contains_key(&Fickle(1)),
            "the Drop's write was lost"
        );
        assert!(FICKLE.contains_key(&Fickle(2)));
        FICKLE.check_invariants().unwrap();
        return;
    }
    let out = run_child(NAME);
    assert!(
        out.status.success(),
        "child failed ({:?}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A value whose `Drop` panics.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("Bomb::drop went off");
    }
}

/// Issue 8 item 7: `Drop for LatchTree` resumed a value's drop panic even
/// when the tree was dropped while its thread was already unwinding, which
/// aborts the process.
#[test]
#[cfg_attr(miri, ignore = "spawns a child process")]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std a panic inside a write or a drop aborts (unwind.rs)"
)]
fn dropping_a_tree_while_unwinding_never_aborts() {
    const NAME: &str = "dropping_a_tree_while_unwinding_never_aborts";
    if is_child(NAME) {
        let before = latchtree::swallowed_drop_panics();
        let r = std::panic::catch_unwind(|| {
            let tree = LatchTree::new();
            tree.insert(1, Bomb);
            tree.insert(2, Bomb);
            panic!("the first panic");
        });
        assert!(r.is_err());
        let after = latchtree::swallowed_drop_panics();
        assert_eq!(after - before, 2, "both swallowed drop panics are counted");
        return;
    }
    let out = run_child(NAME);
    assert!(
        out.status.success(),
        "child failed ({:?}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
