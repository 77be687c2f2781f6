//! The reclamation seam: how nodes that left both copies are freed.
//!
//! Normally a retired node is handed to crossbeam-epoch and freed once every
//! guard pinned before the retirement is gone. Under `cfg(latchtree_loom)` the epoch is
//! invisible to the model checker (crossbeam keys its own loom support on a
//! different cfg), so retired nodes go to a graveyard that is emptied when
//! the tree is dropped, at the end of the model: loom then explores the latch
//! and the link stores, which is what it must see.
//!
//! # No user `Drop` under a writer lock
//!
//! crossbeam runs deferred destructors inside *any* pin that collects (a
//! thread's outermost pin, every 128th; any `flush`), so a reader that pins
//! inside a batch closure could run a retired entry's `Drop` under the writer
//! lock, where a `Drop` that writes to the same tree cannot take effect.
//! Hence every write runs inside a [`WriterScope`], and a deferred destructor
//! that finds its thread inside one does not run there: it is *postponed* to
//! a thread-local list that the outermost scope drains after the writer lock
//! is released. This holds whatever collector or handle the pin came from.
//!
//! A panic from a deferred destructor cannot be propagated to anyone (it
//! runs at an arbitrary point, inside some pin); it is caught and counted
//! ([`swallowed_drop_panics`]).

use core::cell::{Cell, RefCell};
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
struct Retired {
    ptr: NonNull<u8>,
    drop: unsafe fn(NonNull<u8>),
}

/// Drops the `Box<T>` behind `ptr`. A panic from `T`'s `Drop` is caught and
/// counted ([`swallowed_drop_panics`]): it runs at an arbitrary later point
/// on an arbitrary thread (inside another thread's `pin`), where unwinding
/// would be far worse.
///
/// # Safety
/// `ptr` came from `Box::<T>::into_raw` and is not used again.
unsafe fn drop_box<T>(ptr: NonNull<u8>) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: caller.
        drop(unsafe { Box::from_raw(ptr.cast::<T>().as_ptr()) });
    }));
    if r.is_err() {
        count_swallowed_drop_panic();
    }
}

/// Panics from `K`/`V` `Drop`s that could not be propagated, process-wide.
#[cfg(not(latchtree_loom))]
static SWALLOWED_DROP_PANICS: crate::sync::AtomicU64 = crate::sync::AtomicU64::new(0);

/// Counts one panic from a user `Drop` that was caught and not propagated.
pub(crate) fn count_swallowed_drop_panic() {
    // Relaxed: a statistic; nothing is ordered by it.
    #[cfg(not(latchtree_loom))]
    SWALLOWED_DROP_PANICS.fetch_add(1, crate::sync::Ordering::Relaxed);
}

/// How many panics from a [`LatchTree`](crate::LatchTree) key's or value's
/// `Drop` were caught and not propagated, in the whole process: during
/// background reclamation (which runs at an arbitrary point on an arbitrary
/// thread, where unwinding would be far worse), after the first one in a
/// tree's own `drop`, and every one when a tree is dropped while its thread
/// is already unwinding (resuming would abort the process).
///
/// Process-wide rather than per tree: a retired entry may be reclaimed after
/// its tree is gone. Always 0 under the crate's loom build.
///
/// ```
/// let before = latchtree::swallowed_drop_panics();
/// struct Bomb;
/// impl Drop for Bomb {
///     fn drop(&mut self) {
///         panic!("boom");
///     }
/// }
/// let r = std::panic::catch_unwind(|| {
///     let tree = latchtree::LatchTree::new();
///     tree.insert(1, Bomb);
///     panic!("unwinding drops the tree: its Bomb's panic is counted, not resumed");
/// });
/// assert!(r.is_err());
/// assert!(latchtree::swallowed_drop_panics() > before);
/// ```
pub fn swallowed_drop_panics() -> u64 {
    #[cfg(not(latchtree_loom))]
    {
        SWALLOWED_DROP_PANICS.load(crate::sync::Ordering::Relaxed)
    }
    #[cfg(latchtree_loom)]
    {
        0
    }
}

std::thread_local! {
    /// How many writer scopes this thread is inside. No destructor, so it
    /// stays readable during thread-local destruction.
    static WRITE_DEPTH: Cell<usize> = const { Cell::new(0) };
    /// Destructors postponed until this thread leaves its outermost scope.
    static POSTPONED: RefCell<Vec<Retired>> = const { RefCell::new(Vec::new()) };
}

/// Marks the current thread as (possibly) holding a writer lock, from
/// before it takes the lock until after it released it; see the module docs.
pub(crate) struct WriterScope(());

impl WriterScope {
    /// Enters a scope; hold the value across the whole write.
    pub(crate) fn enter() -> Self {
        WRITE_DEPTH.with(|d| d.set(d.get() + 1));
        WriterScope(())
    }
}

impl Drop for WriterScope {
    fn drop(&mut self) {
        let depth = WRITE_DEPTH.with(|d| {
            d.set(d.get() - 1);
            d.get()
        });
        if depth > 0 {
            return;
        }
        // Outermost scope left: the lock is released. Run what was
        // postponed, one at a time without holding the list borrowed (a
        // destructor may write, and so postpone and drain, itself).
        while let Some(r) = POSTPONED.try_with(|p| p.borrow_mut().pop()).ok().flatten() {
            // SAFETY: each entry was retired once with its matching dropper,
            // and its epoch had passed when it was postponed.
            unsafe { (r.drop)(r.ptr) };
        }
    }
}

/// The deferred destructor of a retired `Box<T>`: runs it now, or postpones
/// it if this thread is inside a writer scope.
///
/// # Safety
/// As for [`drop_box`]; no pinned reader can reach `ptr` any more.
#[cfg_attr(latchtree_loom, allow(dead_code))]
unsafe fn drop_or_postpone<T>(ptr: NonNull<u8>) {
    let mut entry = Some(Retired {
        ptr,
        drop: drop_box::<T>,
    });
    if WRITE_DEPTH.with(Cell::get) > 0 {
        // Fails only during this thread's thread-local destruction (a write
        // from a thread-local destructor): then it runs right away.
        let _ = POSTPONED.try_with(|p| p.borrow_mut().extend(entry.take()));
    }
    if let Some(r) = entry {
        // SAFETY: caller.
        unsafe { (r.drop)(r.ptr) };
    }
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
            unsafe { guard.defer_unchecked(move || drop_or_postpone::<T>(ptr)) };
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
