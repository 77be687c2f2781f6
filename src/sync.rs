//! The crate's one synchronization shim.
//!
//! Every atomic, fence and lock the crate uses comes from here, so that
//! `RUSTFLAGS="--cfg latchtree_loom"` swaps in loom's model-checked versions everywhere
//! at once. Nothing else in the crate imports `std::sync::atomic`.

#[cfg(not(latchtree_loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(latchtree_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(latchtree_loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(latchtree_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

/// Hint used inside retry loops: under loom it yields so the model can make
/// progress; otherwise it is the CPU's spin-loop hint.
#[inline]
pub(crate) fn retry_hint() {
    #[cfg(latchtree_loom)]
    loom::thread::yield_now();
    #[cfg(not(latchtree_loom))]
    std::hint::spin_loop();
}

/// Takes a writer lock, ignoring poisoning: every writer leaves the structure
/// consistent even when user code panics (see `raw::latch`), so a poisoned
/// lock carries no information we need.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(not(latchtree_loom))]
    {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    #[cfg(latchtree_loom)]
    {
        m.lock().unwrap_or_else(|e| e.into_inner())
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
