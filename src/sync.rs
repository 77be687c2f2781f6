//! The crate's one synchronization shim.
//!
//! Every atomic, fence and lock the crate uses comes from here, so that
//! `RUSTFLAGS="--cfg latchtree_loom"` swaps in loom's model-checked versions everywhere
//! at once. Nothing else in the crate imports `core::sync::atomic`, except
//! `reclaim/collector.rs` for what loom has no need (or way) to model: the fences
//! that work around crossbeam's pin (crossbeam itself is not modelled) and
//! the `static`s that remember the default collector (loom's atomics
//! cannot be `static`; the collector is made once for the process).
//!
//! Without the `std` feature the writers' lock is [`SpinMutex`]: writers
//! are rare and short next to reads, and no OS is there to park on.

#[cfg(not(latchtree_loom))]
pub(crate) use core::sync::atomic::{
    AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(all(not(latchtree_loom), not(feature = "std")))]
pub(crate) use spin::{SpinMutex as Mutex, SpinMutexGuard as MutexGuard};
#[cfg(all(not(latchtree_loom), feature = "std"))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(latchtree_loom)]
pub(crate) use loom::sync::atomic::{
    AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(latchtree_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

/// Hint used inside retry loops: under loom it yields so the model can make
/// progress; otherwise it is the CPU's spin-loop hint.
#[inline]
pub(crate) fn retry_hint() {
    #[cfg(latchtree_loom)]
    loom::thread::yield_now();
    #[cfg(not(latchtree_loom))]
    core::hint::spin_loop();
}

/// What a waiter does between two looks at what it waits for: gives the
/// CPU away (`std`), or spins.
#[inline]
pub(crate) fn wait_hint() {
    #[cfg(any(latchtree_loom, feature = "std"))]
    yield_now();
    #[cfg(not(any(latchtree_loom, feature = "std")))]
    core::hint::spin_loop();
}

/// What a thread that takes the writer lock over and over for work of its
/// own (`AddrIndex::synchronize`'s slices) does between two takes, so that
/// a writer waiting for the lock gets it: a lock that was just released is
/// free for the releasing thread at once, while the waiter it woke needs
/// some microseconds to run, so a yield alone let the same thread take it
/// again every time (a writer beside it waited for the whole call). With
/// `std`, a short sleep; else a yield or a spin as [`wait_hint`].
#[inline]
pub(crate) fn let_waiters_in() {
    #[cfg(all(not(latchtree_loom), feature = "std"))]
    std::thread::sleep(core::time::Duration::from_micros(LET_IN_MICROS));
    #[cfg(not(all(not(latchtree_loom), feature = "std")))]
    wait_hint();
}

/// How long [`let_waiters_in`] sleeps: some wake-ups of a waiter on the
/// 2-core VM.
#[cfg(all(not(latchtree_loom), feature = "std"))]
const LET_IN_MICROS: u64 = 50;

#[cfg(latchtree_loom)]
use loom::thread::yield_now;
#[cfg(all(not(latchtree_loom), feature = "std"))]
use std::thread::yield_now;

/// Takes a writer lock, ignoring poisoning: every writer leaves the structure
/// consistent even when user code panics (see `raw::latch`), so a poisoned
/// lock carries no information we need.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(all(not(latchtree_loom), feature = "std"))]
    {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    #[cfg(all(not(latchtree_loom), not(feature = "std")))]
    {
        m.lock()
    }
    #[cfg(latchtree_loom)]
    {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The value behind a lock its caller holds `&mut` to (no one else can
/// hold the lock), ignoring poisoning as [`lock`] does.
pub(crate) fn lock_mut<T>(m: &mut Mutex<T>) -> &mut T {
    #[cfg(not(all(not(latchtree_loom), not(feature = "std"))))]
    {
        match m.get_mut() {
            Ok(v) => v,
            Err(e) => e.into_inner(),
        }
    }
    #[cfg(all(not(latchtree_loom), not(feature = "std")))]
    {
        m.get_mut()
    }
}

/// Declares a `const fn` normally and a plain `fn` under loom, whose atomics
/// and locks have no `const` constructors.
macro_rules! const_fn_unless_loom {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $t:ty),*) -> $ret:ty $body:block) => {
        #[cfg(not(latchtree_loom))]
        $(#[$m])*
        $vis const fn $name($($arg: $t),*) -> $ret $body
        #[cfg(latchtree_loom)]
        $(#[$m])*
        $vis fn $name($($arg: $t),*) -> $ret $body
    };
}
pub(crate) use const_fn_unless_loom;

/// The writers' lock without `std`.
#[cfg(all(not(latchtree_loom), not(feature = "std")))]
mod spin {
    use core::cell::UnsafeCell;
    use core::marker::PhantomData;
    use core::ops::{Deref, DerefMut};
    use core::sync::atomic::{AtomicBool, Ordering};

    /// A test-and-test-and-set spin lock (no poisoning: see [`super::lock`]).
    pub(crate) struct SpinMutex<T> {
        locked: AtomicBool,
        value: UnsafeCell<T>,
    }

    // SAFETY: the lock hands out `&mut T` to one thread at a time, so
    // sharing the lock moves the value between threads, as `Mutex` does.
    unsafe impl<T: Send> Sync for SpinMutex<T> {}

    /// Holds a [`SpinMutex`]; unlocks when dropped. The marker makes it
    /// `Sync` only where `T` is, as `std`'s guard (sharing a guard of a
    /// `Cell` would hand `&Cell` to several threads).
    pub(crate) struct SpinMutexGuard<'a, T>(&'a SpinMutex<T>, PhantomData<&'a mut T>);

    impl<T> SpinMutex<T> {
        pub(crate) const fn new(value: T) -> Self {
            SpinMutex {
                locked: AtomicBool::new(false),
                value: UnsafeCell::new(value),
            }
        }

        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.value.get_mut()
        }

        pub(crate) fn lock(&self) -> SpinMutexGuard<'_, T> {
            loop {
                // Acquire: pairs with the Release store in the guard's
                // `drop`, so the last holder's writes happen-before ours.
                if self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return SpinMutexGuard(self, PhantomData);
                }
                // Relaxed: only a hint to try again; the CAS above orders.
                while self.locked.load(Ordering::Relaxed) {
                    core::hint::spin_loop();
                }
            }
        }
    }

    impl<T> Deref for SpinMutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // SAFETY: this guard holds the lock: no other reference exists.
            unsafe { &*self.0.value.get() }
        }
    }

    impl<T> DerefMut for SpinMutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: as in `deref`, and `&mut self` makes it unique.
            unsafe { &mut *self.0.value.get() }
        }
    }

    impl<T> Drop for SpinMutexGuard<'_, T> {
        fn drop(&mut self) {
            // Release: pairs with the Acquire CAS in `lock`.
            self.0.locked.store(false, Ordering::Release);
        }
    }

    impl<T: Default> Default for SpinMutex<T> {
        fn default() -> Self {
            SpinMutex::new(T::default())
        }
    }

    impl<T> core::fmt::Debug for SpinMutex<T> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_struct("SpinMutex").finish_non_exhaustive()
        }
    }
}

/// The no_std lock under two threads (Miri runs it: `.ci/run`'s miri
/// layer).
#[cfg(all(test, not(latchtree_loom), not(feature = "std")))]
mod tests {
    use super::{Mutex, lock};

    #[test]
    fn the_spin_lock_excludes_and_publishes() {
        let m = Mutex::new(0_u64);
        let rounds = if cfg!(miri) { 50 } else { 10_000 };
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..rounds {
                        let mut g = lock(&m);
                        // A lost update shows as a short total.
                        let v = *g;
                        core::hint::spin_loop();
                        *g = v + 1;
                    }
                });
            }
        });
        assert_eq!(*lock(&m), 2 * rounds);
    }
}
