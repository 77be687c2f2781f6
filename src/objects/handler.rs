//! What a signal handler reads of a loaded object in place: its info
//! (unwind tables, image span) and the user's payload, through a handler
//! section of the index (`crate::reclaim`'s `section.rs`); and the loader's answer for an
//! object no refresh has indexed yet ([`find`](super::find)).

use super::find::{self, UnindexedObject};
use super::hit::ObjectHit;
use super::index::{Entry, LoadedObjects};
use super::info::ObjectInfo;
use crate::addr_index::{HandlerSection, ModuleId};
use core::fmt;

/// An open handler read section on a [`LoadedObjects`]: async-signal-safe
/// lookups that borrow the object's [`ObjectInfo`] and payload (see
/// [`HandlerSection`] for the cost and the rules: keep it short).
#[must_use = "a section protects only the lookups made through it"]
pub struct ObjectsSection<'a, P> {
    section: HandlerSection<'a, Entry<P>>,
}

impl<P> fmt::Debug for ObjectsSection<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectsSection").finish_non_exhaustive()
    }
}

/// A loaded object as a handler sees it: the hit, with the object's info
/// and payload borrowed for as long as the section is open.
pub struct HandlerObject<'s, P> {
    hit: ObjectHit,
    entry: &'s Entry<P>,
}

impl<P> Clone for HandlerObject<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for HandlerObject<'_, P> {}

impl<P> fmt::Debug for HandlerObject<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerObject")
            .field("hit", &self.hit)
            .field("path", &self.entry.info.path())
            .finish_non_exhaustive()
    }
}

impl<'s, P> HandlerObject<'s, P> {
    /// What [`LoadedObjects::lookup`] returns for the same pc.
    pub fn hit(&self) -> ObjectHit {
        self.hit
    }

    /// The object's info: path, bias, segments, build id, and where its
    /// unwind tables were mapped ([`ObjectInfo::eh_frame_hdr`],
    /// [`eh_frame`](ObjectInfo::eh_frame), [`sframe`](ObjectInfo::sframe),
    /// [`image`](ObjectInfo::image)). The info itself is always readable;
    /// the memory those ranges name is not: a section finds an object until
    /// the refresh after its `dlclose`, and by then its pages may be gone.
    /// A handler reads the tables its payload copied at build time
    /// (the object is held mapped while the builder runs), never the ranges
    /// in place.
    pub fn info(&self) -> &'s ObjectInfo {
        &self.entry.info
    }

    /// The payload the index's builder made for this object
    /// ([`LoadedObjects::with_payload`]).
    pub fn payload(&self) -> &'s P {
        &self.entry.payload
    }
}

impl<P> ObjectsSection<'_, P> {
    /// The object containing `pc`, with its info and payload
    /// ([`LoadedObjects::lookup`] plus what the section keeps alive).
    /// Async-signal-safe.
    #[inline]
    pub fn lookup(&self, pc: u64) -> Option<HandlerObject<'_, P>> {
        let hit = self.section.lookup(pc)?;
        Some(HandlerObject {
            hit: ObjectHit { raw: hit.raw(), pc },
            entry: hit.value(),
        })
    }

    /// [`lookup`](ObjectsSection::lookup) of `K` pcs (a stack's return
    /// addresses) at once, from one version of the index.
    #[inline]
    pub fn lookup_many<const K: usize>(&self, pcs: [u64; K]) -> [Option<HandlerObject<'_, P>>; K] {
        let hits = self.section.lookup_many(pcs);
        core::array::from_fn(|i| {
            hits[i].map(|h| HandlerObject {
                hit: ObjectHit {
                    raw: h.raw(),
                    pc: pcs[i],
                },
                entry: h.value(),
            })
        })
    }
}

impl<P: 'static> ObjectsSection<'_, P> {
    /// The info and payload of the object with this id, if it is indexed
    /// (a sample recorded as an id, resolved in the handler).
    /// Async-signal-safe.
    ///
    /// ```
    /// static OBJECTS: latchtree::LoadedObjects<u64> =
    ///     latchtree::LoadedObjects::with_payload(|info| info.bias());
    /// OBJECTS.refresh();
    /// let section = OBJECTS.handler_section();
    /// let id = section.lookup(main as *const () as u64).unwrap().hit().id();
    /// let (info, payload) = section.get(id).unwrap();
    /// assert_eq!(*payload, info.bias());
    /// assert!(section.get(latchtree::ModuleId::from_raw(u64::MAX)).is_none());
    /// ```
    #[inline]
    pub fn get(&self, id: ModuleId) -> Option<(&ObjectInfo, &P)> {
        self.section.get(id).map(|e| (&*e.info, &e.payload))
    }

    /// What the loader says of a pc that [`lookup`](ObjectsSection::lookup)
    /// misses: [`LoadedObjects::unindexed`], from the section a handler
    /// already has, whatever the payload type. Async-signal-safe where
    /// glibc's `_dl_find_object` is.
    ///
    /// ```
    /// static OBJECTS: latchtree::LoadedObjects<u8> = latchtree::LoadedObjects::with_payload(|_| 0);
    /// OBJECTS.refresh();
    /// let section = OBJECTS.handler_section();
    /// let pc = main as *const () as u64;
    /// assert_eq!(section.unindexed(pc), latchtree::LoadedObjects::unindexed(pc));
    /// ```
    #[inline]
    pub fn unindexed(&self, pc: u64) -> Option<UnindexedObject> {
        find::find(pc)
    }
}

impl<P: Send + Sync + 'static> LoadedObjects<P> {
    /// Opens an [`ObjectsSection`]: lookups from a signal handler that
    /// borrow the object's info and payload. Async-signal-safe.
    ///
    /// ```
    /// static OBJECTS: latchtree::LoadedObjects = latchtree::LoadedObjects::new();
    /// OBJECTS.refresh();
    /// let section = OBJECTS.handler_section();
    /// let object = section.lookup(main as *const () as u64).unwrap();
    /// let image = object.info().image();
    /// assert!(image.start % 4096 == 0 && image.contains(&(main as *const () as u64)));
    /// ```
    #[inline]
    pub fn handler_section(&self) -> ObjectsSection<'_, P> {
        ObjectsSection {
            section: self.index.handler_section(),
        }
    }
}

impl LoadedObjects {
    /// What the loader itself says of `pc` (glibc's `_dl_find_object`), for
    /// a pc that [`lookup`](LoadedObjects::lookup) misses: an object mapped
    /// but **not yet indexed** (its constructors are running inside
    /// `dlopen`, or no refresh ran since it was loaded). Async-signal-safe
    /// where glibc's function is (2.35 and later, which document it so);
    /// `None` on other loaders, before the first
    /// [`refresh`](LoadedObjects::refresh) (which looks the function up:
    /// never `dlsym` in a handler), or if no object contains `pc`.
    ///
    /// It knows the mapping's span and the `.eh_frame_hdr` address, not the
    /// segments, build id or path; the next refresh indexes the object.
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// let pc = main as *const () as u64;
    /// if let Some(o) = latchtree::LoadedObjects::unindexed(pc) {
    ///     let hit = objects.lookup(pc).unwrap();
    ///     assert!(o.map.contains(&pc) && o.map.start <= hit.segment().start);
    /// }
    /// ```
    pub fn unindexed(pc: u64) -> Option<UnindexedObject> {
        find::find(pc)
    }
}
