//! [`LoadedObjects`]: a live index of this process's loaded ELF objects
//! (feature `objects`; Linux, 64-bit).
//!
//! Layers, each in its own file:
//! - [`scan`]: one `dl_iterate_phdr` pass (the only FFI), and the pure
//!   [`scan::parse_object`] that turns one object's program headers into
//!   segments, a build id and problems;
//! - [`note`]: the build-id note parser;
//! - [`info`]: [`ObjectInfo`], what is kept per object, and its path;
//! - [`diff`]: what changed between the index and a scan;
//! - [`problem`]: what a refresh reports as odd;
//! - this file: the index itself, an [`AddrIndex`] with one module per
//!   object, and the refresh that applies a scan's diff as one batch.

mod diff;
mod eh_frame;
mod find;
mod handler;
mod hold;
mod info;
mod note;
mod problem;
mod scan;
mod segment;
#[cfg(test)]
mod tests;

pub use find::UnindexedObject;
pub use handler::{HandlerObject, ObjectsSection};
pub use info::ObjectInfo;
pub use note::{BuildId, NoteError};
pub use problem::{Problem, ProblemKind};
pub use scan::LoadCounters;
pub use segment::{LoadSegment, ObjectKind};

use crate::addr_index::{AddrIndex, InsertError, ModuleId, ModuleMeta, RawHit, Removed, Segment};
use crate::reclaim::WriterScope;
use crate::sync::{Mutex, const_fn_unless_loom, lock};
use core::fmt;
use core::ops::Range;
use diff::{Diff, diff};
use hold::LoaderRef;
use scan::{Scan, Scanned};
use segment::PF_X;
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
/// refresh: they are reported in [`Refresh::problems`] and go in as far as
/// they can.
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
/// and payloads are dropped, after the refresh released its locks). Do not call [`refresh`](Self::refresh) from
/// a shared library's constructor or destructor (they run under the
/// loader's lock, the other order) while another thread may refresh too.
pub struct LoadedObjects<P: 'static = ()> {
    index: AddrIndex<Entry<P>>,
    /// Held by a refresh throughout (one at a time), also while payloads
    /// are built, when `state` is not.
    refreshing: Mutex<()>,
    state: Mutex<State>,
    /// Builds an object's payload (run by `refresh`, with no lock of this
    /// index held but `refreshing`, before its write).
    build: fn(&ObjectInfo) -> P,
}

/// What the index holds per object: its info and the user's payload.
#[derive(Debug)]
struct Entry<P> {
    info: Arc<ObjectInfo>,
    payload: P,
}

/// What a refresh needs beyond the index; guarded by `LoadedObjects::state`.
/// Only refreshes (one at a time: `refreshing`) change anything but
/// `unloaded`.
#[derive(Debug)]
struct State {
    /// Whether a full scan has run.
    scanned: bool,
    /// The loader's counters at the last full scan.
    counters: Option<LoadCounters>,
    /// Objects removed from the index, until forgotten: their info only
    /// (the payload went with the index's record, issue 25).
    unloaded: BTreeMap<ModuleId, Arc<ObjectInfo>>,
    /// Objects with nothing to index (no `PT_LOAD`), kept while they stay
    /// loaded so that they are reported once.
    left_out: Vec<Arc<ObjectInfo>>,
    /// Objects the index refused (their segments overlap another object's),
    /// tried again, quietly, on every rescan: the object in their way may be
    /// gone.
    rejected: Vec<Arc<ObjectInfo>>,
}

/// What a refresh drops only after its locks: rejected entries and removed
/// records (their payloads' `Drop` is user code) and the loader references
/// (a `dlclose` may run an object's destructors).
struct Leftovers<P> {
    rejected: Vec<Entry<P>>,
    removed: Vec<Removed<Entry<P>>>,
    held: Vec<LoaderRef>,
}

impl<P> Default for Leftovers<P> {
    fn default() -> Self {
        Leftovers {
            rejected: Vec::new(),
            removed: Vec::new(),
            held: Vec::new(),
        }
    }
}

/// A known object, as the diff sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Known {
    Indexed(ModuleId),
    LeftOut(usize),
}

/// What one [`LoadedObjects::refresh`] did.
///
/// ```
/// let objects = latchtree::LoadedObjects::new();
/// let first = objects.refresh();
/// assert_eq!(first.added.len(), objects.loaded_count());
/// assert!(first.removed.is_empty());
/// for problem in &first.problems {
///     println!("{problem}"); // e.g. "/usr/lib/libfoo.so (bias 0x…): no GNU build id"
/// }
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Refresh {
    /// Whether it scanned the loaded objects. False when the loader's
    /// counters showed that nothing was loaded or unloaded since the last
    /// scan (then nothing else changed either).
    pub rescanned: bool,
    /// The loader's counters, if it keeps them (glibc does, musl does not).
    pub counters: Option<LoadCounters>,
    /// Objects new since the last refresh, now in the index (loader order,
    /// so also id order).
    pub added: Vec<ObjectRef>,
    /// Objects gone since the last refresh, out of the index but resolvable
    /// by id until forgotten.
    pub removed: Vec<ObjectRef>,
    /// How many indexed objects are still there.
    pub unchanged: usize,
    /// What was odd about the objects it added (or left out).
    pub problems: Vec<Problem>,
}

/// An object known to a [`LoadedObjects`], loaded or unloaded, on a normal
/// thread: its id, its [`ObjectInfo`], and whether it was still loaded at
/// the time of the call.
///
/// ```
/// let objects = latchtree::LoadedObjects::new();
/// objects.refresh();
/// let id = objects.lookup(main as *const () as u64).unwrap().id();
/// let main_program = objects.object(id).unwrap();
/// assert_eq!(main_program.id(), id);
/// assert!(main_program.is_loaded());
/// assert_eq!(main_program.info().kind(), latchtree::ObjectKind::MainProgram);
/// ```
#[derive(Clone, Debug)]
pub struct ObjectRef {
    id: ModuleId,
    info: Arc<ObjectInfo>,
    loaded: bool,
}

impl ObjectRef {
    /// The object's id in the index (never reused). See the example on
    /// [`ObjectRef`].
    pub fn id(&self) -> ModuleId {
        self.id
    }

    /// What is known of the object (see the example on [`ObjectRef`]).
    pub fn info(&self) -> &Arc<ObjectInfo> {
        &self.info
    }

    /// Whether it was still loaded (in the index) when this was made (see
    /// the example on [`ObjectRef`]).
    pub fn is_loaded(&self) -> bool {
        self.loaded
    }
}

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
    raw: RawHit,
    pc: u64,
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
fn no_payload(_: &ObjectInfo) {}

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
        /// `build` from the object's info when a refresh indexes it: an
        /// unwinder, a symbol table, anything a signal handler needs in
        /// place. A handler reads it through a
        /// [`handler_section`](LoadedObjects::handler_section); it is
        /// dropped by the refresh that finds the object unloaded (on its
        /// thread, with no lock of this index held), once no section or
        /// guard can see it any more (else by a later refresh that changes
        /// the index, or [`forget`](LoadedObjects::forget)). The object's
        /// info stays, for late samples, until forgotten. `build` runs inside
        /// `refresh`, on its thread, with no lock of this index held but the
        /// one that serializes refreshes: it may call every method of this
        /// index but `refresh`. While it runs, the refresh holds its own
        /// loader reference on the object (`dlopen(RTLD_NOLOAD)`, let go
        /// after the refresh's batch), so the object's memory stays mapped
        /// even if another thread `dlclose`s it meanwhile: `build` may read
        /// its tables ([`ObjectInfo::eh_frame`] and the others) in place,
        /// and should copy what a signal handler will need, since the
        /// object may be unloaded before the next refresh takes it out of
        /// the index.
        ///
        /// ```
        /// use latchtree::{LoadedObjects, ObjectInfo};
        ///
        /// /// What a handler-side unwinder needs, built once per object.
        /// struct Tables { eh_frame_hdr: Option<std::ops::Range<u64>> }
        ///
        /// static OBJECTS: LoadedObjects<Tables> =
        ///     LoadedObjects::with_payload(|info: &ObjectInfo| Tables { eh_frame_hdr: info.eh_frame_hdr() });
        ///
        /// OBJECTS.refresh();
        /// let pc = main as *const () as u64;
        /// let section = OBJECTS.handler_section(); // in a signal handler
        /// let object = section.lookup(pc).unwrap();
        /// assert_eq!(object.payload().eh_frame_hdr, object.info().eh_frame_hdr());
        /// assert!(object.payload().eh_frame_hdr.is_some());
        /// ```
        pub fn with_payload(build: fn(&ObjectInfo) -> P) -> LoadedObjects<P> {
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
    /// [`AddrIndex::lookup_many`]. **Async-signal-safe**, like `lookup`.
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

    /// Brings the index up to date with the loaded objects (see
    /// [`LoadedObjects`]): one `dl_iterate_phdr` pass, then one batch that
    /// removes the objects gone and inserts the new ones. Objects it removes
    /// stay resolvable through [`object`](Self::object) until forgotten.
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// let first = objects.refresh();
    /// assert!(first.rescanned);
    /// let second = objects.refresh();
    /// assert!(second.added.is_empty() && second.removed.is_empty());
    /// assert_eq!(second.unchanged, objects.loaded_count());
    /// ```
    pub fn refresh(&self) -> Refresh {
        find::resolve();
        let _refreshing = lock(&self.refreshing);
        {
            let state = lock(&self.state);
            if state.scanned {
                let now = scan::load_counters();
                if now.is_some() && now == state.counters {
                    return Refresh {
                        counters: now,
                        unchanged: self.index.module_count(),
                        ..Refresh::default()
                    };
                }
            }
        }
        let mut left = Leftovers::default();
        let report = self.apply(scan::scan(), LoaderRef::hold, &mut left);
        drop(_refreshing);
        // With no lock of this index held (review): rejected payloads, the
        // unloaded objects' payloads (after their grace period: a section
        // or guard still open keeps them until a later write; their info
        // stays until forgotten), then the loader references (a `dlclose`
        // that unloads an object runs its destructors here).
        drop(left.rejected);
        if !left.removed.is_empty() {
            drop(left.removed);
            self.index.flush();
        }
        drop(left.held);
        report
    }

    /// The part of [`refresh`](Self::refresh) after the scan (the caller
    /// holds `refreshing`): the diff (under `state`), the new objects'
    /// infos and payloads (under no lock of this index but `refreshing`,
    /// each object held by a loader reference from `hold`: issue 25, 2
    /// and 6), then one batch (under `state` again).
    fn apply(
        &self,
        scan: Scan,
        hold: impl Fn(&ObjectInfo) -> Option<LoaderRef>,
        left: &mut Leftovers<P>,
    ) -> Refresh {
        let mut report = Refresh {
            rescanned: true,
            counters: scan.counters,
            ..Refresh::default()
        };
        let (gone, added, mut retry) = {
            let mut state = lock(&self.state);
            let Diff { added, removed, .. } = {
                let guard = self.index.pin();
                let indexed = self
                    .index
                    .modules(&guard)
                    .map(|m| (m.value().info.identity(), Known::Indexed(m.id())));
                let left_out = (state.left_out.iter().enumerate())
                    .map(|(i, o)| (o.identity(), Known::LeftOut(i)));
                diff(
                    indexed.chain(left_out),
                    scan.objects.iter().map(Scanned::identity),
                )
            };
            // Gone objects that were never indexed: just forget them.
            let mut gone = Vec::new();
            for known in removed.iter().rev() {
                match *known {
                    Known::Indexed(id) => gone.push(id),
                    Known::LeftOut(i) => drop(state.left_out.swap_remove(i)),
                }
            }
            gone.reverse();
            (gone, added, core::mem::take(&mut state.rejected))
        };
        // Only refreshes write the index, and this one holds `refreshing`.
        report.unchanged = self.index.module_count() - gone.len();

        // New objects (and rejected ones, again): name them and look at
        // their files now, outside every lock. An object rejected before is
        // tried again as it was, with nothing reported.
        let mut objects: Vec<Option<Scanned>> = scan.objects.into_iter().map(Some).collect();
        let mut left_out = Vec::new();
        let mut new = Vec::new();
        for i in added {
            let Some(scanned) = objects.get_mut(i).and_then(Option::take) else {
                continue;
            };
            let again = retry
                .iter()
                .position(|o| o.identity() == scanned.identity());
            let (info, quiet) = match again {
                Some(j) => (retry.swap_remove(j), true),
                None => {
                    let (info, problems) = ObjectInfo::from_scan(scanned);
                    let info = Arc::new(info);
                    report
                        .problems
                        .extend(problems.into_iter().map(|kind| Problem::of(&info, kind)));
                    (info, false)
                }
            };
            if info.segments().is_empty() {
                left_out.push(info); // reported as NoLoadSegment
                continue;
            }
            // Held until after the batch: the object stays mapped while its
            // payload is built. Unloaded since the scan: not indexed (the
            // next refresh does not see it either).
            let Some(held) = hold(&info) else {
                continue;
            };
            let segments: Vec<Segment> = (info.segments().iter())
                .map(|s| Segment {
                    range: s.range.clone(),
                    flags: s.flags,
                })
                .collect();
            new.push((info, segments, quiet, held));
        }
        // The rejected objects still in `retry` are gone.
        drop(retry);

        // The user's payloads, built here: no lock of this index held but
        // `refreshing` (the builder may call every method but `refresh`).
        let infos: Vec<(Arc<ObjectInfo>, bool)> = (new.iter())
            .map(|(info, _, quiet, _)| (Arc::clone(info), *quiet))
            .collect();
        let held = &mut left.held;
        let new: Vec<_> = new
            .into_iter()
            .map(|(info, segments, _, h)| {
                held.push(h);
                let payload = (self.build)(&info);
                (Entry { info, payload }, segments)
            })
            .collect();

        // One batch: removals first, so an object loaded where another was
        // unloaded fits. What comes back (removed records, rejected values)
        // is returned out of the closure, to be dropped outside the lock.
        // Under `state`, so that `object` finds an object removed here in
        // `unloaded` once it misses it in the index.
        // Inside a writer scope: what the batch hands out as due (user
        // payloads) is dropped when the scope ends, after `state` (review).
        let scope = WriterScope::enter();
        let mut state = lock(&self.state);
        state.left_out.append(&mut left_out);
        let (removed, inserted) = self.index.write(|batch| {
            let removed: Vec<Removed<Entry<P>>> =
                gone.iter().filter_map(|&id| batch.remove(id)).collect();
            let inserted: Vec<Result<ModuleId, InsertError<Entry<P>>>> = new
                .into_iter()
                .map(|(entry, segments)| {
                    let meta = ModuleMeta {
                        base: Some(entry.info.bias()),
                        tag: 0,
                    };
                    batch.insert_module_with(segments, entry, meta)
                })
                .collect();
            (removed, inserted)
        });

        for ((info, quiet), result) in infos.into_iter().zip(inserted) {
            match result {
                Ok(id) => report.added.push(ObjectRef {
                    id,
                    info,
                    loaded: true,
                }),
                Err(e) => {
                    let (error, entry) = e.into_parts();
                    // Its payload's `Drop` is user code: after `state`'s
                    // lock (review), by the caller of `apply`.
                    left.rejected.push(entry);
                    if !quiet {
                        (report.problems).push(Problem::of(&info, ProblemKind::Rejected(error)));
                    }
                    state.rejected.push(info);
                }
            }
        }
        for r in &removed {
            let info = Arc::clone(&r.value().info);
            report.removed.push(ObjectRef {
                id: r.id(),
                info: Arc::clone(&info),
                loaded: false,
            });
            state.unloaded.insert(r.id(), info);
        }
        state.scanned = true;
        state.counters = report.counters;
        drop(state);
        drop(scope);
        left.removed = removed;
        report
    }

    /// The object with this id, loaded or unloaded-but-not-forgotten. For
    /// normal threads (it may pin an epoch and take a lock).
    ///
    /// ```
    /// use latchtree::{LoadedObjects, ModuleId};
    /// let objects = LoadedObjects::new();
    /// objects.refresh();
    /// let hit = objects.lookup(main as *const () as u64).unwrap();
    /// assert!(objects.object(hit.id()).unwrap().is_loaded());
    /// assert!(objects.object(ModuleId::from_raw(u64::MAX)).is_none());
    /// ```
    pub fn object(&self, id: ModuleId) -> Option<ObjectRef> {
        {
            let guard = self.index.pin();
            if let Some(entry) = self.index.get(id, &guard) {
                return Some(ObjectRef {
                    id,
                    info: Arc::clone(&entry.info),
                    loaded: true,
                });
            }
        }
        // Not indexed: unloaded, or unknown. A refresh that unloads it moves
        // it from the index to `unloaded` while holding `state`, so taking
        // `state` after the miss finds it there.
        let state = lock(&self.state);
        state.unloaded.get(&id).map(|info| ObjectRef {
            id,
            info: Arc::clone(info),
            loaded: false,
        })
    }

    /// Every known object, loaded or unloaded-but-not-forgotten, in id
    /// order.
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// let all = objects.objects();
    /// assert_eq!(all.len(), objects.loaded_count());
    /// assert!(all.windows(2).all(|w| w[0].id() < w[1].id()));
    /// ```
    pub fn objects(&self) -> Vec<ObjectRef> {
        let state = lock(&self.state);
        let guard = self.index.pin();
        let mut all: Vec<ObjectRef> = (self.index.modules(&guard))
            .map(|m| ObjectRef {
                id: m.id(),
                info: Arc::clone(&m.value().info),
                loaded: true,
            })
            .chain(state.unloaded.iter().map(|(&id, info)| ObjectRef {
                id,
                info: Arc::clone(info),
                loaded: false,
            }))
            .collect();
        all.sort_by_key(ObjectRef::id);
        all
    }

    /// Forgets an unloaded object: its id resolves to nothing from now on,
    /// and its info is dropped (the payload went when the refresh that
    /// found it unloaded took it out of the index, or, if a guard or a
    /// section could still see it then, goes here: before this returns,
    /// also when a refresh on another thread is dropping it, unless a guard
    /// or section can still see it).
    /// Returns whether it was an unloaded object not yet forgotten (a
    /// loaded object is not forgotten: `false`).
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// let id = objects.lookup(main as *const () as u64).unwrap().id();
    /// assert!(!objects.forget(id)); // still loaded
    /// ```
    pub fn forget(&self, id: ModuleId) -> bool {
        let removed = lock(&self.state).unloaded.remove(&id);
        let forgotten = removed.is_some();
        drop(removed);
        // What the index still holds of unloaded objects (their payloads,
        // kept by a reader at their refresh) goes too, unless a guard or
        // handler section can still see it; and a refresh on another thread
        // that took it out just before has finished dropping it (issue 25,
        // 1).
        self.index.flush();
        self.index.wait_for_drops();
        forgotten
    }

    /// Forgets every unloaded object (once no sample that names one is left
    /// to resolve); returns how many.
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// assert_eq!(objects.forget_unloaded(), 0);
    /// ```
    pub fn forget_unloaded(&self) -> usize {
        let unloaded = core::mem::take(&mut lock(&self.state).unloaded);
        let n = unloaded.len();
        drop(unloaded);
        self.index.flush(); // as in `forget`
        self.index.wait_for_drops();
        n
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

impl Problem {
    /// A problem with `info`.
    fn of(info: &ObjectInfo, kind: ProblemKind) -> Problem {
        Problem {
            path: info.path().into(),
            bias: info.bias(),
            kind,
        }
    }
}
