//! [`LoadedObjects`] itself: its parts (an [`AddrIndex`] with one module
//! per object, and what a refresh needs beside it), construction, and its
//! counts. Lookups are `hit.rs`'s, per-object reads `object.rs`'s, the
//! refresh `refresh.rs`'s.

use super::info::ObjectInfo;
use super::mapped::MappedObject;
use super::scan::{self, LoadCounters};
use crate::addr_index::{AddrIndex, ModuleId};
use crate::sync::{Mutex, const_fn_unless_loom, lock};
use core::fmt;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The process's loaded ELF objects — the main program, the vDSO, the
/// dynamic loader, every shared library, also those `dlopen`ed later — in an
/// [`AddrIndex`]: one module per object, one range per `PT_LOAD` segment
/// (exact bounds, its `p_flags` as the range's flags), the load bias as the
/// module's base.
///
/// * [`refresh`](LoadedObjects::refresh) (any normal thread) rescans with
///   `dl_iterate_phdr` and applies the difference as **one batch**: readers
///   see the old set of objects or the new one, never a mix. When the
///   loader's counters (glibc's `dlpi_adds`/`dlpi_subs`) have not moved
///   since the last scan, it costs one `dl_iterate_phdr` callback and does
///   nothing else; on loaders without them (musl) it compares the sets.
/// * [`lookup`](LoadedObjects::lookup) is **async-signal-safe** (no lock,
///   no epoch pin, no thread-local, no allocation): the object's id, the
///   segment, the link-time address (`pc - bias`, what `nm`, `addr2line`
///   and symbolizers take) and the segment's permissions.
/// * [`object`](LoadedObjects::object) (normal threads) gives an object's
///   path, bias, segments and GNU build id, and whether it is still loaded.
///   An unloaded object stays resolvable by id until it is
///   [forgotten](LoadedObjects::forget_unloaded), so a sample taken before a
///   `dlclose` still names its library.
///
/// Ids are never reused. Odd objects (no `PT_LOAD`, empty or overlapping
/// segments, a malformed build-id note, a file that is gone…) never stop a
/// refresh: they are reported in [`Refresh::problems`](crate::Refresh::problems)
/// and go in as far as they can.
///
/// ```
/// use latchtree::LoadedObjects;
///
/// static OBJECTS: LoadedObjects = LoadedObjects::new();
///
/// let refresh = OBJECTS.refresh();
/// assert!(refresh.rescanned && !refresh.added.is_empty());
///
/// // In a signal handler: plain values, nothing that can deadlock.
/// let pc = main as *const () as u64;
/// let hit = OBJECTS.lookup(pc).unwrap();
/// assert!(hit.is_executable());
/// let sample = (hit.id().get(), hit.link_address()); // what a profiler records
///
/// // Later, on a normal thread: which file, which build id.
/// let object = OBJECTS.object(latchtree::ModuleId::from_raw(sample.0)).unwrap();
/// assert_eq!(object.info().path(), std::env::current_exe().unwrap());
/// assert_eq!(sample.1, pc - object.info().bias());
/// assert!(object.is_loaded());
///
/// // Nothing loaded or unloaded since: no rescan.
/// assert!(!OBJECTS.refresh().rescanned || LoadedObjects::load_counters().is_none());
/// ```
///
/// # Locks
///
/// A refresh holds this index's own lock and, inside it, the loader's (for
/// the `dl_iterate_phdr` pass, and for the `dlopen(RTLD_NOLOAD)` that holds
/// each new object while its payload is built; that reference is let go,
/// and payloads are dropped, after the refresh released its locks). Do not
/// call [`refresh`](Self::refresh) from a shared library's constructor or
/// destructor (they run under the loader's lock, the other order) while
/// another thread may refresh too.
pub struct LoadedObjects<P: 'static = ()> {
    pub(super) index: AddrIndex<Entry<P>>,
    /// Held by a refresh throughout (one at a time), also while payloads
    /// are built, when `state` is not.
    pub(super) refreshing: Mutex<()>,
    pub(super) state: Mutex<State>,
    /// Builds an object's payload (run by `refresh`, with no lock of this
    /// index held but `refreshing`, before its write).
    pub(super) build: fn(&MappedObject<'_>) -> P,
}

/// What the index holds per object: its info and the user's payload.
#[derive(Debug)]
pub(super) struct Entry<P> {
    pub(super) info: Arc<ObjectInfo>,
    pub(super) payload: P,
}

/// What a refresh needs beyond the index; guarded by `LoadedObjects::state`.
/// Only refreshes (one at a time: `refreshing`) change anything but
/// `unloaded`.
#[derive(Debug)]
pub(super) struct State {
    /// Whether a full scan has run.
    pub(super) scanned: bool,
    /// The loader's counters at the last full scan.
    pub(super) counters: Option<LoadCounters>,
    /// Objects removed from the index, until forgotten: their info only
    /// (the payload went with the index's record).
    pub(super) unloaded: BTreeMap<ModuleId, Arc<ObjectInfo>>,
    /// Objects with nothing to index (no `PT_LOAD`), kept while they stay
    /// loaded so that they are reported once.
    pub(super) left_out: Vec<Arc<ObjectInfo>>,
    /// Objects the index refused (their segments overlap another object's),
    /// tried again, quietly, on every rescan: the object in their way may be
    /// gone.
    pub(super) rejected: Vec<Arc<ObjectInfo>>,
}

impl<P: fmt::Debug> fmt::Debug for LoadedObjects<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedObjects")
            .field("index", &self.index)
            .field("state", &self.state)
            .finish()
    }
}

impl Default for LoadedObjects {
    fn default() -> Self {
        LoadedObjects::new()
    }
}

/// Builds no payload.
fn no_payload(_: &MappedObject<'_>) {}

impl LoadedObjects {
    const_fn_unless_loom! {
        /// An empty index (nothing is scanned before the first
        /// [`refresh`](LoadedObjects::refresh)); `const`, for a `static`.
        ///
        /// ```
        /// static OBJECTS: latchtree::LoadedObjects = latchtree::LoadedObjects::new();
        /// assert_eq!(OBJECTS.loaded_count(), 0);
        /// ```
        pub fn new() -> LoadedObjects {
            LoadedObjects::with_payload(no_payload)
        }
    }

    /// The loader's counters of objects loaded and unloaded so far, now
    /// (one `dl_iterate_phdr` callback); `None` if the loader does not keep
    /// them (musl).
    ///
    /// ```
    /// if let Some(c) = latchtree::LoadedObjects::load_counters() {
    ///     assert!(c.adds >= c.subs);
    /// }
    /// ```
    pub fn load_counters() -> Option<LoadCounters> {
        scan::load_counters()
    }
}

impl<P: Send + Sync + 'static> LoadedObjects<P> {
    const_fn_unless_loom! {
        /// An empty index whose objects each carry a payload built by
        /// `build` when a refresh indexes the object: an unwinder, a symbol
        /// table, anything a signal handler needs in place. A handler reads
        /// it through a [`handler_section`](LoadedObjects::handler_section),
        /// a normal thread through [`ObjectRef::payload`](crate::ObjectRef::payload).
        /// It is dropped by the refresh that finds the object unloaded (on
        /// its thread, with no lock of this index held), once no section or
        /// guard can see it any more (else by a later refresh that changes
        /// the index, or [`forget`](LoadedObjects::forget)), and once no
        /// [`ObjectRef`](crate::ObjectRef) made while it was loaded is
        /// left. The object's info stays, for late samples, until
        /// forgotten.
        ///
        /// `build` runs inside `refresh`, on its thread, with no lock of
        /// this index held but the one that serializes refreshes: it may
        /// call every method of this index but `refresh`. It gets the
        /// object as a [`MappedObject`]: its [`ObjectInfo`] and the bytes
        /// of its read-only segments (its unwind tables above all), safe to
        /// read while it runs: the refresh holds its own loader reference on
        /// the object (`dlopen(RTLD_NOLOAD)`, let go after the refresh's
        /// batch), so the object stays mapped even if another thread
        /// `dlclose`s it meanwhile. Copy what a signal handler will need:
        /// the object may be unloaded before the next refresh takes it out
        /// of the index.
        ///
        /// ```
        /// use latchtree::{LoadedObjects, MappedObject};
        ///
        /// /// What a handler-side unwinder needs, built once per object.
        /// struct Tables { eh_frame_hdr: Option<Box<[u8]>> }
        ///
        /// static OBJECTS: LoadedObjects<Tables> = LoadedObjects::with_payload(|object: &MappedObject<'_>| {
        ///     Tables { eh_frame_hdr: object.eh_frame_hdr_bytes().map(Box::from) }
        /// });
        ///
        /// OBJECTS.refresh();
        /// let pc = main as *const () as u64;
        /// let section = OBJECTS.handler_section(); // in a signal handler
        /// let object = section.lookup(pc).unwrap();
        /// let hdr = object.info().eh_frame_hdr().unwrap();
        /// let copy = object.payload().eh_frame_hdr.as_deref().unwrap();
        /// assert_eq!(copy.len() as u64, hdr.end - hdr.start);
        /// ```
        pub fn with_payload(build: fn(&MappedObject<'_>) -> P) -> LoadedObjects<P> {
            LoadedObjects {
                build,
                index: AddrIndex::new(),
                refreshing: Mutex::new(()),
                state: Mutex::new(State {
                    scanned: false,
                    counters: None,
                    unloaded: BTreeMap::new(),
                    left_out: Vec::new(),
                    rejected: Vec::new(),
                }),
            }
        }
    }

    /// How many objects are indexed (loaded at the last refresh).
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// assert!(objects.loaded_count() >= 2); // the program and libc, at least
    /// ```
    pub fn loaded_count(&self) -> usize {
        self.index.module_count()
    }

    /// How many unloaded objects are kept (not forgotten yet).
    ///
    /// ```
    /// assert_eq!(latchtree::LoadedObjects::new().unloaded_count(), 0);
    /// ```
    pub fn unloaded_count(&self) -> usize {
        lock(&self.state).unloaded.len()
    }

    /// The underlying index's statistics (read retries of
    /// [`lookup`](Self::lookup), writes).
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// let _ = objects.stats().read_retries;
    /// ```
    pub fn stats(&self) -> crate::stats::Stats {
        self.index.stats()
    }
}
