//! The reclamation seam: how nodes that left both copies are freed.
//!
//! Normally a retired node is handed to crossbeam-epoch and freed once every
//! guard pinned before the retirement is gone. Under `cfg(latchtree_loom)` the epoch is
//! invisible to the model checker (crossbeam keys its own loom support on a
//! different cfg), so retired nodes go to a graveyard that is emptied when
//! the tree is dropped, at the end of the model: loom then explores the latch
//! and the link stores, which is what it must see.

use core::ptr::NonNull;
use crossbeam_epoch::{Collector, Guard};

/// Which collector a tree's guards must come from, and how it retires.
pub(crate) struct Reclaimer {
    /// `None`: crossbeam-epoch's default (global) collector.
    collector: Option<Collector>,
    #[cfg(latchtree_loom)]
    graveyard: std::sync::Mutex<Vec<Retired>>,
}

impl core::fmt::Debug for Reclaimer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reclaimer")
            .field("own_collector", &self.collector.is_some())
            .finish_non_exhaustive()
    }
}

/// A type-erased `Box<T>` waiting to be dropped.
#[cfg_attr(not(latchtree_loom), allow(dead_code))]
struct Retired {
    ptr: NonNull<u8>,
    drop: unsafe fn(NonNull<u8>),
}

/// Drops the `Box<T>` behind `ptr`. A panic from `T`'s `Drop` is caught and
/// discarded: it runs at an arbitrary later point on an arbitrary thread
/// (inside another thread's `pin`), where unwinding would be far worse.
///
/// # Safety
/// `ptr` came from `Box::<T>::into_raw` and is not used again.
unsafe fn drop_box<T>(ptr: NonNull<u8>) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: caller.
        drop(unsafe { Box::from_raw(ptr.cast::<T>().as_ptr()) });
    }));
}

impl Reclaimer {
    crate::sync::const_fn_unless_loom! {
        /// Uses crossbeam-epoch's default collector.
        pub(crate) fn global() -> Self {
            Reclaimer {
                collector: None,
                #[cfg(latchtree_loom)]
                graveyard: std::sync::Mutex::new(Vec::new()),
            }
        }
    }

    /// Uses `collector`.
    pub(crate) fn with_collector(collector: Collector) -> Self {
        Reclaimer {
            collector: Some(collector),
            #[cfg(latchtree_loom)]
            graveyard: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Pins the tree's collector. For an own collector this registers a
    /// fresh participant each time (an allocation): callers on a hot path
    /// should pin their own `LocalHandle` of that collector instead.
    pub(crate) fn pin(&self) -> Guard {
        match &self.collector {
            None => crossbeam_epoch::pin(),
            Some(c) => c.register().pin(),
        }
    }

    /// Panics unless `guard` pins this tree's collector: a guard of another
    /// collector (or `unprotected()`) would not keep our nodes alive.
    #[inline]
    pub(crate) fn check_guard(&self, guard: &Guard) {
        let ok = match (guard.collector(), &self.collector) {
            (Some(g), Some(c)) => g == c,
            (Some(g), None) => g == crossbeam_epoch::default_collector(),
            (None, _) => false,
        };
        assert!(
            ok,
            "latchtree: the guard does not pin this tree's collector \
             (use the tree's own `pin()` or the collector it was built with)"
        );
    }

    /// Frees `ptr` once no reader pinned before now can still reach it.
    ///
    /// # Safety
    /// `ptr` came from `Box::<T>::into_raw`, is unreachable for readers that
    /// pin from now on (it left both copies), and is retired once; `guard`
    /// pins this reclaimer's collector.
    pub(crate) unsafe fn retire<T>(&self, guard: &Guard, ptr: NonNull<T>) {
        let ptr = ptr.cast::<u8>();
        #[cfg(not(latchtree_loom))]
        {
            // SAFETY: pinned readers that can still see `ptr` keep the epoch
            // from advancing past it (caller: it is unreachable for later
            // pins), so the destructor runs after the last of them unpins.
            unsafe { guard.defer_unchecked(move || drop_box::<T>(ptr)) };
        }
        #[cfg(latchtree_loom)]
        {
            let _ = guard;
            self.graveyard
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Retired {
                    ptr,
                    drop: drop_box::<T>,
                });
        }
    }
}

#[cfg(latchtree_loom)]
impl Drop for Reclaimer {
    fn drop(&mut self) {
        let graves = core::mem::take(self.graveyard.get_mut().unwrap_or_else(|e| e.into_inner()));
        for r in graves {
            // SAFETY: each entry was retired once with its matching dropper;
            // dropping the tree means no reader is left.
            unsafe { (r.drop)(r.ptr) };
        }
    }
}
