//! Regression (review of issue 10): `Extend for &LatchTree` ran the caller's iterator (its
//! `next`, its adapters' closures, and the drops of items it discards or
//! leaves behind) inside the batch closure, i.e. under the writer lock.
use latchtree::LatchTree;
use std::cmp::Ordering;
use std::process::Command;

/// A value whose `Drop` writes to the same tree (as in latch_tree_review.rs).
struct Writes(Option<u64>);
static TREE: LatchTree<u64, Writes> = LatchTree::new();
impl Drop for Writes {
    fn drop(&mut self) {
        if let Some(k) = self.0 {
            TREE.insert(k, Writes(None));
        }
    }
}

/// `filter` drops the rejected item under the writer lock; its `Drop` writes
/// to the tree, hits the re-entrancy assert, and the whole extend is lost.
/// (`BTreeMap::extend` with the same iterator just works.)
#[test]
fn extend_drops_filtered_items_outside_the_writer_lock() {
    let items = vec![(1, Writes(None)), (2, Writes(Some(100))), (3, Writes(None))];
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (&TREE).extend(items.into_iter().filter(|(k, _)| *k != 2));
    }));
    let msg = r.as_ref().err().map(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    });
    eprintln!("extend result: {msg:?}; tree len {}", TREE.len());
    assert!(r.is_ok(), "extend panicked: {msg:?}");
    assert_eq!(TREE.len(), 3, "1, 3 and the Drop's 100");
}

/// A key whose `Ord` panics on 666 and whose `Drop` (for 7) writes to the
/// same tree.
struct Fickle(u64);
static FICKLE: LatchTree<Fickle, ()> = LatchTree::new();
impl PartialEq for Fickle {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Fickle {}
impl PartialOrd for Fickle {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Fickle {
    fn cmp(&self, o: &Self) -> Ordering {
        if self.0 == 666 || o.0 == 666 {
            panic!("Fickle::cmp refuses 666")
        }
        self.0.cmp(&o.0)
    }
}
impl Drop for Fickle {
    fn drop(&mut self) {
        if self.0 == 7 {
            FICKLE.remove(&Fickle(1));
        }
    }
}

/// The issue-10 abort, through `Extend`: the Ord panic unwinds out of the
/// batch closure, dropping the rest of the caller's iterator (which holds
/// `Fickle(7)`) during unwinding under the writer lock; `Fickle(7)`'s
/// write panics (re-entrancy) while unwinding: the process aborts.
#[test]
#[cfg_attr(
    not(feature = "std"),
    ignore = "without std a panic inside a write or a drop aborts (unwind.rs)"
)]
fn extend_with_panicking_ord_and_writing_drop_does_not_abort() {
    const NAME: &str = "extend_with_panicking_ord_and_writing_drop_does_not_abort";
    if std::env::var("LATCHTREE_EXTEND_CHILD").as_deref() == Ok(NAME) {
        FICKLE.insert(Fickle(1), ());
        let r = std::panic::catch_unwind(|| {
            (&FICKLE).extend(vec![(Fickle(2), ()), (Fickle(666), ()), (Fickle(7), ())]);
        });
        assert!(r.is_err());
        println!("child survived");
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env("LATCHTREE_EXTEND_CHILD", NAME)
        .output()
        .unwrap();
    eprintln!(
        "child status: {:?}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child aborted");
}
