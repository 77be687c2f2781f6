//! The plain types of the address index: ids, per-module metadata, segments
//! and the hits readers get back.

use alloc::boxed::Box;
use core::fmt;
use core::ops::Range;

/// A module's identity within one [`AddrIndex`](crate::AddrIndex). Ids are
/// handed out in increasing order starting at 1 and are never reused, so an
/// `(id, offset)` pair recorded in a signal handler names the same module
/// forever, even after it was removed.
///
/// ```
/// let index = latchtree::AddrIndex::new();
/// let a = index.insert(0..10, "a").unwrap();
/// index.remove(a);
/// let b = index.insert(0..10, "b").unwrap();
/// assert!(a < b);
/// assert_eq!(format!("{a}"), "#1");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModuleId(pub(crate) u64);

impl ModuleId {
    /// The id as a number (ids start at 1).
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// assert_eq!(index.insert(0..1, ()).unwrap().get(), 1);
    /// ```
    pub fn get(self) -> u64 {
        self.0
    }

    /// The id whose [`get`](ModuleId::get) is `n`: turns a number stored by
    /// a signal handler (in an atomic or a ring buffer) back into an id. An
    /// id that was never issued simply names no module.
    ///
    /// ```
    /// use latchtree::{AddrIndex, ModuleId};
    /// let index = AddrIndex::new();
    /// let id = index.insert(0..10, "m").unwrap();
    /// let stored: u64 = index.lookup(3).unwrap().id().get(); // e.g. in a handler
    /// assert_eq!(ModuleId::from_raw(stored), id);
    /// assert_eq!(index.get(ModuleId::from_raw(999), &index.pin()), None);
    /// ```
    pub const fn from_raw(n: u64) -> ModuleId {
        ModuleId(n)
    }
}

impl fmt::Display for ModuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Per-module metadata that the async-signal-safe
/// [`lookup`](crate::AddrIndex::lookup) returns with every hit.
///
/// ```
/// use latchtree::{AddrIndex, ModuleMeta};
/// let index = AddrIndex::new();
/// let meta = ModuleMeta { base: Some(0x7f00_0000), tag: 42 };
/// index.insert_module_with([0x7f00_1000..0x7f00_2000], "libm.so.6", meta).unwrap();
/// let hit = index.lookup(0x7f00_1234).unwrap();
/// assert_eq!((hit.base(), hit.tag(), hit.module_offset(0x7f00_1234)), (0x7f00_0000, 42, 0x1234));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ModuleMeta {
    /// The address module offsets are relative to (e.g. an ELF object's load
    /// bias). `None`: the module's lowest range start.
    pub base: Option<u64>,
    /// A user word: an index into a preallocated table, a generation
    /// number… A pointer in it must outlive every lookup that may have
    /// returned it (nothing tracks that); data a handler reads belongs in
    /// the module's value, read through a
    /// [`HandlerSection`](crate::HandlerSection).
    pub tag: u64,
}

/// One range of a module plus a per-range user word, `flags`, that
/// [`lookup`](crate::AddrIndex::lookup) returns with a hit in that range
/// (an ELF segment's `p_flags`, so that a handler learns R/W/X).
///
/// ```
/// use latchtree::{AddrIndex, Segment};
/// let index = AddrIndex::new();
/// let text = Segment { range: 0x1000..0x2000, flags: 5 };
/// index.insert_module([text, Segment::from(0x3000..0x3100)], ()).unwrap();
/// assert_eq!(index.lookup(0x1010).unwrap().flags(), 5);
/// assert_eq!(index.lookup(0x3010).unwrap().flags(), 0);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    /// The addresses `[start, end)`.
    pub range: Range<u64>,
    /// A user word for this range.
    pub flags: u32,
}

impl From<Range<u64>> for Segment {
    /// A segment with `flags` 0.
    ///
    /// ```
    /// let s = latchtree::Segment::from(0..10);
    /// assert_eq!((s.range, s.flags), (0..10, 0));
    /// ```
    fn from(range: Range<u64>) -> Self {
        Segment { range, flags: 0 }
    }
}

/// A module's segments, sorted by start; the common single segment is kept
/// inline (no allocation).
#[derive(Clone, Debug)]
pub(crate) enum Segments {
    One(Segment),
    Many(Box<[Segment]>),
}

impl core::ops::Deref for Segments {
    type Target = [Segment];

    fn deref(&self) -> &[Segment] {
        match self {
            Segments::One(s) => core::slice::from_ref(s),
            Segments::Many(s) => s,
        }
    }
}

/// How much memory an index's range nodes take ([`AddrIndex::node_memory`](crate::AddrIndex::node_memory)).
///
/// Nodes live in chunks the index never returns to the allocator while it
/// lives (the signal-safe [`lookup`](crate::AddrIndex::lookup) may stand on
/// any of them); on Linux with `std`, the pages of chunks whose every node
/// is free go back to the OS instead (their addresses stay mapped). Writes
/// do that when the rest of the index keeps enough free nodes, and
/// [`synchronize`](crate::AddrIndex::synchronize) does it for every empty
/// chunk, after moving the live ranges out of a sparse slab.
///
/// ```
/// let index = latchtree::AddrIndex::new();
/// let ids: Vec<_> = (0..10_000u64).map(|i| index.insert(i * 16..i * 16 + 8, ()).unwrap()).collect();
/// let grown = index.node_memory();
/// for id in &ids[100..] {
///     index.remove(*id);
/// }
/// index.synchronize();
/// let after = index.node_memory();
/// assert_eq!(after.node_bytes, grown.node_bytes); // kept mapped…
/// # #[cfg(all(target_os = "linux", not(miri)))]
/// assert!(after.resident_node_bytes < grown.resident_node_bytes / 4); // …but given back
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeMemory {
    /// Bytes of node chunks allocated.
    pub node_bytes: usize,
    /// Bytes of node chunks whose pages were not given back to the OS (an
    /// upper bound on what they keep resident).
    pub resident_node_bytes: usize,
    /// Bytes of the nodes holding a range now.
    pub live_node_bytes: usize,
}

/// The result of the async-signal-safe
/// [`AddrIndex::lookup`](crate::AddrIndex::lookup): plain values, no borrow.
///
/// Every field comes from one committed version of the index: the range,
/// the id, the base, the tag and the flags always belong together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RawHit {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) id: ModuleId,
    pub(crate) base: u64,
    pub(crate) tag: u64,
    pub(crate) flags: u32,
}

impl RawHit {
    /// The registered range that contains the address.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// let id = index.insert(0x100..0x200, ()).unwrap();
    /// let hit = index.lookup(0x180).unwrap();
    /// assert_eq!(hit.range(), 0x100..0x200);
    /// assert_eq!(hit.id(), id);
    /// ```
    pub fn range(&self) -> Range<u64> {
        self.start..self.end
    }

    /// The module that owns the range (see [`RawHit::range`] for an example).
    pub fn id(&self) -> ModuleId {
        self.id
    }

    /// `addr - range().start`: the address relative to **its range**. Two
    /// ranges of one module give the same offset for different addresses;
    /// to record a sample that can be resolved later, store
    /// [`module_offset`](RawHit::module_offset) instead.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert_module([0x1000..0x2000, 0x3000..0x4000], ()).unwrap();
    /// assert_eq!(index.lookup(0x1010).unwrap().offset(0x1010), 0x10);
    /// assert_eq!(index.lookup(0x3010).unwrap().offset(0x3010), 0x10);
    /// ```
    pub fn offset(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.start)
    }

    /// The module's base: [`ModuleMeta::base`], or its lowest range start.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert_module([0x3000..0x4000, 0x1000..0x2000], ()).unwrap();
    /// assert_eq!(index.lookup(0x3010).unwrap().base(), 0x1000);
    /// ```
    pub fn base(&self) -> u64 {
        self.base
    }

    /// `addr - base()`: the address relative to the module, the same for
    /// every range of it.
    ///
    /// ```
    /// let index = latchtree::AddrIndex::new();
    /// index.insert_module([0x1000..0x2000, 0x3000..0x4000], ()).unwrap();
    /// assert_eq!(index.lookup(0x1010).unwrap().module_offset(0x1010), 0x10);
    /// assert_eq!(index.lookup(0x3010).unwrap().module_offset(0x3010), 0x2010);
    /// ```
    pub fn module_offset(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.base)
    }

    /// The module's tag ([`ModuleMeta::tag`], or the one given to the last
    /// [`set_value`](crate::AddrIndex::set_value)).
    ///
    /// ```
    /// use latchtree::{AddrIndex, ModuleMeta};
    /// let index = AddrIndex::new();
    /// index.insert_module_with([0..10], (), ModuleMeta { base: None, tag: 7 }).unwrap();
    /// assert_eq!(index.lookup(5).unwrap().tag(), 7);
    /// ```
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// The [`Segment::flags`] of the range that contains the address.
    ///
    /// ```
    /// use latchtree::{AddrIndex, Segment};
    /// let index = AddrIndex::new();
    /// index.insert_module([Segment { range: 0..10, flags: 4 }], ()).unwrap();
    /// assert_eq!(index.lookup(5).unwrap().flags(), 4);
    /// ```
    pub fn flags(&self) -> u32 {
        self.flags
    }
}

/// A hit with the module's value, borrowed for as long as the guard lives:
/// the result of [`AddrIndex::module_address`](crate::AddrIndex::module_address),
/// [`overlapping`](crate::AddrIndex::overlapping) and
/// [`snapshot`](crate::AddrIndex::snapshot).
///
/// ```
/// let index = latchtree::AddrIndex::new();
/// let id = index.insert(0x100..0x200, "libz.so.1").unwrap();
/// let guard = index.pin();
/// let hit = index.module_address(0x1ff, &guard).unwrap();
/// assert_eq!((hit.range(), hit.id(), *hit.value()), (0x100..0x200, id, "libz.so.1"));
/// assert_eq!((hit.offset(0x1ff), hit.module_offset(0x1ff), hit.base()), (0xff, 0xff, 0x100));
/// assert_eq!((hit.tag(), hit.flags()), (0, 0));
/// assert_eq!(Some(hit.raw()), index.lookup(0x1ff));
/// ```
///
/// A hit (and the value it borrows) cannot outlive its guard: once the guard
/// is gone, a removed value may be freed.
///
/// ```compile_fail
/// let index = latchtree::AddrIndex::new();
/// index.insert(0..10, String::from("m")).unwrap();
/// let hit = {
///     let guard = index.pin();
///     index.module_address(5, &guard).unwrap()
/// };
/// assert_eq!(hit.value(), "m");
/// ```
#[derive(Debug)]
pub struct Hit<'g, T> {
    pub(crate) raw: RawHit,
    pub(crate) value: &'g T,
}

// Manual impls: a derive would require `T: Clone`.
impl<T> Clone for Hit<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Hit<'_, T> {}

impl<'g, T> Hit<'g, T> {
    /// See [`RawHit::range`] and the example on [`Hit`].
    pub fn range(&self) -> Range<u64> {
        self.raw.range()
    }

    /// See [`RawHit::id`] and the example on [`Hit`].
    pub fn id(&self) -> ModuleId {
        self.raw.id
    }

    /// See [`RawHit::offset`] (per range) and the example on [`Hit`].
    pub fn offset(&self, addr: u64) -> u64 {
        self.raw.offset(addr)
    }

    /// See [`RawHit::base`] and the example on [`Hit`].
    pub fn base(&self) -> u64 {
        self.raw.base
    }

    /// See [`RawHit::module_offset`] and the example on [`Hit`].
    pub fn module_offset(&self, addr: u64) -> u64 {
        self.raw.module_offset(addr)
    }

    /// See [`RawHit::tag`] and the example on [`Hit`].
    pub fn tag(&self) -> u64 {
        self.raw.tag
    }

    /// See [`RawHit::flags`] and the example on [`Hit`].
    pub fn flags(&self) -> u32 {
        self.raw.flags
    }

    /// The same hit without the borrow: what `lookup` returns (see the
    /// example on [`Hit`]).
    pub fn raw(&self) -> RawHit {
        self.raw
    }

    /// The module's value, borrowed for the guard's lifetime (see the
    /// example on [`Hit`]). Its tag ([`Hit::tag`]) is the one registered
    /// with this very value.
    pub fn value(&self) -> &'g T {
        self.value
    }
}
