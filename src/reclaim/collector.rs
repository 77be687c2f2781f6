//! Which crossbeam-epoch collector a front-end's guards pin ([`Reclaimer`]),
//! and the crate's [`pin`] and [`default_collector`].

use crossbeam_epoch::{Collector, Guard};

/// Which collector a front-end's guards must come from: its readers pin it,
/// its writers defer their announcements through it (`job.rs`).
pub(crate) struct Reclaimer {
    /// `None`: crossbeam-epoch's default (global) collector.
    collector: Option<Collector>,
}

impl core::fmt::Debug for Reclaimer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reclaimer")
            .field("own_collector", &self.collector.is_some())
            .finish_non_exhaustive()
    }
}

/// Pins the current thread to the crate's default collector: the guard
/// every guarded read of a tree or index built with `new()` takes. With
/// `std`, that is crossbeam-epoch's default collector and this is
/// `crossbeam_epoch::pin()`, after a `Release` fence. Without `std`
/// (crossbeam then has no default collector: it keeps one participant per
/// thread in a thread-local) it is a collector the crate makes on first
/// use, and each call registers a participant for its guard (an
/// allocation): a hot path should pin a [`LocalHandle`](crate::LocalHandle)
/// of [`default_collector`] that it keeps.
///
/// The fence works around crossbeam-epoch 0.9.21's pin on targets other
/// than x86-64 (and under Miri): it publishes the pin with a `Relaxed`
/// store, which under C++20 rules ends the release sequence of the
/// previous unpin, so an epoch advance that reads the new pin is not
/// ordered after what the thread read under its previous guard, and the
/// garbage it read can be freed under it (a data race Miri reports; a
/// crossbeam-only reproducer shows it too). On x86-64 the
/// fence is a compiler barrier only.
///
/// ```
/// let tree = latchtree::LatchTree::new();
/// tree.insert(1, "one");
/// let guard = latchtree::pin();
/// assert_eq!(tree.get(&1, &guard), Some(&"one"));
/// ```
#[inline]
#[must_use = "a guard protects only while it is held"]
pub fn pin() -> Guard {
    // Release: pairs with the Acquire fence that ends crossbeam's epoch
    // advance (`Global::try_advance`, after it loads each participant's
    // epoch): an advance that reads this pin is ordered after every access
    // of this thread's earlier guards.
    core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
    #[cfg(feature = "std")]
    {
        crossbeam_epoch::pin()
    }
    #[cfg(not(feature = "std"))]
    {
        default_collector().register().pin()
    }
}

/// The collector of every tree and index built with `new()` (see [`pin`]):
/// crossbeam-epoch's default collector with `std`; without it, one made on
/// first use and kept for the life of the process.
///
/// ```
/// let tree = latchtree::LatchTree::new();
/// tree.insert(1, "one");
/// let handle = latchtree::default_collector().register(); // keep it per thread
/// let guard = handle.pin();
/// assert_eq!(tree.get(&1, &guard), Some(&"one"));
/// ```
#[inline]
pub fn default_collector() -> &'static Collector {
    #[cfg(feature = "std")]
    {
        use core::sync::atomic::{AtomicPtr, Ordering};
        // crossbeam's, remembered: its `default_collector()` is an
        // out-of-line `OnceLock` read, and every guarded read compares its
        // guard's collector with this one (`Reclaimer::check_guard`).
        static CACHED: AtomicPtr<Collector> = AtomicPtr::new(core::ptr::null_mut());
        // Acquire: pairs with the Release store below, so the collector is
        // seen as the storing thread saw it (crossbeam's `OnceLock` made
        // that thread see it whole).
        let c = CACHED.load(Ordering::Acquire);
        // SAFETY: non-null, it came from the `&'static Collector` below.
        if let Some(c) = unsafe { c.as_ref() } {
            return c;
        }
        let c = crossbeam_epoch::default_collector();
        // Release: pairs with the Acquire load above. Racing threads store
        // the same pointer.
        CACHED.store(core::ptr::from_ref(c).cast_mut(), Ordering::Release);
        c
    }
    #[cfg(not(feature = "std"))]
    {
        use alloc::boxed::Box;
        use core::sync::atomic::{AtomicPtr, Ordering};
        static DEFAULT: AtomicPtr<Collector> = AtomicPtr::new(core::ptr::null_mut());
        // Acquire: pairs with the AcqRel exchange below, so the collector
        // another thread made is seen whole.
        let mut c = DEFAULT.load(Ordering::Acquire);
        if c.is_null() {
            let made = Box::into_raw(Box::new(Collector::new()));
            c = match DEFAULT.compare_exchange(
                core::ptr::null_mut(),
                made,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => made,
                Err(theirs) => {
                    // SAFETY: `made` came from `Box::into_raw` just above and
                    // was never shared (the exchange failed).
                    drop(unsafe { Box::from_raw(made) });
                    theirs
                }
            };
        }
        // SAFETY: a non-null `DEFAULT` came from `Box::into_raw` and is
        // never freed, so it lives for the rest of the process.
        unsafe { &*c }
    }
}

impl Reclaimer {
    crate::sync::const_fn_unless_loom! {
        /// Uses crossbeam-epoch's default collector.
        pub(crate) fn global() -> Self {
            Reclaimer { collector: None }
        }
    }

    /// Uses `collector`.
    pub(crate) fn with_collector(collector: Collector) -> Self {
        Reclaimer {
            collector: Some(collector),
        }
    }

    /// A reclaimer for another tree that uses the same collector.
    pub(crate) fn same_collector(&self) -> Self {
        match &self.collector {
            None => Reclaimer::global(),
            Some(c) => Reclaimer::with_collector(c.clone()),
        }
    }

    /// Pins the tree's collector. For an own collector this registers a
    /// fresh participant each time (an allocation): callers on a hot path
    /// should pin their own `LocalHandle` of that collector instead.
    pub(crate) fn pin(&self) -> Guard {
        match &self.collector {
            None => pin(),
            Some(c) => {
                let handle = c.register();
                // Release: as in [`pin`].
                core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
                handle.pin()
            }
        }
    }

    /// Panics unless `guard` pins this tree's collector: a guard of another
    /// collector (or `unprotected()`) would not keep our nodes alive.
    #[inline(always)]
    pub(crate) fn check_guard(&self, guard: &Guard) {
        let ok = match (guard.collector(), &self.collector) {
            (Some(g), Some(c)) => g == c,
            (Some(g), None) => g == default_collector(),
            (None, _) => false,
        };
        if !ok {
            wrong_guard();
        }
    }
}

/// `check_guard`'s panic, out of the readers' way.
#[cold]
#[inline(never)]
fn wrong_guard() -> ! {
    panic!(
        "latchtree: the guard does not pin this tree's collector \
         (use the tree's own `pin()` or the collector it was built with)"
    )
}

/// The no_std default collector, made on first use by racing threads (Miri
/// runs it: `.ci/run`'s miri layer).
#[cfg(all(test, not(latchtree_loom), not(feature = "std")))]
mod tests {
    #[test]
    fn every_thread_gets_the_same_default_collector() {
        let [a, b] = std::thread::scope(|s| {
            let t =
                [0, 1].map(|_| s.spawn(|| core::ptr::from_ref(super::default_collector()).addr()));
            t.map(|t| t.join().unwrap())
        });
        assert_eq!(a, b);
        let g = super::pin();
        assert!(g.collector() == Some(super::default_collector()));
    }
}
