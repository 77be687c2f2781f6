//! The refresh, and what it reports ([`Refresh`]): one `dl_iterate_phdr`
//! pass, the diff against the index, the new objects looked at (named, held
//! mapped, their `.eh_frame` walked, their payloads built) under no lock of
//! the index but the one that serializes refreshes, then one batch. What it
//! would drop under a lock (payloads, loader references) it drops after
//! them.

use super::diff::{Diff, diff};
use super::eh_frame::{EhFrameError, eh_frame_of};
use super::find;
use super::hold::LoaderRef;
use super::index::{Entry, LoadedObjects};
use super::info::ObjectInfo;
use super::mapped::MappedObject;
use super::object::ObjectRef;
use super::problem::{Problem, ProblemKind};
use super::scan::{self, LoadCounters, LoadedMemory, Scan, Scanned, Unheld};
use crate::addr_index::{AddrIndex, InsertError, ModuleId, ModuleMeta, Removed, Segment};
use crate::reclaim::WriterScope;
use crate::sync::lock;
use std::sync::Arc;

/// What one [`LoadedObjects::refresh`] did.
///
/// ```
/// let objects = latchtree::LoadedObjects::new();
/// let first = objects.refresh();
/// assert_eq!(first.added.len(), objects.loaded_count());
/// assert!(first.removed.is_empty() && first.skipped.is_empty());
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
    /// so also id order). Without their payloads:
    /// [`object`](LoadedObjects::object) gives those.
    pub added: Vec<ObjectRef>,
    /// Objects gone since the last refresh, out of the index but resolvable
    /// by id until forgotten.
    pub removed: Vec<ObjectRef>,
    /// How many indexed objects are still there.
    pub unchanged: usize,
    /// What was odd about the objects it added (or left out).
    pub problems: Vec<Problem>,
    /// Objects the scan found that were unloaded before the refresh could
    /// hold them (a `dlclose` on another thread in between): not indexed,
    /// no id, no payload; the next refresh does not see them either. A
    /// sample taken in one while it was mapped (found with
    /// [`LoadedObjects::unindexed`]) is attributed with
    /// [`UnindexedObject::matches`](crate::UnindexedObject::matches).
    pub skipped: Vec<Arc<ObjectInfo>>,
}

/// An object on its way into the index: looked at, held, its payload
/// built.
struct Built<P> {
    entry: Entry<P>,
    segments: Vec<Segment>,
    /// Tried again after a rejection: nothing reported.
    quiet: bool,
}

/// What a refresh drops only after its locks, also when it unwinds
/// (declared before `refreshing`'s guard: dropped after it). Fields drop in
/// this order.
struct Leftovers<P> {
    /// The batch's writer scope: the due payloads of objects unloaded
    /// earlier, which the batch handed out and the scope postponed, are
    /// dropped when it ends, after `refreshing` (a payload's `Drop` may
    /// refresh, or wait for a thread that does).
    scope: Option<WriterScope>,
    /// Payloads built for the batch (left here only if the refresh
    /// unwinds).
    built: Vec<Built<P>>,
    /// Rejected entries (their payloads' `Drop` is user code).
    rejected: Vec<Entry<P>>,
    /// The batch's removed records.
    removed: Vec<Removed<Entry<P>>>,
    /// The loader references (a `dlclose` may run an object's
    /// destructors), last.
    held: Vec<LoaderRef>,
}

impl<P> Default for Leftovers<P> {
    fn default() -> Self {
        Leftovers {
            scope: None,
            built: Vec::new(),
            rejected: Vec::new(),
            removed: Vec::new(),
            held: Vec::new(),
        }
    }
}

impl<P: Send + Sync + 'static> Leftovers<P> {
    /// Drops everything, in order, once the refresh released its locks:
    /// the postponed due payloads, rejected payloads, the unloaded
    /// objects' payloads (after their grace period: a section or guard
    /// still open keeps them until a later write; their info stays until
    /// forgotten), then the loader references (a `dlclose` that unloads an
    /// object runs its destructors here).
    fn finish(self, index: &AddrIndex<Entry<P>>) {
        let Leftovers {
            scope,
            built,
            rejected,
            removed,
            held,
        } = self;
        drop(scope);
        drop(built);
        drop(rejected);
        if !removed.is_empty() {
            drop(removed);
            index.flush();
        }
        drop(held);
    }
}

/// A known object, as the diff sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Known {
    Indexed(ModuleId),
    LeftOut(usize),
}

/// A new object's info: made from this scan, or kept from an earlier one
/// that the index rejected.
enum Looked {
    Fresh(ObjectInfo),
    Again(Arc<ObjectInfo>),
}

impl Looked {
    fn info(&self) -> &ObjectInfo {
        match self {
            Looked::Fresh(info) => info,
            Looked::Again(info) => info,
        }
    }
}

impl<P: Send + Sync + 'static> LoadedObjects<P> {
    /// Brings the index up to date with the loaded objects (see
    /// [`LoadedObjects`]): one `dl_iterate_phdr` pass, then one batch that
    /// removes the objects gone and inserts the new ones. Objects it removes
    /// stay resolvable through [`object`](Self::object) until forgotten.
    /// Only new objects cost more than the pass: each is held mapped while
    /// its `.eh_frame` is walked and its payload built.
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
        self.refresh_with(scan::load_counters, scan::scan, LoaderRef::hold)
    }

    /// [`refresh`](Self::refresh) with its three contacts with the loader
    /// given: its counters now, a full scan, and a reference on an object
    /// (the unit tests give synthetic ones).
    pub(super) fn refresh_with(
        &self,
        counters: impl FnOnce() -> Option<LoadCounters>,
        scan: impl FnOnce() -> Scan,
        hold: impl Fn(&ObjectInfo) -> Option<LoaderRef>,
    ) -> Refresh {
        // Before the lock: dropped after it, also when unwinding.
        let mut left = Leftovers::default();
        let refreshing = lock(&self.refreshing);
        {
            let state = lock(&self.state);
            if state.scanned {
                let now = counters();
                if now.is_some() && now == state.counters {
                    return Refresh {
                        counters: now,
                        unchanged: self.index.module_count(),
                        ..Refresh::default()
                    };
                }
            }
        }
        let report = self.apply(scan(), hold, &mut left);
        drop(refreshing);
        left.finish(&self.index);
        report
    }

    /// The part of [`refresh`](Self::refresh) after the scan (the caller
    /// holds `refreshing`): the diff (under `state`), the new objects'
    /// infos, `.eh_frame`s and payloads (under no lock of this index but
    /// `refreshing`, each object held by a loader reference from `hold`),
    /// then one batch (under `state` again). What must be dropped after
    /// `refreshing` goes to `left`.
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
            // Pinned before `state` (as in `objects`); under `refreshing`
            // still, which only a refresh takes.
            let guard = self.index.pin();
            let mut state = lock(&self.state);
            let Diff { added, removed, .. } = {
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
        let mut new: Vec<(Looked, LoaderRef)> = Vec::new();
        for i in added {
            let Some(scanned) = objects.get_mut(i).and_then(Option::take) else {
                continue;
            };
            let again = retry
                .iter()
                .position(|o| o.identity() == scanned.identity());
            let looked = match again {
                Some(j) => Looked::Again(retry.swap_remove(j)),
                None => {
                    let (info, problems) = ObjectInfo::from_scan(scanned);
                    let problems = problems.into_iter().map(|kind| info.problem(kind));
                    report.problems.extend(problems);
                    Looked::Fresh(info)
                }
            };
            if looked.info().segments().is_empty() {
                left_out.push(into_arc(looked)); // reported as NoLoadSegment
                continue;
            }
            // Held until after the batch: the object stays mapped while its
            // `.eh_frame` is walked and its payload built. Unloaded since
            // the scan: not indexed (the next refresh does not see it
            // either), reported.
            match hold(looked.info()) {
                Some(held) => new.push((looked, held)),
                None => {
                    if let Looked::Fresh(info) = looked {
                        report.skipped.push(Arc::new(info));
                    }
                }
            }
        }
        // The rejected objects still in `retry` are gone.
        drop(retry);
        walk_eh_frames(&mut new);

        // The user's payloads, built here: no lock of this index held but
        // `refreshing` (the builder may call every method but `refresh`).
        // Each object's reference goes to `left` first, so that it outlives
        // the builder's slices of the object's memory, also if the builder
        // panics.
        for (looked, held) in new {
            let quiet = matches!(looked, Looked::Again(_));
            let info = into_arc(looked);
            if let (false, Err(why)) = (quiet, &info.eh_frame) {
                (report.problems).push(info.problem(ProblemKind::NoEhFrame(*why)));
            }
            let keeps_mapped = held.keeps_mapped();
            left.held.push(held);
            let payload = (self.build)(&MappedObject::new(&info, keeps_mapped));
            let segments: Vec<Segment> = (info.segments().iter())
                .map(|s| Segment {
                    range: s.range.clone(),
                    flags: s.flags,
                })
                .collect();
            let entry = Entry { info, payload };
            left.built.push(Built {
                entry,
                segments,
                quiet,
            });
        }

        // One batch: removals first, so an object loaded where another was
        // unloaded fits. What comes back (removed records, rejected values)
        // is returned out of the closure, to be dropped outside the lock.
        // Under `state`, so that `object` finds an object removed here in
        // `unloaded` once it misses it in the index. Inside a writer scope
        // that outlives `refreshing` (`left.scope`): what the batch hands
        // out as due (payloads of objects unloaded earlier, which a section
        // kept until now) is dropped when it ends, after every lock.
        left.scope = Some(WriterScope::enter());
        let built = core::mem::take(&mut left.built);
        let mut state = lock(&self.state);
        state.left_out.append(&mut left_out);
        type Inserted<P> = (
            bool,
            Arc<ObjectInfo>,
            Result<ModuleId, InsertError<Entry<P>>>,
        );
        let (removed, inserted) = self.index.write(|batch| {
            let removed: Vec<Removed<Entry<P>>> =
                gone.iter().filter_map(|&id| batch.remove(id)).collect();
            let inserted: Vec<Inserted<P>> = (built.into_iter())
                .map(
                    |Built {
                         entry,
                         segments,
                         quiet,
                     }| {
                        let meta = ModuleMeta {
                            base: Some(entry.info.bias()),
                            tag: 0,
                        };
                        let info = Arc::clone(&entry.info);
                        (quiet, info, batch.insert_module_with(segments, entry, meta))
                    },
                )
                .collect();
            (removed, inserted)
        });

        for (quiet, info, result) in inserted {
            match result {
                Ok(id) => report.added.push(ObjectRef::of(id, info, true)),
                Err(e) => {
                    let (error, entry) = e.into_parts();
                    // Its payload's `Drop` is user code: after every lock.
                    left.rejected.push(entry);
                    if !quiet {
                        (report.problems).push(info.problem(ProblemKind::Rejected(error)));
                    }
                    state.rejected.push(info);
                }
            }
        }
        for r in &removed {
            let info = Arc::clone(&r.info);
            report
                .removed
                .push(ObjectRef::of(r.id(), Arc::clone(&info), false));
            state.unloaded.insert(r.id(), info);
        }
        state.scanned = true;
        state.counters = report.counters;
        drop(state);
        left.removed = removed;
        report
    }
}

/// The info, shared.
fn into_arc(looked: Looked) -> Arc<ObjectInfo> {
    match looked {
        Looked::Fresh(info) => Arc::new(info),
        Looked::Again(info) => info,
    }
}

/// Walks the `.eh_frame` of each new object that has a header to walk
/// from: in place where the refresh holds it mapped, else under the
/// loader's lock in one more pass over just those (`scan::eh_frames`).
/// Objects tried again after a rejection kept theirs.
fn walk_eh_frames(new: &mut [(Looked, LoaderRef)]) {
    let mut unheld = Vec::new();
    for (i, (looked, held)) in new.iter_mut().enumerate() {
        let Looked::Fresh(info) = looked else {
            continue;
        };
        // `from_scan` leaves `Unloaded` where there is a header to walk.
        let (Err(EhFrameError::Unloaded), Some(hdr)) = (&info.eh_frame, info.eh_frame_hdr()) else {
            continue;
        };
        if !held.keeps_mapped() {
            unheld.push(i);
            continue;
        }
        // `eh_frame_of` reads only inside readable segments of `info.segments()`, each exactly
        // one readable PT_LOAD of the object (none was merged: `from_scan` leaves `Unloaded`
        // only then), which `held` keeps mapped until after this call.
        // SAFETY: so `LoadedMemory`'s reads are sound during the walk.
        info.eh_frame = unsafe { eh_frame_of(&hdr, info.segments(), &LoadedMemory) };
    }
    if unheld.is_empty() {
        return;
    }
    let found: Vec<Result<_, _>> = {
        let mut wanted: Vec<Unheld<'_>> = (unheld.iter())
            .map(|&i| {
                let info = new[i].0.info();
                let hdr = info.eh_frame_hdr().unwrap_or(0..0);
                let name = info.loader_name().as_encoded_bytes();
                Unheld::new(name, info.bias(), info.segments(), hdr)
            })
            .collect();
        scan::eh_frames(&mut wanted);
        wanted.into_iter().map(|w| w.eh_frame).collect()
    };
    for (i, eh_frame) in unheld.into_iter().zip(found) {
        if let Looked::Fresh(info) = &mut new[i].0 {
            info.eh_frame = eh_frame;
        }
    }
}
