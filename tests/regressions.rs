//! Regression tests, each named after the bug it pins down.

use latchtree::{AddrIndex, LatchTree};
use std::sync::Barrier;

/// Two racing `remove(id)` calls, with the same range re-registered by a
/// new module in between, used to erase the *new* module's range (the
/// second remove looked ranges up by start only). Now exactly one remove of
/// an id succeeds and no other module is touched.
#[test]
fn racing_double_remove_never_erases_another_modules_range() {
    let index = AddrIndex::new();
    let rounds = if cfg!(miri) { 10 } else { 500 };
    let barrier = Barrier::new(3);
    let mut current = index.insert(0x1000..0x2000, 0u32).unwrap();
    std::thread::scope(|s| {
        for _ in 0..rounds {
            let id = current;
            let removers: Vec<_> = (0..2)
                .map(|_| {
                    let (index, barrier) = (&index, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        index.remove(id).is_some()
                    })
                })
                .collect();
            barrier.wait();
            // Re-register the same range as soon as it is free.
            let next = loop {
                if let Ok(next) = index.insert(0x1000..0x2000, 1) {
                    break next;
                }
                std::hint::spin_loop();
            };
            let wins: usize = removers
                .into_iter()
                .map(|h| usize::from(h.join().unwrap()))
                .sum();
            assert_eq!(wins, 1, "exactly one remove of {id} succeeds");
            assert_eq!(index.lookup(0x1800).map(|h| h.id()), Some(next));
            index.check_invariants().unwrap();
            current = next;
        }
    });
}

/// A write issued from a thread-local destructor used to abort the process:
/// the re-entrancy check touched its own thread-local after it was destroyed.
#[test]
#[cfg_attr(
    miri,
    ignore = "thread-local destructor order is what is tested; slow under Miri"
)]
fn write_from_a_thread_local_destructor_does_not_abort() {
    static TREE: LatchTree<u32, u32> = LatchTree::new();
    struct Unregister(u32);
    impl Drop for Unregister {
        fn drop(&mut self) {
            TREE.remove(&self.0);
            TREE.insert(self.0 + 1000, 0);
        }
    }
    std::thread_local! {
        static REGISTRATION: Unregister = const { Unregister(7) };
    }
    std::thread::spawn(|| {
        // Registered first, destroyed last: after the crate's own
        // thread-local, which the write below registers.
        REGISTRATION.with(|r| assert_eq!(r.0, 7));
        TREE.insert(7, 7);
    })
    .join()
    .unwrap();
    assert!(!TREE.contains_key(&7));
    assert!(TREE.contains_key(&1007));
}

/// `Hit` used to be `Copy` only for `T: Copy`.
#[test]
fn hit_is_copy_for_any_value() {
    let index = AddrIndex::new();
    index.insert(0..10, String::from("m")).unwrap();
    let guard = latchtree::pin();
    let hit = index.module_address(1, &guard).unwrap();
    let copy = hit;
    assert_eq!(hit.value(), copy.value());
}
