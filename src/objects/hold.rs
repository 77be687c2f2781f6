//! A loader reference on an object while a refresh reads it and builds its
//! payload: the refresh walks the object's `.eh_frame`, the user's builder
//! reads its tables ([`MappedObject`](super::MappedObject)), and a
//! `dlclose` on another thread between the scan and the build would
//! otherwise unmap it under them.
//!
//! `dlopen(name, RTLD_NOLOAD)` takes a reference on an object that is
//! still loaded, and loads nothing (so it runs no constructor); the link
//! map's load bias tells whether it is the object the scan saw or a new
//! one loaded under the same name since.

use super::info::ObjectInfo;
use super::segment::ObjectKind;
use core::ptr::NonNull;
use std::ffi::{CString, c_int, c_void};

/// The first field of the loader's public `struct link_map` (`<link.h>`,
/// the same in glibc and musl): the load bias.
#[repr(C)]
struct LinkMap {
    l_addr: usize,
}

/// `RTLD_DI_LINKMAP` (glibc and musl).
const RTLD_DI_LINKMAP: c_int = 2;

unsafe extern "C" {
    // Declared here: the `libc` crate has it for glibc only, musl has it too.
    fn dlinfo(handle: *mut c_void, request: c_int, info: *mut c_void) -> c_int;
}

/// What keeps an object mapped while a refresh looks at it.
#[derive(Debug)]
enum Hold {
    /// A `dlopen` reference of the refresh's own.
    Reference(NonNull<c_void>),
    /// Nothing needed: the main program and the vDSO are never unmapped.
    Permanent,
    /// Nothing: indexed, but its memory may go at any moment (another
    /// `dlmopen` namespace; a loader that cannot tell; the synthetic
    /// objects of the unit tests, which are not loaded at all).
    Unheld,
}

/// A reference on a loaded object (or the knowledge that it needs none, or
/// that none could be had); `dlclose`d when dropped.
#[derive(Debug)]
pub(crate) struct LoaderRef(Hold);

impl LoaderRef {
    /// Indexed without keeping it mapped: nothing of its memory may be
    /// read past the loader's lock.
    pub(crate) fn unheld() -> LoaderRef {
        LoaderRef(Hold::Unheld)
    }

    /// None needed: the object is never unmapped (the main program, the
    /// vDSO; the unit tests' objects in memory of their own).
    pub(crate) fn permanent() -> LoaderRef {
        LoaderRef(Hold::Permanent)
    }

    /// Whether the object's memory stays mapped while this lives.
    pub(crate) fn keeps_mapped(&self) -> bool {
        !matches!(self.0, Hold::Unheld)
    }

    /// A reference on `info`'s object if it is still loaded as the scan saw
    /// it (the same name and bias); an empty one if it is loaded but not
    /// reachable by its name (another `dlmopen` namespace), or where the
    /// loader cannot tell; `None` if it was unloaded (or replaced) since.
    /// Blocks while another thread's `dlopen` runs (the loader's lock):
    /// call it with no lock of the index held.
    pub(crate) fn hold(info: &ObjectInfo) -> Option<LoaderRef> {
        if info.kind() != ObjectKind::Library {
            return Some(LoaderRef::permanent());
        }
        let name = CString::new(info.loader_name().as_encoded_bytes()).ok()?;
        // SAFETY: a NUL-terminated name; `RTLD_NOLOAD` loads nothing, so no
        // constructor runs, and only adds a reference to a loaded object.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        match NonNull::new(handle) {
            Some(h) => LoaderRef(Hold::Reference(h)).if_same(info),
            None => LoaderRef::unnamed(info),
        }
    }

    /// Not loaded under its name: loaded all the same (another `dlmopen`
    /// namespace) if the loader's own list has an object at exactly its
    /// image, with its `.eh_frame_hdr`; where the loader cannot tell (no
    /// `_dl_find_object`: musl, glibc before 2.35), indexed as before this
    /// reference existed; gone otherwise (any object now mapped at
    /// its address passed before).
    fn unnamed(info: &ObjectInfo) -> Option<LoaderRef> {
        let start = info.segments().first()?.range.start;
        match super::find::find(start) {
            Some(o) => o.matches(info).then_some(LoaderRef::unheld()),
            None if !super::find::available() => Some(LoaderRef::unheld()),
            None => None,
        }
    }

    /// This reference if it holds `info`'s object as the scan saw it (the
    /// same load bias); `None` else (dropping it lets go of the new object
    /// that took the name).
    fn if_same(self, info: &ObjectInfo) -> Option<LoaderRef> {
        let handle = self;
        let mut map: *mut LinkMap = core::ptr::null_mut();
        let Hold::Reference(h) = handle.0 else {
            return Some(handle);
        };
        let h = h.as_ptr();
        // SAFETY: `h` is a handle we hold; `RTLD_DI_LINKMAP` stores a
        // `struct link_map *` through the pointer it is given.
        let ok = unsafe { dlinfo(h, RTLD_DI_LINKMAP, (&raw mut map).cast()) } == 0;
        // SAFETY: the link map of an object we hold a reference on stays
        // valid while we hold it; `l_addr` is its load bias.
        let same = ok && !map.is_null() && unsafe { (*map).l_addr } as u64 == info.bias();
        // Not the object the scan saw: dropping `handle` lets go of it.
        same.then_some(handle)
    }
}

impl Drop for LoaderRef {
    fn drop(&mut self) {
        if let Hold::Reference(h) = self.0 {
            // SAFETY: a handle `dlopen` gave us, closed once. The object may
            // be unloaded now (its destructors run here, on this thread):
            // the caller holds no lock of the index.
            unsafe { libc::dlclose(h.as_ptr()) };
        }
    }
}
