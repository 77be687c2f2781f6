//! The per-copy module table.
//!
//! The **module table** ([`Table`]) maps ids to records, one table per copy
//! of the range tree and steered by the same latch, so a reader that
//! validated saw the ranges and the record of one version: `get(id)`,
//! `module_count()` and `lookup` never disagree. The writer changes table 0
//! while readers are on copy 1 (during the transaction body) and brings
//! table 1 level when copy 1 is published, copying the slots it changed.
//!
//! A table is a sequence of `(id, record)` slots sorted by id (ids only
//! grow, so inserting appends). Removing a module leaves a tombstone (a null
//! record); when tombstones outnumber live slots the slots are compacted in
//! place, front to back, a slice per write ([`Table::compact_step`]): no
//! write moves more than a slice of slots, plus two a slot it appended
//! (compacting 2^18 slots at once held the lock over a millisecond). While
//! one runs, the slots between the live ones already moved down and those
//! not reached yet are a *hole*, outside the used slots, which every search
//! and walk skips; ids still rise along the used slots. Once it is done the
//! table holds at most twice its live modules (plus a minimum). Every slot
//! word, the length and the hole's ends are atomics.
//!
//! The slots live in **segments** ([`Array`]s) of doubling size: segment 0
//! holds slots `0..8`, segment `s > 0` slots `4 << s .. 8 << s`. Growing
//! appends a segment and never moves a slot, so no write copies the table
//! (a doubling array would copy 2 MiB a table at 2^17 modules, inside one
//! insert); a fresh segment is zeroed memory, which the allocator hands out
//! without writing it. Shrinking (when a compaction leaves the slots mostly
//! empty) unpublishes the top segments, which pinned readers may still be
//! reading: they are queued on the table's *replaced* list (under the lock)
//! and moved into the index's limbo by the next write
//! ([`Table::take_replaced`]), which frees them once their grace period
//! passed, like a record. No `Box` or `&mut` is ever made again for a
//! published segment: readers hold `&Array` to it. Only pinned readers,
//! handler sections (`HandlerSection::get`: the sections' grace period
//! covers segments like records) and the writer read segments; the
//! signal-safe `lookup` and `module_count` read none. Readers bound every
//! probe by the segment's own length, which is immutable, and treat a
//! missing segment as the end, so a torn `(segment, len)` pair cannot take
//! them out of bounds. Both tables have the same segments after every
//! transaction, at most four times the slots the used ones need (while a
//! compaction runs: the slots up to the table's end, hole included).

use super::record::Record;
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ptr::{self, NonNull};

/// One `(id, record)` entry; `record` null: a tombstone.
struct Slot<T> {
    id: AtomicU64,
    record: AtomicPtr<Record<T>>,
}

/// One segment of a table. `slots` is never resized; `replaced_next` links
/// the table's list of replaced segments (writer-only).
pub(crate) struct Array<T> {
    slots: Box<[Slot<T>]>,
    replaced_next: AtomicPtr<Array<T>>,
}

/// Slots in segment 0; segment `s > 0` holds `FIRST << (s - 1)`.
const FIRST: usize = 8;

/// Segments a table may have: room for 2^42 slots on 64-bit targets (64
/// TiB of them), for every index a `usize` holds below.
const SEGMENTS: usize = if usize::BITS >= 64 {
    40
} else {
    usize::BITS as usize - 2
};

/// The first slot of segment `s`, which is also the slots segments `0..s`
/// hold.
const fn start(s: usize) -> usize {
    // Branch-free (a write computes it a few dozen times): `FIRST / 2 << s`
    // holds the bit `FIRST / 2` only for `s == 0`.
    const { assert!(FIRST.is_power_of_two() && FIRST >= 2) };
    ((FIRST / 2) << s) & !(FIRST / 2)
}

/// The segment holding slot `i`, and `i`'s place in it.
#[inline]
const fn split(i: usize) -> (usize, usize) {
    let s = (usize::BITS - (i / FIRST).leading_zeros()) as usize;
    (s, i - start(s))
}

/// [`Table::search`]'s answer for an id below the slots searched.
struct Below;

/// One copy's module table; see the module docs.
pub(crate) struct Table<T> {
    segments: [AtomicPtr<Array<T>>; SEGMENTS],
    /// Segments published, a prefix of `segments` (writer-only).
    count: AtomicUsize,
    /// Slots in use (live and tombstones), a prefix of the slots.
    len: AtomicUsize,
    /// Live slots: the module count.
    live: AtomicUsize,
    /// A compaction's hole (see the module docs): slots `hole[0]..hole[1]`
    /// are not in use; `[NO_HOLE; 2]` while no compaction runs.
    hole: [AtomicUsize; 2],
    /// Segments this table stopped publishing, not yet retired: a push-only
    /// list (pushed under the writer lock, taken whole after it).
    replaced: AtomicPtr<Array<T>>,
}

#[cfg(not(latchtree_loom))]
const fn no_segments<T>() -> [AtomicPtr<Array<T>>; SEGMENTS] {
    [const { AtomicPtr::new(ptr::null_mut()) }; SEGMENTS]
}

#[cfg(latchtree_loom)]
fn no_segments<T>() -> [AtomicPtr<Array<T>>; SEGMENTS] {
    core::array::from_fn(|_| AtomicPtr::new(ptr::null_mut()))
}

/// `n` empty slots (id 0, a tombstone), `n > 0`: zeroed memory, which the
/// allocator hands out without writing it where it maps fresh pages.
#[cfg(not(latchtree_loom))]
fn empty_slots<T>(n: usize) -> Box<[Slot<T>]> {
    let layout = alloc::alloc::Layout::array::<Slot<T>>(n).expect("a table segment's size");
    // SAFETY: `n > 0` and a slot is not zero-sized: the layout is not empty.
    let p = unsafe { alloc::alloc::alloc_zeroed(layout) }.cast::<Slot<T>>();
    if p.is_null() {
        alloc::alloc::handle_alloc_error(layout);
    }
    // `p` is a fresh allocation of the global allocator with the layout of `[Slot<T>; n]`,
    // as `Box` frees it; a slot is two atomics, for which all-zero bytes are a valid value (0
    // and null), so every slot is initialized.
    // SAFETY: so the box owns `n` initialized slots.
    unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(p, n)) }
}

/// `n` empty slots (id 0, a tombstone). (Loom's atomics are not plain words.)
#[cfg(latchtree_loom)]
fn empty_slots<T>(n: usize) -> Box<[Slot<T>]> {
    (0..n)
        .map(|_| Slot {
            id: AtomicU64::new(0),
            record: AtomicPtr::new(ptr::null_mut()),
        })
        .collect()
}

/// What a transaction changed in table 0, to be copied to table 1 on
/// commit (or back from it on rollback), as runs of slots kept apart
/// because they are often far apart (a hull of them would copy the slots
/// between: most of the table when a write removes an old module and adds
/// a new one, or removes the oldest and the newest): the slots it set or
/// tombstoned, in up to two runs, those it appended, and those a compaction
/// step moved live slots into.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Dirty {
    slots: Option<(usize, usize)>,
    /// Set or tombstoned slots apart from `slots` (a batch's second place;
    /// a third joins the nearer run).
    far: Option<(usize, usize)>,
    appended: Option<(usize, usize)>,
    moved: Option<(usize, usize)>,
}

impl Dirty {
    pub(crate) const fn new() -> Self {
        Dirty {
            slots: None,
            far: None,
            appended: None,
            moved: None,
        }
    }

    /// Every slot.
    pub(crate) const fn all() -> Self {
        Dirty {
            slots: Some((0, usize::MAX)),
            ..Dirty::new()
        }
    }

    /// The slots appended.
    pub(crate) fn pushed(&self) -> usize {
        self.appended.map_or(0, |(lo, hi)| hi - lo)
    }

    /// The one slot changed, if only one was (no compaction step either).
    fn single(&self) -> Option<usize> {
        match (self.slots, self.far, self.appended, self.moved) {
            (Some((lo, hi)), None, None, None) | (None, None, Some((lo, hi)), None)
                if hi == lo + 1 =>
            {
                Some(lo)
            }
            _ => None,
        }
    }

    /// Every run to copy (they may overlap: a copy is idempotent).
    fn runs(&self) -> impl Iterator<Item = (usize, usize)> {
        [self.slots, self.far, self.appended, self.moved]
            .into_iter()
            .flatten()
    }

    /// Slots `lo..hi` were set or tombstoned.
    #[inline]
    fn add(&mut self, lo: usize, hi: usize) {
        match self.slots {
            None => self.slots = Some((lo, hi)),
            Some(run) if gap(run, lo, hi) == 0 => self.slots = Some(hull(Some(run), lo, hi)),
            Some(run) => self.add_far(run, lo, hi),
        }
    }

    /// [`add`](Dirty::add) of slots apart from the first run: into the
    /// second, or (a third place) the nearer one.
    #[cold]
    fn add_far(&mut self, run: (usize, usize), lo: usize, hi: usize) {
        match self.far {
            Some(far) if gap(far, lo, hi) <= gap(run, lo, hi) => {
                self.far = Some(hull(Some(far), lo, hi));
            }
            Some(_) => self.slots = Some(hull(Some(run), lo, hi)),
            None => self.far = Some((lo, hi)),
        }
    }

    fn add_appended(&mut self, lo: usize, hi: usize) {
        self.appended = Some(hull(self.appended, lo, hi));
    }

    fn add_moved(&mut self, lo: usize, hi: usize) {
        self.moved = Some(hull(self.moved, lo, hi));
    }
}

/// The slots between `run` and `lo..hi`: 0 if they touch or overlap.
fn gap((a, b): (usize, usize), lo: usize, hi: usize) -> usize {
    lo.saturating_sub(b).max(a.saturating_sub(hi))
}

/// The smallest run of slots holding `run` and `lo..hi`.
fn hull(run: Option<(usize, usize)>, lo: usize, hi: usize) -> (usize, usize) {
    match run {
        None => (lo, hi),
        Some((a, b)) => (a.min(lo), b.max(hi)),
    }
}

/// Compact once `len` exceeds this and tombstones outnumber live slots.
pub(crate) const COMPACT_MIN: usize = 16;

/// The hole's ends while no compaction runs: the used slots are then
/// `0..len` (see [`Table::regions`]).
const NO_HOLE: usize = usize::MAX;

/// Slots a compaction step moves for a unit of a write's layout slice
/// (`LayoutPolicy::slice`): a slot is two words read and written in order,
/// about a twentieth of a unit's cold node; 8 keeps a step of the default
/// slice (4,096 slots) near 20 µs, both tables included.
pub(crate) const SLOTS_PER_UNIT: usize = 8;

/// The capacity a table gets for `need` slots.
pub(crate) fn capacity(need: usize) -> usize {
    need.max(FIRST).next_power_of_two()
}

/// The segments that hold `cap` slots (`cap` a [`capacity`]).
fn segments_for(cap: usize) -> usize {
    split(cap - 1).0 + 1
}

/// The `(id, record)` of a slot.
fn load<T>(s: &Slot<T>) -> (u64, *mut Record<T>) {
    // Relaxed: validated by the latch (readers) or under the lock.
    (
        s.id.load(Ordering::Relaxed),
        s.record.load(Ordering::Relaxed),
    )
}

impl<T> Table<T> {
    crate::sync::const_fn_unless_loom! {
        pub(crate) fn new() -> Self {
            Table {
                segments: no_segments(),
                count: AtomicUsize::new(0),
                len: AtomicUsize::new(0),
                live: AtomicUsize::new(0),
                hole: [AtomicUsize::new(NO_HOLE), AtomicUsize::new(NO_HOLE)],
                replaced: AtomicPtr::new(ptr::null_mut()),
            }
        }
    }

    /// Segment `s`'s slots, or none. Pinned readers, handler sections and
    /// the writer.
    #[inline]
    fn segment(&self, s: usize) -> &[Slot<T>] {
        // Acquire: pairs with the Release store in `add_segment`, so the
        // segment a reader loads is initialized (even a stale reader's,
        // which then fails validation but must not read uninitialized
        // memory).
        let a = self.segments[s].load(Ordering::Acquire);
        // The writer (under the lock) only reads published segments; an
        // unpublished one goes to the limbo (`take_replaced`), which frees
        // it after its grace period, so it outlives every guard pinned while
        // it could still be loaded here; the index's drop (`free`) needs
        // `&mut`; no `&mut` or `Box` to a published segment is made again.
        // SAFETY: so the word is null or points to a segment that stays
        // allocated, and may be shared, while the caller may use it.
        unsafe { a.as_ref() }.map_or(&[], |a| &a.slots)
    }

    /// The used slots of segment `s`, given `len` used slots in all (a
    /// torn `len` or segment only shortens the answer).
    #[inline]
    fn used(&self, s: usize, len: usize) -> &[Slot<T>] {
        let slots = self.segment(s);
        &slots[..len.saturating_sub(start(s)).min(slots.len())]
    }

    /// The segments holding some of `len` used slots.
    #[inline]
    fn segments_used(len: usize) -> usize {
        if len == 0 {
            0
        } else {
            (split(len - 1).0 + 1).min(SEGMENTS)
        }
    }

    /// Slot `i`, if its segment is there.
    #[inline]
    fn slot(&self, i: usize) -> Option<&Slot<T>> {
        let (s, at) = split(i);
        if s >= SEGMENTS {
            return None;
        }
        self.segment(s).get(at)
    }

    /// The used slots, `0..len` but a compaction's hole, as two runs of
    /// slot indices: `[0, hole[0])` and `[hole[1], len)` (the second empty
    /// while no compaction runs). Clamped to `len`, so that torn words only
    /// shorten them.
    #[inline]
    fn regions(&self, len: usize) -> [(usize, usize); 2] {
        // Relaxed: validated by the latch (readers) or under the lock.
        let [a, b] = [0, 1].map(|i| self.hole[i].load(Ordering::Relaxed).min(len));
        [(0, a), (b, len)]
    }

    /// Calls `visit` with each segment's share of slots `lo..hi`, in order,
    /// and the index of its first slot.
    #[inline]
    fn runs(&self, lo: usize, hi: usize, mut visit: impl FnMut(usize, &[Slot<T>])) {
        if lo >= hi {
            return;
        }
        for s in split(lo).0..Self::segments_used(hi) {
            let (at, slots) = self.share(s, lo, hi);
            visit(at, slots);
        }
    }

    /// Segment `s`'s share of the used slots `lo..hi`, and the index of
    /// its first slot.
    #[inline]
    fn share(&self, s: usize, lo: usize, hi: usize) -> (usize, &[Slot<T>]) {
        let slots = self.used(s, hi);
        let skip = lo.saturating_sub(start(s)).min(slots.len());
        (start(s) + skip, &slots[skip..])
    }

    /// The slot holding `id` and its index, searched over the used slots.
    /// Never out of bounds, whatever a torn read gives.
    #[inline]
    fn position(&self, id: u64) -> Option<(usize, &Slot<T>)> {
        // Relaxed: validated by the latch (readers) or under the lock.
        let len = self.len.load(Ordering::Relaxed);
        let [low, high] = self.regions(len);
        // The newer ids are above the hole, if there is one.
        match self.search(high, id) {
            Ok(found) => found,
            Err(Below) => self.search(low, id).unwrap_or(None),
        }
    }

    /// The slot holding `id` among slots `lo..hi`, whose ids rise; `Err`
    /// if `id` lies below them all (or there are none).
    #[inline]
    fn search(
        &self,
        (lo, hi): (usize, usize),
        id: u64,
    ) -> Result<Option<(usize, &Slot<T>)>, Below> {
        if lo >= hi {
            return Err(Below);
        }
        // The top segment holds half the slots: look there first.
        for s in (split(lo).0..Self::segments_used(hi)).rev() {
            let (base, slots) = self.share(s, lo, hi);
            let Some(first) = slots.first() else {
                continue;
            };
            let first = first.id.load(Ordering::Relaxed);
            if first <= id {
                // Ids rise by at least one a slot, so `id` lies at most
                // `id - first` slots in: exactly there while none between
                // was removed (a module removed soon after it was added, or
                // the oldest ones first), else the search starts narrower.
                let at = usize::try_from(id - first).map_or(slots.len(), |d| d.min(slots.len()));
                let slots = &slots[..at.saturating_add(1).min(slots.len())];
                if let Some(last) = slots.last()
                    && last.id.load(Ordering::Relaxed) == id
                {
                    return Ok(Some((base + slots.len() - 1, last)));
                }
                return Ok(
                    (slots.binary_search_by_key(&id, |s| s.id.load(Ordering::Relaxed)))
                        .ok()
                        .map(|at| (base + at, &slots[at])),
                );
            }
        }
        Err(Below)
    }

    /// The record of `id`: null if unknown or removed. For readers, the
    /// answer is meaningful only once the latch validated it.
    #[inline]
    pub(crate) fn find(&self, id: u64) -> *mut Record<T> {
        match self.position(id) {
            // Relaxed: validated by the latch, like every word read here.
            Some((_, s)) => s.record.load(Ordering::Relaxed),
            None => ptr::null_mut(),
        }
    }

    /// The module count.
    #[inline]
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// The used slots in order.
    fn each(&self, mut visit: impl FnMut(&Slot<T>)) {
        let len = self.len.load(Ordering::Relaxed);
        for (lo, hi) in self.regions(len) {
            self.runs(lo, hi, |_, slots| slots.iter().for_each(&mut visit));
        }
    }

    /// Every live record in id order (for a reader: validate afterwards).
    pub(crate) fn records(&self, mut visit: impl FnMut(*mut Record<T>)) {
        self.each(|s| {
            let r = s.record.load(Ordering::Relaxed);
            if !r.is_null() {
                visit(r);
            }
        });
    }

    // ----- Writer-only (under the writer lock, while readers are steered
    // away from this table's copy: every store below is then either never
    // seen by a validating reader or caught by its re-check, `raw::latch`).

    /// The segments published.
    fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Publishes segment `count()`, empty.
    fn add_segment(&self) {
        let s = self.count();
        assert!(s < SEGMENTS, "module table full");
        let new = Box::into_raw(Box::new(Array {
            slots: empty_slots(start(s + 1) - start(s)),
            replaced_next: AtomicPtr::new(ptr::null_mut()),
        }));
        // Release: pairs with the Acquire load in `segment`.
        self.segments[s].store(new, Ordering::Release);
        self.count.store(s + 1, Ordering::Relaxed);
    }

    /// Unpublishes the segments from `keep` up and queues them for
    /// retirement.
    fn drop_segments(&self, keep: usize) {
        for s in (keep..self.count()).rev() {
            let old = self.segments[s].swap(ptr::null_mut(), Ordering::Relaxed);
            if let Some(old) = NonNull::new(old) {
                self.queue_replaced(old);
            }
        }
        self.count.store(keep.min(self.count()), Ordering::Relaxed);
    }

    /// Pushes `old`, no longer published, on the replaced list.
    fn queue_replaced(&self, old: NonNull<Array<T>>) {
        // Push-only list (no ABA: nothing is popped singly).
        let mut head = self.replaced.load(Ordering::Relaxed);
        loop {
            // `old` came from `Box::into_raw` in `add_segment` and is no longer published; only
            // this list refers to it now, and its `replaced_next` is read only by whoever takes
            // the list.
            // SAFETY: so `old` is live and only this list refers to it.
            unsafe { old.as_ref() }
                .replaced_next
                .store(head, Ordering::Relaxed);
            // Release: pairs with the Acquire swap in `take_replaced`,
            // which then sees `replaced_next` and the unpublishing swap.
            match self.replaced.compare_exchange_weak(
                head,
                old.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    fn set_slot(&self, i: usize, id: u64, record: *mut Record<T>) {
        let s = self.slot(i).expect("a slot of a published segment");
        // Relaxed: see the section comment.
        s.id.store(id, Ordering::Relaxed);
        s.record.store(record, Ordering::Relaxed);
    }

    /// Appends `(id, record)`; `id` is above every id in the table.
    pub(crate) fn push(&self, id: u64, record: NonNull<Record<T>>, dirty: &mut Dirty) {
        let len = self.len.load(Ordering::Relaxed);
        if len == start(self.count()) {
            self.add_segment();
        }
        self.set_slot(len, id, record.as_ptr());
        self.len.store(len + 1, Ordering::Relaxed);
        self.live.store(self.live() + 1, Ordering::Relaxed);
        dirty.add_appended(len, len + 1);
    }

    /// Points the live slot of `id` at `record`.
    pub(crate) fn set(&self, id: u64, record: NonNull<Record<T>>, dirty: &mut Dirty) {
        let (i, slot) = self.position(id).expect("set of a registered id");
        // Relaxed: see the section comment. The id stays.
        slot.record.store(record.as_ptr(), Ordering::Relaxed);
        dirty.add(i, i + 1);
    }

    /// The slot and record of live module `id`, if any (writer-only: for
    /// [`remove_at`](Table::remove_at) without a second search).
    #[inline]
    pub(crate) fn locate(&self, id: u64) -> Option<(usize, NonNull<Record<T>>)> {
        let (i, slot) = self.position(id)?;
        NonNull::new(load(slot).1).map(|r| (i, r))
    }

    /// Tombstones live slot `i` (from [`locate`](Table::locate), nothing
    /// changed since), and starts a compaction if tombstones dominate (the
    /// writes' [`compact_step`](Table::compact_step)s do it).
    #[inline]
    pub(crate) fn remove_at(&self, i: usize, dirty: &mut Dirty) {
        // Relaxed: see the section comment. The id stays: a tombstone.
        (self.slot(i).expect("a located slot").record).store(ptr::null_mut(), Ordering::Relaxed);
        self.live.store(self.live() - 1, Ordering::Relaxed);
        dirty.add(i, i + 1);
        self.start_compaction_if_due();
    }

    /// The slots in use, hole included, and the hole (for the invariant
    /// checker).
    pub(crate) fn extent(&self) -> (usize, [usize; 2]) {
        // Relaxed: under the lock.
        let hole = [0, 1].map(|i| self.hole[i].load(Ordering::Relaxed));
        (self.len.load(Ordering::Relaxed), hole)
    }

    /// Whether a compaction runs.
    pub(crate) fn compacting(&self) -> bool {
        // Relaxed: see the section comment.
        self.hole[0].load(Ordering::Relaxed) != NO_HOLE
    }

    /// Starts a compaction if none runs, the table is past its minimum and
    /// tombstones outnumber the live slots.
    fn start_compaction_if_due(&self) {
        let len = self.len.load(Ordering::Relaxed);
        if !self.compacting() && len > COMPACT_MIN && self.live() * 2 < len {
            self.set_hole(0, 0);
        }
    }

    fn set_hole(&self, a: usize, b: usize) {
        // Relaxed: see the section comment.
        self.hole[0].store(a, Ordering::Relaxed);
        self.hole[1].store(b, Ordering::Relaxed);
    }

    /// Goes on with the running compaction, if any, over the next `max`
    /// slots after the hole: each live one moves down to the hole's start,
    /// so that the hole moves up and grows by the tombstones passed. At the
    /// top the table ends where the moved slots do, drops its top segments
    /// if the slots left (live, and tombstones of removals made below the
    /// hole meanwhile) fill less than a quarter, and starts over if
    /// tombstones dominate again. Returns whether a compaction still runs.
    pub(crate) fn compact_step(&self, max: usize, dirty: &mut Dirty) -> bool {
        if !self.compacting() {
            return false;
        }
        let len = self.len.load(Ordering::Relaxed);
        // Relaxed: see the section comment.
        let (mut to, from) = (
            self.hole[0].load(Ordering::Relaxed),
            self.hole[1].load(Ordering::Relaxed),
        );
        let end = from.saturating_add(max).min(len);
        // The first slot a live one moved into, if any did.
        let mut moved = None;
        // Front to back: a slot moves down only, over one already moved
        // or a tombstone. A segment at a time, on both sides (addressing
        // each slot on its own was a third of a compaction).
        let mut dest: &[Slot<T>] = &[];
        self.runs(from, end, |at, slots| {
            for (i, slot) in (at..).zip(slots) {
                let (id, r) = load(slot);
                if r.is_null() {
                    continue;
                }
                if dest.is_empty() {
                    let (s, k) = split(to);
                    dest = self.segment(s).get(k..).unwrap_or(&[]);
                }
                let (t, rest) = dest.split_first().expect("a slot for each live one");
                if i != to {
                    // Relaxed: see the section comment.
                    t.id.store(id, Ordering::Relaxed);
                    t.record.store(r, Ordering::Relaxed);
                    moved.get_or_insert(to);
                }
                dest = rest;
                to += 1;
            }
        });
        if let Some(lo) = moved {
            dirty.add_moved(lo, to);
        }
        if end < len {
            self.set_hole(to, end);
            return true;
        }
        self.len.store(to, Ordering::Relaxed);
        self.set_hole(NO_HOLE, NO_HOLE);
        if start(self.count()) >= 4 * capacity(to) {
            self.drop_segments(segments_for(2 * capacity(to)));
        }
        self.start_compaction_if_due();
        self.compacting()
    }

    /// Makes this table equal to `src` on the slots in `dirty` (and in
    /// length, count, hole and segments), given that they were equal on the
    /// other used slots.
    #[inline]
    pub(crate) fn sync_from(&self, src: &Table<T>, dirty: Dirty) {
        let len = src.len.load(Ordering::Relaxed);
        // The common write, one module added or removed: one slot, no
        // segment added or dropped, no slot moved by a compaction step (one
        // that only passed tombstones changed the counts and hole alone).
        if let Some(lo) = dirty.single()
            && lo < len
            && self.count() == src.count()
            && let (Some(f), Some(t)) = (src.slot(lo), self.slot(lo))
        {
            let (id, r) = load(f);
            // Relaxed: see the section comment.
            t.id.store(id, Ordering::Relaxed);
            t.record.store(r, Ordering::Relaxed);
            self.sync_counts(src, len);
            return;
        }
        self.sync_runs(src, dirty, len);
    }

    /// `src`'s length, module count and hole.
    #[inline]
    fn sync_counts(&self, src: &Table<T>, len: usize) {
        // Relaxed: see the section comment.
        self.len.store(len, Ordering::Relaxed);
        self.live.store(src.live(), Ordering::Relaxed);
        for (h, s) in self.hole.iter().zip(&src.hole) {
            h.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// [`sync_from`](Table::sync_from)'s general case: segments added or
    /// dropped, runs of slots.
    fn sync_runs(&self, src: &Table<T>, dirty: Dirty, len: usize) {
        // Slots of segments added here are all in `dirty` (written by this
        // transaction) or unused.
        while self.count() < src.count() {
            self.add_segment();
        }
        self.drop_segments(src.count());
        // The slots the write changed and those its compaction step moved
        // into, all as table 0 holds them now: a changed slot the step then
        // left in the hole is copied too, harmlessly (both tables skip it).
        for (lo, hi) in dirty.runs() {
            // A run of slots a segment, each segment addressed once: a
            // write's dirty slots are usually one or two, in one segment.
            let (mut i, hi) = (lo, hi.min(len));
            while i < hi {
                let (s, at) = split(i);
                if s >= SEGMENTS {
                    break;
                }
                let (from, to) = (src.segment(s), self.segment(s));
                let (from, to) = (from.get(at..).unwrap_or(&[]), to.get(at..).unwrap_or(&[]));
                let n = (hi - i).min(from.len()).min(to.len());
                if n == 0 {
                    break;
                }
                for (f, t) in from[..n].iter().zip(&to[..n]) {
                    let (id, r) = load(f);
                    // Relaxed: see the section comment.
                    t.id.store(id, Ordering::Relaxed);
                    t.record.store(r, Ordering::Relaxed);
                }
                i += n;
            }
        }
        self.sync_counts(src, len);
    }

    /// Whether segments wait in the replaced list. A hint, for skipping
    /// [`take_replaced`](Table::take_replaced) cheaply.
    #[inline]
    pub(crate) fn has_replaced(&self) -> bool {
        // Relaxed: a hint; `take_replaced` synchronizes.
        !self.replaced.load(Ordering::Relaxed).is_null()
    }

    /// Hands every segment in the replaced list to `retire` (under the
    /// writer lock, for the limbo: readers may still be reading them).
    #[inline]
    pub(crate) fn take_replaced(&self, retire: impl FnMut(NonNull<Array<T>>)) {
        if self.has_replaced() {
            self.take_replaced_list(retire);
        }
    }

    /// [`take_replaced`](Table::take_replaced) once the list holds any.
    #[cold]
    fn take_replaced_list(&self, mut retire: impl FnMut(NonNull<Array<T>>)) {
        // Acquire: pairs with the Release CAS in `queue_replaced` (both are
        // under the writer lock today; the list stays safe to take anywhere).
        let mut next = self.replaced.swap(ptr::null_mut(), Ordering::Acquire);
        while let Some(a) = NonNull::new(next) {
            // SAFETY: taking the list made this thread its only owner; the
            // segment is still allocated (handed on below, once).
            next = unsafe { a.as_ref() }.replaced_next.load(Ordering::Relaxed);
            retire(a);
        }
    }

    /// `(id, record)` of every used slot, for the invariant checker.
    pub(crate) fn dump(&self) -> Vec<(u64, *mut Record<T>)> {
        let mut out = Vec::new();
        self.each(|s| out.push(load(s)));
        out
    }

    /// The slots the segments hold, for the invariant checker.
    pub(crate) fn capacity(&self) -> usize {
        start(self.count())
    }

    /// Drops the tombstones and keeps the segments a table of the live
    /// slots needs (none if empty), freeing the others at once (not the
    /// records): `&mut self`, no reader is left.
    pub(crate) fn shrink_to_fit(&mut self) {
        let live: Vec<_> = self.dump().into_iter().filter(|s| !s.1.is_null()).collect();
        self.free();
        let mut dirty = Dirty::new();
        for (id, r) in live {
            if let Some(r) = NonNull::new(r) {
                self.push(id, r, &mut dirty);
            }
        }
    }

    /// Frees the segments (not the records).
    pub(crate) fn free(&mut self) {
        let mut next = self.replaced.swap(ptr::null_mut(), Ordering::Relaxed);
        let mut segments: Vec<_> = (self.segments.iter())
            .map(|s| s.swap(ptr::null_mut(), Ordering::Relaxed))
            .collect();
        self.count.store(0, Ordering::Relaxed);
        self.len.store(0, Ordering::Relaxed);
        self.live.store(0, Ordering::Relaxed);
        self.set_hole(NO_HOLE, NO_HOLE);
        while let Some(a) = NonNull::new(next) {
            segments.push(a.as_ptr());
            // SAFETY: `&mut self`: the list is this table's alone.
            next = unsafe { a.as_ref() }.replaced_next.load(Ordering::Relaxed);
        }
        for a in segments.into_iter().filter_map(NonNull::new) {
            // SAFETY: each came from `Box::into_raw` in `add_segment` and
            // is in the table once; `&mut self`: no reader is left.
            drop(unsafe { Box::from_raw(a.as_ptr()) });
        }
    }
}

#[cfg(all(test, not(latchtree_loom)))]
mod tests {
    use super::*;

    /// Changes in two places are copied apart, each as wide as the slots
    /// changed there; a third place joins the nearer run, and every changed
    /// slot is copied.
    #[test]
    fn a_write_copies_far_apart_changes_apart() {
        let runs = |d: &Dirty| d.runs().collect::<Vec<_>>();
        let mut d = Dirty::new();
        // A batch that removes the oldest and the newest module, and
        // appends two.
        for i in [7, 200_000, 8, 199_999, 6] {
            d.add(i, i + 1);
        }
        d.add_appended(200_001, 200_002);
        d.add_appended(200_002, 200_003);
        assert_eq!(runs(&d), [(6, 9), (199_999, 200_001), (200_001, 200_003)]);
        assert_eq!(d.single(), None);
        // Two places, one slot each: not a single slot.
        let mut two = Dirty::new();
        two.add(5, 6);
        two.add(500, 501);
        assert_eq!(two.single(), None);
        // A third place joins the nearer run, whichever it is.
        two.add(490, 491);
        assert_eq!(runs(&two), [(5, 6), (490, 501)]);
        two.add(20, 21);
        assert_eq!(runs(&two), [(5, 21), (490, 501)]);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200 {
            let mut d = Dirty::new();
            let mut changed = Vec::new();
            for _ in 0..1 + x % 12 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x % 1_000_000) as usize;
                d.add(i, i + 1);
                changed.push(i);
            }
            for i in changed {
                assert!(
                    d.runs().any(|(lo, hi)| lo <= i && i < hi),
                    "slot {i} not copied"
                );
            }
        }
        let mut one = Dirty::new();
        one.add(5, 6);
        one.add(5, 6);
        assert_eq!(one.single(), Some(5));
    }

    /// Segments tile the slots: each starts where the one before ends, and
    /// `split` finds every slot's segment and place.
    #[test]
    fn segments_tile_the_slots() {
        for s in 0..SEGMENTS - 1 {
            let (lo, hi) = (start(s), start(s + 1));
            assert_eq!(split(lo), (s, 0), "segment {s} starts at {lo}");
            assert_eq!(
                split(hi - 1),
                (s, hi - 1 - lo),
                "segment {s} ends before {hi}"
            );
            if s > 0 {
                assert_eq!(hi - lo, FIRST << (s - 1));
            }
        }
        for cap in [8, 16, 32, 1 << 20] {
            assert_eq!(start(segments_for(cap)), cap);
        }
    }

    /// Growing never moves a slot (no write copies the table), and a
    /// synced table gets the same segments; compaction after mass removal
    /// drops the top ones in both.
    #[test]
    fn growth_never_moves_a_slot() {
        let n = if cfg!(miri) { 40 } else { 5000 };
        let (t0, t1) = (Table::<u64>::new(), Table::<u64>::new());
        let rec = NonNull::<Record<u64>>::dangling();
        let mut at = Vec::new();
        for id in 0..n as u64 {
            let mut dirty = Dirty::new();
            t0.push(id, rec, &mut dirty);
            t1.sync_from(&t0, dirty);
            at.push(ptr::from_ref(t0.slot(id as usize).unwrap()).addr());
            if id % 97 == 0 {
                for (i, &a) in at.iter().enumerate() {
                    assert_eq!(
                        ptr::from_ref(t0.slot(i).unwrap()).addr(),
                        a,
                        "slot {i} moved"
                    );
                }
            }
            assert_eq!(t0.capacity(), capacity(id as usize + 1));
            assert_eq!(t1.capacity(), t0.capacity());
        }
        assert_eq!(t1.dump(), t0.dump());
        assert_eq!(t0.find(n as u64 / 3), rec.as_ptr());
        assert!(t0.find(n as u64).is_null());
        for id in 0..n as u64 - 5 {
            let mut dirty = Dirty::new();
            let (i, _) = t0.locate(id).unwrap();
            t0.remove_at(i, &mut dirty);
            t0.compact_step(64, &mut dirty);
            t1.sync_from(&t0, dirty);
        }
        // The steps of a few more writes finish the compaction.
        while t0.compacting() {
            let mut dirty = Dirty::new();
            t0.compact_step(64, &mut dirty);
            t1.sync_from(&t0, dirty);
        }
        assert_eq!(t0.live(), 5);
        assert_eq!(t1.dump(), t0.dump());
        assert!(t0.capacity() <= 4 * capacity(t0.dump().len()));
        assert_eq!(t1.capacity(), t0.capacity());
        let mut replaced = 0;
        for t in [&t0, &t1] {
            t.take_replaced(|a| {
                replaced += 1;
                // SAFETY: from `add_segment`, unpublished, handed out once;
                // no reader.
                drop(unsafe { Box::from_raw(a.as_ptr()) });
            });
        }
        assert!(replaced > 0, "mass removal dropped no segment");
        for mut t in [t0, t1] {
            t.free();
        }
    }

    /// A model of the index's writes on two tables: each write changes
    /// table 0 (appends, removals, record changes), does a compaction step
    /// of at most `max` slots, then commits (table 1 catches up) or rolls
    /// back (table 0 goes back to table 1). After every write both tables
    /// answer every id as the model does, hold the same used slots with
    /// ids rising, and the step moved at most `max` slots; compactions span
    /// several writes and, once done, leave at most twice the live slots.
    #[test]
    fn compaction_a_step_a_write_keeps_every_answer() {
        // Under Miri, fewer writes and narrower steps (so that compactions
        // still span writes).
        let (writes, widest) = if cfg!(miri) { (100, 3) } else { (6_000, 40) };
        let recs: Vec<NonNull<Record<u64>>> = (1..=4usize)
            .map(|k| NonNull::new(ptr::without_provenance_mut(k * 64)).unwrap())
            .collect();
        let (t0, t1) = (Table::<u64>::new(), Table::<u64>::new());
        // id -> record index, or none once removed.
        let mut model: Vec<Option<usize>> = Vec::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rand = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let (mut running, mut spans, mut longest) = (0, 0, 0);
        for w in 0..writes {
            let max = 1 + rand(widest) as usize;
            let mut dirty = Dirty::new();
            let mut next = model.clone();
            // Grow for a while, then mostly remove, then grow again.
            let phase = (w / (writes / 4)) % 2;
            // Now and then more places than `Dirty` keeps apart.
            let changes = 1 + rand(if w % 7 == 0 { 6 } else { 3 });
            for _ in 0..changes {
                let live: Vec<u64> = (0..next.len() as u64)
                    .filter(|&i| next[i as usize].is_some())
                    .collect();
                match rand(10) {
                    r if r < if phase == 0 { 6 } else { 2 } || live.is_empty() => {
                        let k = rand(4) as usize;
                        t0.push(next.len() as u64, recs[k], &mut dirty);
                        next.push(Some(k));
                    }
                    8 => {
                        let id = live[rand(live.len() as u64) as usize];
                        let k = rand(4) as usize;
                        t0.set(id, recs[k], &mut dirty);
                        next[id as usize] = Some(k);
                    }
                    _ => {
                        let id = live[rand(live.len() as u64) as usize];
                        let (i, r) = t0.locate(id).unwrap();
                        assert_eq!(Some(r), next[id as usize].map(|k| recs[k]));
                        t0.remove_at(i, &mut dirty);
                        next[id as usize] = None;
                    }
                }
            }
            let before = t0.compacting();
            t0.compact_step(max, &mut dirty);
            if let Some((lo, hi)) = dirty.moved {
                assert!(hi - lo <= max, "a step of {max} slots moved {}", hi - lo);
            }
            if rand(50) == 0 {
                t0.sync_from(&t1, Dirty::all());
            } else {
                t1.sync_from(&t0, dirty);
                model = next;
            }
            running = if before && t0.compacting() {
                running + 1
            } else {
                0
            };
            if running == 1 {
                spans += 1;
            }
            longest = longest.max(running);
            // Every id after every write in release builds; every fourth
            // write in debug builds and under Miri (the same writes: in a
            // debug build the checks took 23 s of this test, in CI's test
            // and no_std layers both; the test layer also runs it in
            // release, and the table has no code that differs without std).
            let every = if cfg!(any(miri, debug_assertions)) {
                4
            } else {
                1
            };
            for t in [&t0, &t1].into_iter().filter(|_| w % every == 0) {
                for (id, want) in model.iter().enumerate() {
                    let want = want.map_or(ptr::null_mut(), |k| recs[k].as_ptr());
                    assert_eq!(t.find(id as u64), want, "write {w}: id {id}");
                }
                assert!(t.find(model.len() as u64).is_null());
                assert_eq!(t.live(), model.iter().flatten().count());
            }
            let used = t0.dump();
            assert_eq!(used, t1.dump(), "write {w}: the tables differ");
            assert!(
                used.windows(2).all(|p| p[0].0 < p[1].0),
                "write {w}: ids do not rise"
            );
            let live = model.iter().flatten().count();
            if !t0.compacting() {
                assert!(
                    used.len() - live <= live.max(COMPACT_MIN),
                    "write {w}: not compacted"
                );
                assert!(t0.capacity() <= 4 * capacity(used.len()));
            }
        }
        assert!(
            spans > 2 && longest > 3,
            "compactions did not span writes ({spans}, {longest})"
        );
        for mut t in [t0, t1] {
            t.take_replaced(|a| {
                // SAFETY: from `add_segment`, unpublished, handed out once;
                // no reader.
                drop(unsafe { Box::from_raw(a.as_ptr()) });
            });
            t.free();
        }
    }

    /// Through the index: a compaction of the module table runs a slice a
    /// write over many writes while a pinned reader reads modules that stay,
    /// every write leaves the invariants true, and `synchronize` finishes it.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "its reader thread takes Miri tens of minutes; under Miri \
                  `addr_index_model`'s `module_table_compacts_and_keeps_answering` \
                  compacts through the index over several writes"
    )]
    fn index_compacts_its_table_a_slice_a_write() {
        use crate::{AddrIndex, LayoutPolicy};
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let n: u64 = 3000;
        // A slice of 3 units: 24 table slots a write.
        let index = Arc::new(AddrIndex::with_policy(LayoutPolicy::small(usize::MAX)));
        let ids: Vec<_> = (0..n)
            .map(|i| index.insert(i * 16..i * 16 + 8, i).unwrap())
            .collect();
        let kept: Vec<_> = ids
            .iter()
            .copied()
            .enumerate()
            .filter(|(i, _)| i % 25 == 7)
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (index, stop, kept) = (Arc::clone(&index), Arc::clone(&stop), kept.clone());
            std::thread::spawn(move || {
                let mut reads = 0_u64;
                while !stop.load(Ordering::Relaxed) || reads == 0 {
                    let g = index.pin();
                    for &(i, id) in &kept {
                        assert_eq!(index.get(id, &g), Some(&(i as u64)));
                    }
                    reads += 1;
                }
            })
        };
        let (mut compacting_writes, mut x) = (0, 88_172_645_463_325_252_u64);
        let mut gone: Vec<_> = ids
            .iter()
            .copied()
            .enumerate()
            .filter(|(i, _)| i % 25 != 7)
            .collect();
        while !gone.is_empty() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (i, id) = gone.swap_remove((x % gone.len() as u64) as usize);
            assert_eq!(*index.remove(id).unwrap(), i as u64);
            if index.tables[0].compacting() {
                compacting_writes += 1;
            }
            if cfg!(miri) || gone.len() % 97 == 0 {
                index.check_invariants().unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        assert!(
            compacting_writes > 20,
            "{compacting_writes} writes ended compacting"
        );
        index.synchronize();
        assert!(
            !index.tables[0].compacting(),
            "synchronize left a compaction running"
        );
        index.check_invariants().unwrap();
        assert!(index.tables[0].capacity() <= 4 * capacity(kept.len()));
        for &(i, id) in &kept {
            assert_eq!(index.lookup(i as u64 * 16 + 3).map(|h| h.id()), Some(id));
        }
    }

    /// A compaction ends whatever the policy (a slice of 0 units still
    /// reads 8 slots a write) and outpaces batches that append (two slots
    /// read for each appended); a write that does not flip leaves it be;
    /// `synchronize` ends one.
    #[test]
    fn compaction_ends_and_outpaces_growth() {
        use crate::{AddrIndex, LayoutPolicy};
        let index = AddrIndex::with_policy(LayoutPolicy {
            slice: 0,
            ..LayoutPolicy::small(usize::MAX)
        });
        let n: u64 = if cfg!(miri) { 60 } else { 400 };
        let mut ids: alloc::collections::VecDeque<_> = (0..n)
            .map(|i| (i, index.insert(i * 16..i * 16 + 8, i).unwrap()))
            .collect();
        // Three quarters removed in one batch: a compaction starts.
        index.write(|b| {
            for _ in 0..n * 3 / 4 {
                b.remove(ids.pop_front().unwrap().1).unwrap();
            }
        });
        assert!(index.tables[0].compacting());
        // Writes that change nothing do not flip, and leave it be.
        let (k, _) = ids[0];
        index.write(|_| ());
        assert!(index.insert(k * 16..k * 16 + 1, 0).is_err());
        index.check_invariants().unwrap();
        // Batches that each add ten modules and remove the ten oldest.
        let (mut next, mut ended) = (n, 0);
        for _ in 0..if cfg!(miri) { 12 } else { 200 } {
            index.write(|b| {
                for _ in 0..10 {
                    ids.push_back((next, b.insert(next * 16..next * 16 + 8, next).unwrap()));
                    next += 1;
                }
                for _ in 0..10 {
                    b.remove(ids.pop_front().unwrap().1).unwrap();
                }
            });
            index.check_invariants().unwrap();
            ended += usize::from(!index.tables[0].compacting());
        }
        assert!(ended > 0, "the compaction never ended under growth");
        index.write(|b| {
            for _ in 0..ids.len() / 2 {
                b.remove(ids.pop_front().unwrap().1).unwrap();
            }
        });
        assert!(index.tables[0].compacting());
        index.synchronize();
        assert!(
            !index.tables[0].compacting(),
            "synchronize left a compaction running"
        );
        index.check_invariants().unwrap();
        let guard = index.pin();
        for &(k, id) in &ids {
            assert_eq!(index.get(id, &guard), Some(&k));
        }
    }
}
