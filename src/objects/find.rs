//! The loader's own answer for a pc the index has not seen yet: glibc's
//! `_dl_find_object` (2.35+), found with `dlsym` at refresh time (never in a
//! handler) and called from one. glibc documents it as async-signal-safe
//! (it reads a lock-free copy of the loader's object list that `dlopen`
//! updates before it runs the new object's constructors).

use core::ffi::{c_int, c_void};
use core::ops::Range;
// A process-wide word set once, never modelled: a plain std atomic even
// under loom (as `reclaim`'s statistics).
use core::sync::atomic::{AtomicPtr, Ordering};

/// glibc's `struct dl_find_object` on 64-bit targets without
/// `dlfo_eh_dbase` and `dlfo_eh_count` (x86_64, aarch64), with room for the
/// members newer glibcs take from the reserved space.
#[repr(C)]
struct DlFindObject {
    flags: u64,
    map_start: *mut c_void,
    map_end: *mut c_void,
    link_map: *mut c_void,
    eh_frame: *mut c_void,
    reserved: [u64; 16],
}

type FindFn = unsafe extern "C" fn(*mut c_void, *mut DlFindObject) -> c_int;

/// Null: not looked up yet; [`ABSENT`]: this libc has none; else the
/// function (a pointer, so that its provenance survives).
static FIND: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// `FIND`'s "looked up, not there" value (never a function's address).
const ABSENT: *mut c_void = core::ptr::without_provenance_mut(1);

/// Looks `_dl_find_object` up once (a normal thread: `dlsym` may lock and
/// allocate).
pub(crate) fn resolve() {
    // Relaxed: a word that only goes from 0 to its final value; `dlsym`
    // is idempotent, so two threads racing here store the same value.
    if !FIND.load(Ordering::Relaxed).is_null() {
        return;
    }
    // SAFETY: RTLD_DEFAULT searches the global scope; a valid C string.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr()) };
    let word = if f.is_null() { ABSENT } else { f };
    // Release: pairs with the Acquire load in `find` (the function's code
    // is the loader's, mapped before; the ordering is for the word alone).
    FIND.store(word, Ordering::Release);
}

/// An object the loader has mapped, as `_dl_find_object` describes it: what
/// a handler can know of a pc that [`LoadedObjects::lookup`] misses because
/// no refresh has indexed the object yet (its constructors are running
/// inside `dlopen`, or nobody refreshed since).
///
/// [`LoadedObjects::lookup`]: crate::LoadedObjects::lookup
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive] // what the loader says of an object may grow (`dlfo_eh_dbase`…)
pub struct UnindexedObject {
    /// The span of the object's mappings (`dlfo_map_start..dlfo_map_end`).
    /// For a shared library or PIE whose first `PT_LOAD` is at address 0
    /// (the usual layout), `map.start` is the load bias, so
    /// `pc - map.start` is the link-time address; the bias itself sits in
    /// the loader's link map, which a handler cannot read safely while
    /// another thread may `dlclose`.
    pub map: Range<u64>,
    /// Where its `.eh_frame_hdr` is mapped (`dlfo_eh_frame`), if it has one.
    pub eh_frame_hdr: Option<u64>,
}

/// Whether [`resolve`] found `_dl_find_object`.
pub(crate) fn available() -> bool {
    // Acquire: as in `find`.
    let word = FIND.load(Ordering::Acquire);
    !word.is_null() && word != ABSENT
}

impl UnindexedObject {
    /// An `UnindexedObject` made of its parts: what a sample ring stored of
    /// one that [`LoadedObjects::unindexed`](crate::LoadedObjects::unindexed)
    /// returned in a handler (the span and the header's address, plain
    /// numbers), rebuilt on a normal thread to [`matches`](Self::matches)
    /// it against the objects a later refresh indexed.
    ///
    /// ```
    /// use latchtree::{LoadedObjects, UnindexedObject};
    /// let objects = LoadedObjects::new();
    /// objects.refresh();
    /// let pc = main as *const () as u64;
    /// if let Some(seen) = LoadedObjects::unindexed(pc) {
    ///     // In the handler: two or three words into the ring.
    ///     let stored = (seen.map.start, seen.map.end, seen.eh_frame_hdr.unwrap_or(0));
    ///     // Later, on a normal thread:
    ///     let hdr = (stored.2 != 0).then_some(stored.2);
    ///     let again = UnindexedObject::new(stored.0..stored.1, hdr);
    ///     assert_eq!(again, seen);
    ///     let id = objects.lookup(pc).unwrap().id();
    ///     assert!(again.matches(objects.object(id).unwrap().info()));
    /// }
    /// ```
    pub fn new(map: Range<u64>, eh_frame_hdr: Option<u64>) -> UnindexedObject {
        UnindexedObject { map, eh_frame_hdr }
    }

    /// Whether `info` (an object a later refresh indexed) is this object:
    /// the same mapped start and `.eh_frame_hdr`. What a profiler needs to
    /// attribute a sample taken while the object was not indexed yet (its
    /// constructors running inside `dlopen`) once it is: record this in the
    /// handler, match it on a normal thread (rebuilt with
    /// [`new`](Self::new) if the ring stored plain numbers).
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// let pc = main as *const () as u64;
    /// if let Some(seen) = latchtree::LoadedObjects::unindexed(pc) {
    ///     let id = objects.lookup(pc).unwrap().id();
    ///     assert!(seen.matches(objects.object(id).unwrap().info()));
    /// }
    /// ```
    pub fn matches(&self, info: &super::info::ObjectInfo) -> bool {
        self.map.start == info.image().start
            && self.eh_frame_hdr == info.eh_frame_hdr().map(|h| h.start)
    }
}

/// `_dl_find_object(pc)`, if [`resolve`] found it. Async-signal-safe.
pub(crate) fn find(pc: u64) -> Option<UnindexedObject> {
    // Acquire: pairs with the Release store in `resolve`.
    let word = FIND.load(Ordering::Acquire);
    if word.is_null() || word == ABSENT {
        return None;
    }
    // SAFETY: any other value is `_dl_find_object`, stored by `resolve`
    // from `dlsym`; glibc declares it with exactly this signature.
    let f = unsafe { core::mem::transmute::<*mut c_void, FindFn>(word) };
    // SAFETY: all-zero is a valid `DlFindObject` (integers, null pointers).
    let mut out: DlFindObject = unsafe { core::mem::zeroed() };
    // The pc is only compared, never dereferenced: no provenance needed.
    // SAFETY: `out` is a writable `struct dl_find_object` (and more).
    if unsafe { f(core::ptr::without_provenance_mut(pc as usize), &mut out) } != 0 {
        return None;
    }
    // Only addresses are copied out: the link map (where the bias is) may
    // be freed by a `dlclose` on another thread as soon as the call
    // returns, so it is never read.
    Some(UnindexedObject {
        map: out.map_start.addr() as u64..out.map_end.addr() as u64,
        eh_frame_hdr: (!out.eh_frame.is_null()).then(|| out.eh_frame.addr() as u64),
    })
}
