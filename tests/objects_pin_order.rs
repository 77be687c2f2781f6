//! A thread's outermost pin may run closures that other code deferred on
//! crossbeam-epoch's default collector (every 128th pin collects). Review
//! finding (round 5): `LoadedObjects::objects` took that pin while holding
//! its own lock, so such a closure that asked the same `LoadedObjects` for
//! its objects deadlocked on it. It pins before the lock now, as the
//! refresh's diff does.
//!
//! A test binary of its own: the deadlock it guards against would leave the
//! objects locked for every other test, and no other test's pins should
//! run these closures.

#![cfg(all(
    feature = "objects",
    target_os = "linux",
    target_pointer_width = "64",
    not(miri)
))]

use latchtree::LoadedObjects;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn a_closure_that_a_pin_of_objects_runs_may_call_back_into_it() {
    static RAN: AtomicUsize = AtomicUsize::new(0);
    let objects: &'static LoadedObjects = Box::leak(Box::new(LoadedObjects::new()));
    objects.refresh();
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..8 {
            let guard = latchtree::pin();
            // Other code's garbage: a closure that reads the same objects.
            guard.defer(move || {
                assert!(!objects.objects().is_empty());
                RAN.fetch_add(1, Relaxed);
            });
            guard.flush(); // to the global queue; the epoch moves on
            drop(guard);
            // Only these pins collect from here on: one of them runs it.
            let before = RAN.load(Relaxed);
            for _ in 0..300 {
                if RAN.load(Relaxed) > before {
                    break;
                }
                assert!(!objects.objects().is_empty());
            }
        }
        done.send(()).unwrap();
    });
    match finished.recv_timeout(Duration::from_secs(30)) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("a closure the pin ran called back into the objects under their lock: deadlock")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the pinning thread panicked"),
    }
    assert_eq!(
        RAN.load(Relaxed),
        8,
        "the pins of `objects` ran every closure"
    );
}
