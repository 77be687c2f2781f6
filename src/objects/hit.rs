//! The async-signal-safe lookups of [`LoadedObjects`] and what they return:
//! [`ObjectHit`], plain values.

use super::index::LoadedObjects;
use super::segment::PF_X;
use crate::addr_index::{ModuleId, RawHit};
use core::ops::Range;

/// The result of the async-signal-safe [`LoadedObjects::lookup`]: plain
/// values.
///
/// ```
/// let objects = latchtree::LoadedObjects::new();
/// objects.refresh();
/// let pc = main as *const () as u64;
/// let hit = objects.lookup(pc).unwrap();
/// assert!(hit.segment().contains(&pc));
/// assert_eq!(hit.link_address(), pc - hit.bias());
/// assert!(hit.is_executable() && hit.flags() & 4 != 0); // PF_X, PF_R
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ObjectHit {
    pub(super) raw: RawHit,
    pub(super) pc: u64,
}

impl ObjectHit {
    /// The object's id: store `id().get()` in a sample, turn it back with
    /// [`ModuleId::from_raw`] and resolve it with [`LoadedObjects::object`]
    /// (see the example on [`LoadedObjects`]).
    pub fn id(&self) -> ModuleId {
        self.raw.id()
    }

    /// The `PT_LOAD` segment that contains the address (run-time bounds;
    /// see the example on [`ObjectHit`]).
    pub fn segment(&self) -> Range<u64> {
        self.raw.range()
    }

    /// `pc - bias`: the address in the object's file, as `nm`, `addr2line`
    /// and symbolizers take it (see the example on [`ObjectHit`]).
    pub fn link_address(&self) -> u64 {
        self.raw.module_offset(self.pc)
    }

    /// The object's load bias (see the example on [`ObjectHit`]).
    pub fn bias(&self) -> u64 {
        self.raw.base()
    }

    /// The segment's `p_flags`: `PF_X` (1), `PF_W` (2), `PF_R` (4) (see the
    /// example on [`ObjectHit`]).
    pub fn flags(&self) -> u32 {
        self.raw.flags()
    }

    /// Whether the segment is executable (`PF_X`): a pc in a data segment
    /// is no code address (see the example on [`ObjectHit`]).
    pub fn is_executable(&self) -> bool {
        self.flags() & PF_X != 0
    }
}

impl<P: Send + Sync + 'static> LoadedObjects<P> {
    /// The object containing `pc`, among the objects loaded at the last
    /// refresh. **Async-signal-safe**: no lock, no epoch pin, no
    /// thread-local, no allocation, no free; never waits for a concurrent
    /// refresh (it sees the objects before or after its batch).
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// assert!(objects.lookup(main as *const () as u64).is_none()); // not refreshed yet
    /// objects.refresh();
    /// assert!(objects.lookup(main as *const () as u64).is_some());
    /// assert!(objects.lookup(0).is_none());
    /// ```
    #[inline]
    pub fn lookup(&self, pc: u64) -> Option<ObjectHit> {
        self.index.lookup(pc).map(|raw| ObjectHit { raw, pc })
    }

    /// [`lookup`](Self::lookup) of `K` pcs at once (a stack, a buffer of
    /// samples), all from one version, their descents in lockstep: see
    /// [`AddrIndex::lookup_many`](crate::AddrIndex::lookup_many).
    /// **Async-signal-safe**, like `lookup`.
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// let pcs = [main as *const () as u64, 0];
    /// let [here, nowhere] = objects.lookup_many(pcs);
    /// assert_eq!(here.map(|h| h.id()), objects.lookup(pcs[0]).map(|h| h.id()));
    /// assert!(here.is_some() && nowhere.is_none());
    /// ```
    #[inline]
    pub fn lookup_many<const K: usize>(&self, pcs: [u64; K]) -> [Option<ObjectHit>; K] {
        let hits = self.index.lookup_many(pcs);
        core::array::from_fn(|i| hits[i].map(|raw| ObjectHit { raw, pc: pcs[i] }))
    }
}
