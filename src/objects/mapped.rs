//! What a payload builder gets: [`MappedObject`], an object the refresh
//! holds mapped while the builder runs, with safe slices of its read-only
//! memory (its unwind tables above all), so that no consumer writes the
//! same `unsafe` copy by hand.

use super::info::ObjectInfo;
use super::scan::LoadedMemory;
use super::segment::ObjectMemory;
use core::fmt;
use core::ops::{Deref, Range};

/// An object a [`refresh`](crate::LoadedObjects::refresh) is indexing, as
/// its payload builder ([`LoadedObjects::with_payload`](crate::LoadedObjects::with_payload))
/// sees it: its [`ObjectInfo`] (through `Deref`), and the bytes of its
/// read-only loaded segments, which the refresh keeps mapped (its own
/// `dlopen` reference) for as long as the builder runs, even if another
/// thread `dlclose`s the object meanwhile.
///
/// The slices borrow the builder's argument: copy what a signal handler
/// will need into the payload (the object may be unloaded before the next
/// refresh takes it out of the index, and its pages with it).
///
/// ```
/// use latchtree::{LoadedObjects, MappedObject};
///
/// /// What a handler-side unwinder needs: copies of the unwind tables.
/// struct Tables { eh_frame_hdr: Box<[u8]>, eh_frame: Box<[u8]> }
///
/// fn build(object: &MappedObject<'_>) -> Option<Tables> {
///     Some(Tables {
///         eh_frame_hdr: object.eh_frame_hdr_bytes()?.into(),
///         eh_frame: object.eh_frame_bytes()?.into(),
///     })
/// }
///
/// static OBJECTS: LoadedObjects<Option<Tables>> = LoadedObjects::with_payload(build);
/// OBJECTS.refresh();
/// let section = OBJECTS.handler_section(); // in a signal handler
/// let object = section.lookup(main as *const () as u64).unwrap();
/// let tables = object.payload().as_ref().expect("Rust programs have unwind tables");
/// assert_eq!(tables.eh_frame_hdr[0], 1, "version 1");
/// let range = object.info().eh_frame().unwrap();
/// assert_eq!(tables.eh_frame.len() as u64, range.end - range.start);
/// ```
pub struct MappedObject<'a> {
    info: &'a ObjectInfo,
    /// Whether the refresh holds the object mapped (else nothing of its
    /// memory may be read).
    held: bool,
}

/// Why [`MappedObject::read`] gives no bytes.
///
/// ```
/// use latchtree::ReadError;
/// assert_eq!(ReadError::NotHeld.to_string(), "the refresh could not hold the object mapped");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReadError {
    /// The refresh indexes this object without a reference that keeps it
    /// mapped (it lives in another `dlmopen` namespace, or the loader
    /// cannot tell): its memory may go at any moment, so none is handed
    /// out. What the refresh read under the loader's lock (the build id,
    /// the `.eh_frame` range) is in the [`ObjectInfo`].
    NotHeld,
    /// The range does not lie inside one loaded segment that is readable
    /// and not writable (a writable segment may change under the reader),
    /// or the object's segments overlap (a merged segment may hold pages
    /// that are not readable).
    NotReadOnly(Range<u64>),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::NotHeld => f.write_str("the refresh could not hold the object mapped"),
            ReadError::NotReadOnly(r) => write!(
                f,
                "{:#x}..{:#x} is not inside one readable, read-only loaded segment",
                r.start, r.end
            ),
        }
    }
}

impl std::error::Error for ReadError {}

impl<'a> MappedObject<'a> {
    /// The builder's view of `info`; `held`: whether the refresh keeps the
    /// object's memory mapped until after the builder returns.
    pub(crate) fn new(info: &'a ObjectInfo, held: bool) -> Self {
        MappedObject { info, held }
    }

    /// The object's info (also reachable through `Deref`).
    ///
    /// ```
    /// static OBJECTS: latchtree::LoadedObjects<u64> =
    ///     latchtree::LoadedObjects::with_payload(|o| o.info().bias());
    /// OBJECTS.refresh();
    /// let section = OBJECTS.handler_section();
    /// let object = section.lookup(main as *const () as u64).unwrap();
    /// assert_eq!(*object.payload(), object.info().bias());
    /// ```
    pub fn info(&self) -> &'a ObjectInfo {
        self.info
    }

    /// Whether the refresh holds the object mapped, so that
    /// [`read`](MappedObject::read) can hand out its memory: true for every
    /// object but those in another `dlmopen` namespace (or on a loader that
    /// cannot tell); see [`ReadError::NotHeld`].
    ///
    /// ```
    /// static OBJECTS: latchtree::LoadedObjects<bool> =
    ///     latchtree::LoadedObjects::with_payload(|o| o.is_held());
    /// OBJECTS.refresh();
    /// let section = OBJECTS.handler_section();
    /// assert!(*section.lookup(main as *const () as u64).unwrap().payload());
    /// ```
    pub fn is_held(&self) -> bool {
        self.held
    }

    /// The bytes at the run-time addresses `range`, if they lie inside one
    /// of the object's loaded segments that is readable and not writable
    /// (text, read-only data, the unwind tables), and the refresh holds the
    /// object mapped. Nothing writes those pages while the object is
    /// loaded, and the refresh keeps it loaded while the builder runs.
    ///
    /// ```
    /// use latchtree::{LoadedObjects, MappedObject, ReadError};
    /// fn build(object: &MappedObject<'_>) -> (usize, bool) {
    ///     let text = object.segments().iter().find(|s| s.is_executable()).unwrap().range.clone();
    ///     let code = object.read(text.start..text.start + 16).map_or(0, |b| b.len());
    ///     let data = object.segments().iter().find(|s| s.is_writable());
    ///     let refused = data.is_none_or(|d| matches!(object.read(d.range.clone()), Err(ReadError::NotReadOnly(_))));
    ///     (code, refused)
    /// }
    /// static OBJECTS: LoadedObjects<(usize, bool)> = LoadedObjects::with_payload(build);
    /// OBJECTS.refresh();
    /// let section = OBJECTS.handler_section();
    /// assert_eq!(*section.lookup(main as *const () as u64).unwrap().payload(), (16, true));
    /// ```
    pub fn read(&self, range: Range<u64>) -> Result<&'a [u8], ReadError> {
        if !self.held {
            return Err(ReadError::NotHeld);
        }
        let read_only = |s: &&super::LoadSegment| {
            s.is_readable()
                && !s.is_writable()
                && s.range.start <= range.start
                && range.start <= range.end
                && range.end <= s.range.end
        };
        let inside = !self.info.unwind.merged && self.info.segments().iter().any(|s| read_only(&s));
        let len = usize::try_from(range.end.wrapping_sub(range.start)).ok();
        let (true, Some(len)) = (inside, len) else {
            return Err(ReadError::NotReadOnly(range));
        };
        // The range lies inside one readable, non-writable PT_LOAD segment of the object (the
        // segments are the object's own, none merged), which the refresh keeps mapped with a
        // reference of its own until after the builder returns: longer than 'a, which the
        // builder's argument bounds. Nothing writes a loaded object's read-only pages.
        // SAFETY: so `len` bytes there are readable and unchanged for 'a.
        let bytes = unsafe { LoadedMemory.read(range.start, len) };
        bytes.ok_or(ReadError::NotReadOnly(range))
    }

    /// The bytes of the object's `.eh_frame_hdr`
    /// ([`ObjectInfo::eh_frame_hdr`]), if it has one that
    /// [`read`](MappedObject::read) can hand out. See the example on
    /// [`MappedObject`].
    pub fn eh_frame_hdr_bytes(&self) -> Option<&'a [u8]> {
        self.read(self.info.eh_frame_hdr()?).ok()
    }

    /// The bytes of the object's `.eh_frame` ([`ObjectInfo::eh_frame`];
    /// [`ObjectInfo::try_eh_frame`] says why it has none), if
    /// [`read`](MappedObject::read) can hand them out. See the example on
    /// [`MappedObject`].
    pub fn eh_frame_bytes(&self) -> Option<&'a [u8]> {
        self.read(self.info.eh_frame()?).ok()
    }

    /// The bytes of the object's `.sframe` ([`ObjectInfo::sframe`]), if it
    /// has one that [`read`](MappedObject::read) can hand out.
    ///
    /// ```
    /// static OBJECTS: latchtree::LoadedObjects<usize> =
    ///     latchtree::LoadedObjects::with_payload(|o| o.sframe_bytes().map_or(0, <[u8]>::len));
    /// OBJECTS.refresh();
    /// let section = OBJECTS.handler_section();
    /// let object = section.lookup(main as *const () as u64).unwrap();
    /// let expected = object.info().sframe().map_or(0, |r| (r.end - r.start) as usize);
    /// assert_eq!(*object.payload(), expected);
    /// ```
    pub fn sframe_bytes(&self) -> Option<&'a [u8]> {
        self.read(self.info.sframe()?).ok()
    }
}

impl Deref for MappedObject<'_> {
    type Target = ObjectInfo;

    fn deref(&self) -> &ObjectInfo {
        self.info
    }
}

impl fmt::Debug for MappedObject<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedObject")
            .field("path", &self.info.path())
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}
