//! Regression (review of issue 10): a guarded read inside an `AddrIndex` batch
//! pinned under the index's writer lock and could run a retired `LatchTree`
//! entry's deferred `Drop` there; a `Drop` writing to the index was lost.
//! (The pin count per batch varies: crossbeam collects on every 128th
//! outermost pin, so a fixed even count always lands on a harmless pin.)
use latchtree::{AddrIndex, LatchTree};

static INDEX: AddrIndex<u32> = AddrIndex::new();
static TREE: LatchTree<u64, Registers> = LatchTree::new();
struct Registers(u64);
std::thread_local! { static IN_BATCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) }; }
static UNDER_LOCK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
impl Drop for Registers {
    fn drop(&mut self) {
        if IN_BATCH.with(|f| f.get()) {
            UNDER_LOCK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let s = 0x1000_0000 + self.0 * 16;
        INDEX.insert(s..s + 8, 1).unwrap();
    }
}

#[test]
fn a_deferred_drop_never_runs_under_an_addr_index_lock() {
    let n = 2000u64;
    let before = latchtree::swallowed_drop_panics();
    let id = INDEX.insert(0..8, 0).unwrap();
    for i in 0..n {
        TREE.insert(i, Registers(i));
        TREE.remove(&i); // retired: its Drop is deferred
        INDEX.write(|_b| {
            IN_BATCH.with(|f| f.set(true));
            for _ in 0..(i % 3 + 1) {
                let g = INDEX.pin(); // a guarded read inside the batch
                let _ = INDEX.get(id, &g);
            }
            IN_BATCH.with(|f| f.set(false));
        });
    }
    for _ in 0..10_000 {
        latchtree::pin().flush();
    }
    let lost = latchtree::swallowed_drop_panics() - before;
    eprintln!(
        "drops run inside the AddrIndex batch: {}",
        UNDER_LOCK.load(std::sync::atomic::Ordering::Relaxed)
    );
    eprintln!("swallowed drop panics: {lost} of {n}");
    assert_eq!(lost, 0, "Drop-time writes to the index were lost");
}
