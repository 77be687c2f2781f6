//! The store of removed modules an index keeps for late samples, if asked
//! ([`KeepRemoved`]): what [`AddrIndex::remove`](crate::AddrIndex::remove) hands back, kept by id
//! until forgotten or, bounded, until newer removals push it out, so that
//! an id a signal handler recorded still resolves after its module is gone
//! without a side table of the caller's (the calls are `removed.rs`'s).
//!
//! The store is beside the latch, under a lock of its own. A removal is
//! staged by the batch and enters the store when the batch commits, under
//! the writer lock and before the flip that takes the module out of the
//! index: a reader that misses the id in the index and then asks the store
//! finds it. What the store lets go of (evicted or forgotten) may hold the
//! value's last reference: it is dropped after the writer lock, never under
//! it, like every value the index drops.

use super::module::Removed;
use crate::sync::{Mutex, lock};
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

/// Which removed modules an [`AddrIndex`](crate::AddrIndex) keeps, so that a late sample's
/// id still resolves ([`AddrIndex::removed`](crate::AddrIndex::removed)):
/// opt-in, with [`AddrIndex::keeping_removed`](crate::AddrIndex::keeping_removed);
/// [`AddrIndex::new`](crate::AddrIndex::new) keeps none.
///
/// ```
/// use latchtree::{AddrIndex, KeepRemoved};
/// static CODE: AddrIndex<&str> = AddrIndex::keeping_removed(KeepRemoved::Last(2));
/// let ids: Vec<_> = (0..3u64).map(|i| CODE.insert(i * 16..i * 16 + 16, "f").unwrap()).collect();
/// for &id in &ids {
///     CODE.remove(id);
/// }
/// assert!(CODE.removed(ids[0]).is_none(), "pushed out by newer removals");
/// assert!(CODE.removed(ids[1]).is_some() && CODE.removed(ids[2]).is_some());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeepRemoved {
    /// The last `n` modules removed (by the time of their removal); an
    /// older one is forgotten when a newer one is removed past the bound.
    /// `Last(0)` keeps none: what [`AddrIndex::new`](crate::AddrIndex::new)
    /// does.
    Last(usize),
    /// Every removed module, until [`forget`](crate::AddrIndex::forget) or
    /// [`forget_removed`](crate::AddrIndex::forget_removed): memory grows
    /// with every removal until then.
    UntilForgotten,
}

/// The store (see the module docs).
pub(super) struct Kept<T> {
    pub(super) keep: KeepRemoved,
    store: Mutex<Store<T>>,
}

/// The kept modules, by id, and in the order of their removal (for
/// `Last`: ids forgotten since stay in `order` until they reach its front,
/// or until it is compacted).
struct Store<T> {
    by_id: BTreeMap<u64, Removed<T>>,
    order: VecDeque<u64>,
}

impl<T> Kept<T> {
    crate::sync::const_fn_unless_loom! {
        /// An empty store that keeps what `keep` says.
        pub(super) fn new(keep: KeepRemoved) -> Self {
            Kept {
                keep,
                store: Mutex::new(Store {
                    by_id: BTreeMap::new(),
                    order: VecDeque::new(),
                }),
            }
        }
    }

    /// Whether removals are kept at all (a batch stages them only then).
    #[inline]
    pub(super) fn keeps(&self) -> bool {
        self.keep != KeepRemoved::Last(0)
    }

    /// Takes in the removals of a batch that commits (writer lock held);
    /// returns what that pushed out, for the caller to drop after the
    /// writer lock. Out of line: most indexes keep nothing.
    #[cold]
    #[inline(never)]
    pub(super) fn commit(&self, removed: Vec<Removed<T>>) -> Vec<Removed<T>> {
        let mut evicted = Vec::new();
        let mut store = lock(&self.store);
        let Store { by_id, order } = &mut *store;
        for r in removed {
            if let KeepRemoved::Last(_) = self.keep {
                order.push_back(r.id.0);
            }
            // Ids are never reused: nothing kept has this one.
            by_id.insert(r.id.0, r);
        }
        if let KeepRemoved::Last(n) = self.keep {
            while by_id.len() > n {
                let Some(oldest) = order.pop_front() else {
                    break;
                };
                evicted.extend(by_id.remove(&oldest));
            }
            // Ids forgotten meanwhile linger in `order`: drop them once
            // they outnumber the kept ones.
            if order.len() > 2 * by_id.len() + 16 {
                order.retain(|id| by_id.contains_key(id));
            }
        }
        evicted
    }

    /// The kept module `id`, shared.
    pub(super) fn get(&self, id: u64) -> Option<Removed<T>> {
        lock(&self.store).by_id.get(&id).cloned()
    }

    /// How many modules are kept.
    pub(super) fn len(&self) -> usize {
        lock(&self.store).by_id.len()
    }

    /// Lets go of module `id`, if kept (for the caller to drop after any
    /// writer lock).
    pub(super) fn forget(&self, id: u64) -> Option<Removed<T>> {
        lock(&self.store).by_id.remove(&id)
    }

    /// Lets go of every kept module (for the caller to drop after any
    /// writer lock).
    pub(super) fn forget_all(&self) -> Vec<Removed<T>> {
        let mut store = lock(&self.store);
        store.order.clear();
        core::mem::take(&mut store.by_id).into_values().collect()
    }

    /// The kept ids, for the invariant checker.
    pub(super) fn ids(&self) -> Vec<u64> {
        lock(&self.store).by_id.keys().copied().collect()
    }
}

/// Drops what the store let go of once this thread leaves its outermost
/// write (now, unless inside another write's closure): values are never
/// dropped under a writer lock.
#[cold]
pub(super) fn drop_after_write<T: Send + Sync + 'static>(gone: Vec<Removed<T>>) {
    if !gone.is_empty() {
        crate::reclaim::after_outermost_write(move || drop(gone));
    }
}
