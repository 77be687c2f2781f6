//! What an index tells of the removed modules it keeps for late samples,
//! if asked ([`KeepRemoved`]): [`AddrIndex::keeping_removed`],
//! [`removed`](AddrIndex::removed), [`forget`](AddrIndex::forget). The
//! store itself is `kept.rs`'s.

use super::index::AddrIndex;
use super::kept::{KeepRemoved, drop_after_write};
use super::module::Removed;
use super::types::ModuleId;

impl<T> AddrIndex<T> {
    crate::sync::const_fn_unless_loom! {
        /// An empty index that keeps removed modules as `keep` says, so
        /// that an id recorded before a removal (in a signal handler, a
        /// sample ring) still resolves afterwards, through
        /// [`removed`](AddrIndex::removed), with no map of the caller's.
        /// `const`, for a `static`.
        ///
        /// ```
        /// use latchtree::{AddrIndex, KeepRemoved, ModuleId};
        ///
        /// static CODE: AddrIndex<String> = AddrIndex::keeping_removed(KeepRemoved::UntilForgotten);
        ///
        /// let id = CODE.insert(0x1000..0x2000, "jit:fib".to_string()).unwrap();
        /// let sample = CODE.lookup(0x1234).map(|h| (h.id().get(), h.module_offset(0x1234))); // in a handler
        /// CODE.remove(id); // the code is freed
        ///
        /// // Later, on a normal thread: live or removed, the id names its module.
        /// let (raw, offset) = sample.unwrap();
        /// let id = ModuleId::from_raw(raw);
        /// let name = match CODE.get(id, &CODE.pin()) {
        ///     Some(name) => name.clone(),
        ///     None => CODE.removed(id).map(|r| r.value().to_string()).unwrap(),
        /// };
        /// assert_eq!((name.as_str(), offset), ("jit:fib", 0x234));
        /// assert!(CODE.forget(id) && CODE.removed(id).is_none());
        /// ```
        pub fn keeping_removed(keep: KeepRemoved) -> Self {
            let mut index = Self::new();
            // A `Copy` field: nothing to drop in a `const fn`.
            index.kept.keep = keep;
            index
        }
    }

    /// Which removed modules this index keeps (see
    /// [`keeping_removed`](AddrIndex::keeping_removed)).
    ///
    /// ```
    /// use latchtree::{AddrIndex, KeepRemoved};
    /// assert_eq!(AddrIndex::<()>::new().keeps_removed(), KeepRemoved::Last(0));
    /// ```
    pub fn keeps_removed(&self) -> KeepRemoved {
        self.kept.keep
    }
}

impl<T: Send + Sync + 'static> AddrIndex<T> {
    /// What the index knew of module `id`, which a write removed, if it
    /// keeps it ([`KeepRemoved`]): what [`remove`](AddrIndex::remove)
    /// returned (the value, shared, its segments, base and tag). `None` for
    /// a module still registered (ask [`get`](AddrIndex::get) or
    /// [`module`](AddrIndex::module) first: a module the index misses has
    /// been removed, and is kept here from that moment on), for one
    /// forgotten or pushed out, and for an unknown id. A normal thread's
    /// call: it takes a lock (not the writer's).
    ///
    /// The kept value is dropped once the module is forgotten or pushed out
    /// (and no `Removed` you hold shares it): keeping removed modules keeps
    /// their values. See the example on
    /// [`keeping_removed`](AddrIndex::keeping_removed).
    pub fn removed(&self, id: ModuleId) -> Option<Removed<T>> {
        self.kept.get(id.0)
    }

    /// How many removed modules the index keeps now.
    ///
    /// ```
    /// use latchtree::{AddrIndex, KeepRemoved};
    /// let index = AddrIndex::keeping_removed(KeepRemoved::Last(8));
    /// let id = index.insert(0..10, 'a').unwrap();
    /// assert_eq!(index.removed_count(), 0);
    /// index.remove(id);
    /// assert_eq!(index.removed_count(), 1);
    /// ```
    pub fn removed_count(&self) -> usize {
        self.kept.len()
    }

    /// Forgets removed module `id`: [`removed`](AddrIndex::removed) no
    /// longer finds it, and the index lets go of what it kept (the value is
    /// dropped here unless something else still shares it; inside a
    /// [`write`](AddrIndex::write) closure, once that write has released
    /// its lock, except without `std`: see the `guide::no_std` page).
    /// Returns whether it was
    /// kept.
    ///
    /// ```
    /// use latchtree::{AddrIndex, KeepRemoved};
    /// let index = AddrIndex::keeping_removed(KeepRemoved::UntilForgotten);
    /// let id = index.insert(0..10, 'a').unwrap();
    /// assert!(!index.forget(id), "still registered: nothing to forget");
    /// index.remove(id);
    /// assert!(index.forget(id) && !index.forget(id));
    /// ```
    pub fn forget(&self, id: ModuleId) -> bool {
        let gone = self.kept.forget(id.0);
        let forgotten = gone.is_some();
        drop_after_write(gone.into_iter().collect());
        forgotten
    }

    /// Forgets every removed module the index keeps (once no recorded id
    /// that names one is left to resolve); returns how many. Their values
    /// are dropped as in [`forget`](AddrIndex::forget).
    ///
    /// ```
    /// use latchtree::{AddrIndex, KeepRemoved};
    /// let index = AddrIndex::keeping_removed(KeepRemoved::UntilForgotten);
    /// for i in 0..3u64 {
    ///     let id = index.insert(i * 10..i * 10 + 10, i).unwrap();
    ///     index.remove(id);
    /// }
    /// assert_eq!(index.forget_removed(), 3);
    /// assert_eq!(index.removed_count(), 0);
    /// ```
    pub fn forget_removed(&self) -> usize {
        let gone = self.kept.forget_all();
        let n = gone.len();
        drop_after_write(gone);
        n
    }
}
