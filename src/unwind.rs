//! The crate's one panic shim: how a write survives a panic in user code.
//!
//! With `std`, a panic in a user `Ord`, batch closure or `Drop` unwinds to
//! [`catch_unwind`], the write rolls back (or the drop is counted), and the
//! panic resumes ([`resume_unwind`]). Without `std` nothing can catch a
//! panic: [`catch_unwind`] then runs its closure under a guard whose `Drop`
//! panics if it is reached by unwinding, and a panic during cleanup calls
//! the panic handler with `can_unwind() == false`, which never returns
//! (it aborts, resets, or parks the task, as the handler decides). So no
//! half-done write is ever seen: readers keep the last committed copy, and
//! later writers of that structure wait for a lock that is never released.
//! Where panics abort, as they usually do without `std`, the guard is never
//! reached. The `guide::no_std` page says so to users.

#[cfg(feature = "std")]
pub(crate) use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

/// What a caught panic carries.
#[cfg(feature = "std")]
pub(crate) type Payload = std::boxed::Box<dyn core::any::Any + Send + 'static>;

/// Whether this thread is unwinding (always false without `std`, where a
/// panic never reaches a caller of ours: see the module docs).
#[inline]
pub(crate) fn panicking() -> bool {
    #[cfg(feature = "std")]
    {
        std::thread::panicking()
    }
    #[cfg(not(feature = "std"))]
    {
        false
    }
}

#[cfg(not(feature = "std"))]
pub(crate) use no_std::{AssertUnwindSafe, Payload, catch_unwind, resume_unwind};

#[cfg(not(feature = "std"))]
mod no_std {
    /// What a caught panic would carry; none is ever caught without `std`.
    pub(crate) enum Payload {}

    /// `std::panic::AssertUnwindSafe`'s stand-in (the closure is called
    /// as it is).
    pub(crate) struct AssertUnwindSafe<F>(pub(crate) F);

    /// Aborts the process if dropped while unwinding (a panic in a
    /// destructor during cleanup aborts).
    struct AbortOnUnwind;

    impl Drop for AbortOnUnwind {
        fn drop(&mut self) {
            panic!(
                "latchtree: a panic in user code inside a write cannot be rolled back without `std`"
            );
        }
    }

    /// Runs `f`; a panic out of it aborts (see the module docs).
    pub(crate) fn catch_unwind<R>(f: AssertUnwindSafe<impl FnOnce() -> R>) -> Result<R, Payload> {
        let guard = AbortOnUnwind;
        let r = (f.0)();
        core::mem::forget(guard);
        Ok(r)
    }

    /// Never called: nothing is caught.
    pub(crate) fn resume_unwind(p: Payload) -> ! {
        match p {}
    }
}
