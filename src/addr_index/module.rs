//! What the index hands out of a module's record: a borrow of it while a
//! guard lives ([`ModuleRef`]), or everything it held, once the index let
//! go of it ([`Removed`]).

use super::record::Record;
use super::types::{ModuleId, ModuleMeta, Segment, Segments};
use alloc::sync::Arc;
use core::fmt;
use core::ops::Range;

/// One registered module, borrowed for as long as the guard lives: the
/// result of [`AddrIndex::module`](crate::AddrIndex::module) and
/// [`modules`](crate::AddrIndex::modules).
///
/// ```
/// use latchtree::{AddrIndex, ModuleMeta, Segment};
/// let index = AddrIndex::new();
/// let id = index
///     .insert_module_with([0x3000..0x3100, 0x1000..0x2000], "m", ModuleMeta { base: Some(0x800), tag: 9 })
///     .unwrap();
/// let guard = index.pin();
/// let m = index.module(id, &guard).unwrap();
/// assert_eq!((m.id(), *m.value(), m.base(), m.tag()), (id, "m", 0x800, 9));
/// assert_eq!(m.ranges().collect::<Vec<_>>(), [0x1000..0x2000, 0x3000..0x3100]);
/// assert_eq!(m.segments()[0], Segment::from(0x1000..0x2000));
/// assert_eq!(m.meta(), ModuleMeta { base: Some(0x800), tag: 9 });
/// ```
pub struct ModuleRef<'g, T> {
    pub(crate) rec: &'g Record<T>,
}

// Manual impls: a derive would require `T: Clone`.
impl<T> Clone for ModuleRef<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for ModuleRef<'_, T> {}

impl<T: fmt::Debug> fmt::Debug for ModuleRef<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModuleRef")
            .field("id", &self.id())
            .field("value", self.value())
            .field("segments", &self.segments())
            .field("base", &self.base())
            .field("tag", &self.tag())
            .finish()
    }
}

impl<'g, T> ModuleRef<'g, T> {
    /// The module's id (see the example on [`ModuleRef`]).
    pub fn id(&self) -> ModuleId {
        ModuleId(self.rec.id)
    }

    /// The module's value (see the example on [`ModuleRef`]).
    pub fn value(&self) -> &'g T {
        &self.rec.value
    }

    /// The module's value as the index shares it: for a front-end that
    /// hands out owned handles (`LoadedObjects`' `ObjectRef`).
    #[cfg(all(feature = "objects", target_os = "linux", target_pointer_width = "64"))]
    pub(crate) fn shared_value(&self) -> &'g Arc<T> {
        &self.rec.value
    }

    /// The module's segments in address order (see the example on
    /// [`ModuleRef`]).
    pub fn segments(&self) -> &'g [Segment] {
        &self.rec.segments
    }

    /// The module's ranges in address order (see the example on
    /// [`ModuleRef`]).
    pub fn ranges(&self) -> impl ExactSizeIterator<Item = Range<u64>> + 'g {
        self.rec.segments.iter().map(|s| s.range.clone())
    }

    /// The module's base (resolved: never `None`) and tag (see the example
    /// on [`ModuleRef`]).
    pub fn meta(&self) -> ModuleMeta {
        ModuleMeta {
            base: Some(self.rec.base),
            tag: self.rec.tag,
        }
    }

    /// See [`RawHit::base`](crate::RawHit::base) and the example on
    /// [`ModuleRef`].
    pub fn base(&self) -> u64 {
        self.rec.base
    }

    /// See [`RawHit::tag`](crate::RawHit::tag) and the example on
    /// [`ModuleRef`].
    pub fn tag(&self) -> u64 {
        self.rec.tag
    }
}

/// Everything the index knew of a module, or of a module's version, that
/// it no longer holds: what [`AddrIndex::remove`](crate::AddrIndex::remove)
/// and [`set_value`](crate::AddrIndex::set_value) return (for `set_value`:
/// the old value and tag, with the ranges and base, which it keeps). A
/// profiler resolves a late `(id, module_offset)` sample with it: the
/// caller keeps each `Removed` for as long as samples may name the module,
/// or lets an index made with
/// [`keeping_removed`](crate::AddrIndex::keeping_removed) keep them and
/// asks it ([`AddrIndex::removed`](crate::AddrIndex::removed)).
///
/// The value is shared (an [`Arc`]) with readers that may still see the
/// module through their guard; it is dropped when the last of them and this
/// `Removed` are gone (see [`AddrIndex`](crate::AddrIndex#when-a-removed-value-is-dropped)).
///
/// ```
/// use latchtree::{AddrIndex, ModuleMeta};
/// let index = AddrIndex::new();
/// let id = index
///     .insert_module_with([0x5000..0x6000], String::from("libjit"), ModuleMeta { base: Some(0x4000), tag: 3 })
///     .unwrap();
/// let removed = index.remove(id).unwrap();
/// assert_eq!((removed.id(), removed.base(), removed.tag()), (id, 0x4000, 3));
/// assert_eq!(removed.ranges().collect::<Vec<_>>(), [0x5000..0x6000]);
/// assert_eq!(removed.segments().len(), 1);
/// assert_eq!(removed.module_offset(0x5010), 0x1010);
/// assert_eq!(removed.address(0x1010), 0x5010);
/// assert!(removed.contains(0x5fff) && !removed.contains(0x6000));
/// assert_eq!(removed.meta(), ModuleMeta { base: Some(0x4000), tag: 3 });
/// assert_eq!(**removed.value(), "libjit");
/// let value: std::sync::Arc<String> = removed.into_value();
/// assert_eq!(*value, "libjit");
/// ```
#[derive(Debug)]
pub struct Removed<T> {
    pub(crate) id: ModuleId,
    pub(crate) value: Arc<T>,
    pub(crate) segments: Segments,
    pub(crate) base: u64,
    pub(crate) tag: u64,
}

/// Another handle on the same removed module: its value shared (an `Arc`
/// clone), the rest copied.
///
/// ```
/// let index = latchtree::AddrIndex::new();
/// let id = index.insert(0..10, 'a').unwrap();
/// let removed = index.remove(id).unwrap();
/// let again = removed.clone();
/// assert!(std::sync::Arc::ptr_eq(removed.value(), again.value()));
/// ```
impl<T> Clone for Removed<T> {
    fn clone(&self) -> Self {
        Removed {
            id: self.id,
            value: Arc::clone(&self.value),
            segments: self.segments.clone(),
            base: self.base,
            tag: self.tag,
        }
    }
}

impl<T> Removed<T> {
    /// What `record` holds, with a clone of its value.
    #[inline]
    pub(crate) fn of(record: &Record<T>) -> Self {
        Removed {
            id: ModuleId(record.id),
            value: Arc::clone(&record.value),
            segments: record.segments.clone(),
            base: record.base,
            tag: record.tag,
        }
    }

    /// The removed module's id (see the example on [`Removed`]).
    pub fn id(&self) -> ModuleId {
        self.id
    }

    /// Its value (see the example on [`Removed`]).
    pub fn value(&self) -> &Arc<T> {
        &self.value
    }

    /// Its value, without the rest (see the example on [`Removed`]).
    pub fn into_value(self) -> Arc<T> {
        self.value
    }

    /// Its segments in address order (see the example on [`Removed`]).
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Its ranges in address order (see the example on [`Removed`]).
    pub fn ranges(&self) -> impl ExactSizeIterator<Item = Range<u64>> + '_ {
        self.segments.iter().map(|s| s.range.clone())
    }

    /// Its base, as [`RawHit::base`](crate::RawHit::base) gave it (see the
    /// example on [`Removed`]).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Its last tag (see the example on [`Removed`]).
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// Base and tag (see the example on [`Removed`]).
    pub fn meta(&self) -> ModuleMeta {
        ModuleMeta {
            base: Some(self.base),
            tag: self.tag,
        }
    }

    /// `addr - base()`, as
    /// [`RawHit::module_offset`](crate::RawHit::module_offset) (see the
    /// example on [`Removed`]).
    pub fn module_offset(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.base)
    }

    /// The address that had `module_offset` in this module: `base() +
    /// module_offset` (see the example on [`Removed`]).
    pub fn address(&self, module_offset: u64) -> u64 {
        self.base.wrapping_add(module_offset)
    }

    /// Whether one of its ranges contained `addr` (see the example on
    /// [`Removed`]).
    pub fn contains(&self, addr: u64) -> bool {
        self.segments.iter().any(|s| s.range.contains(&addr))
    }
}

/// Derefs to the value, for a [`set_value`](crate::AddrIndex::set_value)
/// caller that wants the old value itself (a `Removed` handed back by a
/// replacement holds the old version's value and tag).
///
/// ```
/// let index = latchtree::AddrIndex::new();
/// let id = index.insert(0..16, String::from("tier 0")).unwrap();
/// let old = index.set_value(id, String::from("tier 1"), 1).unwrap();
/// assert_eq!(old.len(), 6); // a `String` method, through `Deref`
/// assert_eq!(*old, "tier 0");
/// ```
impl<T> core::ops::Deref for Removed<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}
