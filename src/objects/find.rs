//! The loader's own answer for a pc the index has not seen yet: glibc's
//! `_dl_find_object` (2.35+), found with `dlsym` at refresh time (never in a
//! handler) and called from one. glibc documents it as async-signal-safe
//! (it reads a lock-free copy of the loader's object list that `dlopen`
//! updates before it runs the new object's constructors).

// A process-wide word set once, never modelled: a plain std atomic even
// under loom (as `reclaim`'s statistics).
use core::ffi::{c_int, c_void};
use core::ops::Range;
use core::sync::atomic::{AtomicUsize, Ordering};

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

/// 0: not looked up yet; 1: this libc has none; else the function.
static FIND: AtomicUsize = AtomicUsize::new(0);

/// Looks `_dl_find_object` up once (a normal thread: `dlsym` may lock and
/// allocate).
pub(crate) fn resolve() {
    // Relaxed: a word that only goes from 0 to its final value; `dlsym`
    // is idempotent, so two threads racing here store the same value.
    if FIND.load(Ordering::Relaxed) != 0 {
        return;
    }
    // SAFETY: RTLD_DEFAULT searches the global scope; a valid C string.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr()) };
    let word = if f.is_null() { 1 } else { f.addr() };
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
pub struct UnindexedObject {
    /// The span of the object's mappings (`dlfo_map_start..dlfo_map_end`).
    pub map: Range<u64>,
    /// Its load bias (the link map's `l_addr`): `pc - bias` is the
    /// link-time address.
    pub bias: u64,
    /// Where its `.eh_frame_hdr` is mapped (`dlfo_eh_frame`), if it has one.
    pub eh_frame_hdr: Option<u64>,
}

/// `_dl_find_object(pc)`, if [`resolve`] found it. Async-signal-safe.
pub(crate) fn find(pc: u64) -> Option<UnindexedObject> {
    // Acquire: pairs with the Release store in `resolve`.
    let word = FIND.load(Ordering::Acquire);
    if word <= 1 {
        return None;
    }
    // SAFETY: a non-0/1 word is `_dl_find_object`'s address, stored by
    // `resolve`; glibc declares it with exactly this signature.
    let f = unsafe { core::mem::transmute::<usize, FindFn>(word) };
    // SAFETY: all-zero is a valid `DlFindObject` (integers, null pointers).
    let mut out: DlFindObject = unsafe { core::mem::zeroed() };
    // The pc is only compared, never dereferenced: no provenance needed.
    // SAFETY: `out` is a writable `struct dl_find_object` (and more).
    if unsafe { f(core::ptr::without_provenance_mut(pc as usize), &mut out) } != 0 {
        return None;
    }
    let bias = if out.link_map.is_null() {
        0
    } else {
        // `struct link_map` starts with `ElfW(Addr) l_addr`.
        // SAFETY: on success `dlfo_link_map` points at the object's link
        // map, valid while the object is loaded (the caller's pc is in it).
        unsafe { out.link_map.cast::<u64>().read() }
    };
    Some(UnindexedObject {
        map: out.map_start.addr() as u64..out.map_end.addr() as u64,
        bias,
        eh_frame_hdr: (!out.eh_frame.is_null()).then(|| out.eh_frame.addr() as u64),
    })
}
