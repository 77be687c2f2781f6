//! [`HandlerSection`]: reads from a signal handler that borrow a module's
//! value in place, and [`AddrIndex::synchronize`], which waits for them.
//! The grace period itself is `crate::reclaim`'s (`section.rs`).

use super::index::AddrIndex;
use super::queries::hit_and_record;
use super::record::Record;
use super::types::{Hit, ModuleId};
use crate::reclaim::Sections;
use crate::sync::AtomicUsize;
use core::fmt;

/// An open **handler read section** on an [`AddrIndex`]: lookups that hand
/// back the module's value by reference, from a signal handler.
/// **Async-signal-safe**, like [`lookup`](AddrIndex::lookup): opening,
/// reading and closing take no lock, pin no epoch, touch no thread-local
/// and allocate nothing; they never wait for a writer, not even one the
/// handler interrupted on its own thread. Opening costs an atomic
/// read-modify-write and a `SeqCst` fence, closing one more
/// read-modify-write, on a cache line shared only with the threads of one
/// of 16 shards.
///
/// While a section is open, no value it could have seen is dropped by the
/// index: a value removed or replaced while sections are open is dropped
/// by a later write (or [`flush`](AddrIndex::flush)) once every section
/// that was open at its removal has closed. Writers never wait for
/// sections; [`synchronize`](AddrIndex::synchronize) does, for callers that
/// want to.
///
/// Keep sections short: a section left open (or leaked with
/// `mem::forget`) keeps every value removed after it opened alive.
///
/// ```
/// use latchtree::AddrIndex;
///
/// /// What a trap needs: read in place by the handler, freed by the index.
/// struct TrapTable { traps: Vec<(u64, &'static str)> }
///
/// static CODE: AddrIndex<TrapTable> = AddrIndex::new();
///
/// /// The handler's work (async-signal-safe).
/// fn on_trap(pc: u64) -> Option<&'static str> {
///     let section = CODE.handler_section();
///     let hit = section.lookup(pc)?;
///     let at = hit.module_offset(pc);
///     hit.value().traps.iter().find(|t| t.0 == at).map(|t| t.1)
/// }
///
/// let f = CODE.insert(0x1000..0x1400, TrapTable { traps: vec![(0x10, "out of bounds")] }).unwrap();
/// assert_eq!(on_trap(0x1010), Some("out of bounds"));
/// // Tier-up: the old table is dropped once no section can see it.
/// let old = CODE.set_value(f, TrapTable { traps: vec![(0x20, "overflow")] }, 0).unwrap();
/// assert_eq!(old.traps[0].1, "out of bounds");
/// assert_eq!((on_trap(0x1010), on_trap(0x1020)), (None, Some("overflow")));
/// ```
#[must_use = "a section protects only the lookups made through it"]
pub struct HandlerSection<'a, T> {
    index: &'a AddrIndex<T>,
    count: &'a AtomicUsize,
}

impl<T> fmt::Debug for HandlerSection<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerSection").finish_non_exhaustive()
    }
}

impl<T> Drop for HandlerSection<'_, T> {
    #[inline]
    fn drop(&mut self) {
        Sections::exit(self.count);
    }
}

impl<T> AddrIndex<T> {
    /// Opens a [`HandlerSection`]: async-signal-safe lookups that borrow
    /// the module's value. See the type's docs.
    #[inline]
    pub fn handler_section(&self) -> HandlerSection<'_, T> {
        HandlerSection {
            index: self,
            count: self.sections.enter(),
        }
    }
}

impl<T> HandlerSection<'_, T> {
    /// Dereferences a record pointer read in a validated read of this
    /// section.
    ///
    /// # Safety
    /// `record` was read, in a read the latch validated, from a range node
    /// or table slot of a stable copy, after this section was opened.
    unsafe fn record(&self, record: *mut Record<T>) -> &Record<T> {
        // The record was linked in the validated version, read after the
        // section opened; the index frees a record only after every section
        // open when it was unlinked has closed (`reclaim/section.rs`), and this
        // one cannot close while `&self` is borrowed.
        // SAFETY: so it is live and immutable for as long as `&self`.
        unsafe { &*record }
    }

    /// [`AddrIndex::module_address`] in a signal handler: the range
    /// containing `addr` with the module's value, borrowed for as long as
    /// the section is open. See the example on [`HandlerSection`].
    #[inline]
    pub fn lookup(&self, addr: u64) -> Option<Hit<'_, T>> {
        let index = self.index;
        // Every pointer a reader can load from the tree points into the slab (type-stable, freed
        // with the index, which `&self` borrows).
        // SAFETY: so `read`'s contract holds.
        let (raw, record) = unsafe { index.tree.read(|view| index.find(view, addr)) }?;
        // SAFETY: validated by the read, after the section opened.
        let value = &*unsafe { self.record(record) }.value;
        Some(Hit { raw, value })
    }

    /// [`lookup`](HandlerSection::lookup) of `K` addresses at once (as
    /// [`AddrIndex::lookup_many`]), all from one version of the index.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert(0x1000..0x2000, "a").unwrap();
    /// index.insert(0x3000..0x4000, "b").unwrap();
    /// let section = index.handler_section();
    /// let hits = section.lookup_many([0x1800, 0x2800, 0x3000]);
    /// let names: Vec<_> = hits.iter().map(|h| h.map(|h| *h.value())).collect();
    /// assert_eq!(names, [Some("a"), None, Some("b")]);
    /// ```
    #[inline]
    pub fn lookup_many<const K: usize>(&self, addrs: [u64; K]) -> [Option<Hit<'_, T>>; K] {
        let index = self.index;
        // SAFETY: as in `lookup`.
        let found = unsafe {
            index
                .tree
                .read(|view| AddrIndex::find_many(view, addrs, hit_and_record))
        };
        found.map(|hit| {
            hit.map(|(raw, record)| Hit {
                raw,
                // SAFETY: validated by the read, after the section opened.
                value: &*unsafe { self.record(record) }.value,
            })
        })
    }

    /// The value of module `id`, if registered ([`AddrIndex::get`] in a
    /// signal handler).
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert(0..10, "m").unwrap();
    /// assert_eq!(index.handler_section().get(id), Some(&"m"));
    /// ```
    pub fn get(&self, id: ModuleId) -> Option<&T> {
        let index = self.index;
        // The table segments a reader can load are retired through the index's limbo like records, so
        // they outlive this section; the tree's own words are type-stable.
        // SAFETY: so `read`'s contract holds.
        let record = unsafe {
            index
                .tree
                .read(|view| Some(index.tables[view.copy()].find(id.0)))
        };
        // SAFETY: validated by the read, after the section opened.
        (!record.is_null()).then(|| &*unsafe { self.record(record) }.value)
    }
}
