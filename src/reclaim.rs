//! The reclamation seam: how nodes that left both copies are freed.
//!
//! # Writer-side reclamation ([`Limbo`])
//!
//! Each front-end keeps what its transactions retire in a [`Limbo`], under its
//! writer lock, tagged with the transaction's *period* (a counter that grows
//! by one per transaction). Nothing user-visible is handed to
//! crossbeam-epoch: at most one tiny *announcement* per tree is outstanding
//! at a time, a closure that stores "every period up to `p` is past its
//! grace period" into an atomic shared with the tree (an `Arc`, since the
//! closure may run after the tree is gone). The tree's own later writes
//! (and its `flush`, and its `Drop`) take what was announced and free or
//! recycle it, after the writer lock is released. So a reader's pin that
//! collects runs at most one trivial closure per grace period of a busy
//! writer, never a destructor of the writer's garbage.
//!
//! Why one announcement covers every older period: it is deferred after the
//! writer lock of period `p` was released, so after every item of every
//! period `<= p` left both copies. crossbeam runs it only after every guard
//! pinned at the time of the `defer` is dropped; a guard pinned later cannot
//! reach those items, and one pinned earlier is among those waited for.
//! While an announcement is outstanding, newer periods wait for the next
//! one; a writer that finds its garbage still waiting every
//! [`HELP_EVERY`] transactions flushes its thread's epoch bag to
//! push the epoch along (a writer with no readers at all would otherwise
//! never see its announcement run).
//!
//! Under `cfg(latchtree_loom)` the epoch is invisible to the model checker
//! (crossbeam keys its own loom support on a different cfg), so nothing is
//! ever announced: the limbo is a graveyard emptied when the tree is
//! dropped, at the end of the model, and loom explores the latch and the
//! link stores, which is what it must see.
//!
//! # No user `Drop` under a writer lock
//!
//! The writer drops what the limbo hands it after releasing its lock, and
//! only when its thread is inside no other [`WriterScope`] (a write
//! nested in another tree's batch closure); otherwise each item is
//! *postponed* to a thread-local list that the outermost scope drains after
//! its writer lock is released. crossbeam runs deferred closures inside
//! *any* pin that collects (a thread's outermost pin, every 128th; any
//! `flush`); this crate defers nothing through the epoch but announcements
//! (both front-ends keep their garbage in a [`Limbo`]: `LatchTree` nodes,
//! `AddrIndex` records and module-table segments), and a nested write's
//! collecting (its limbo job) also runs when the outermost scope ends
//! ([`after_outermost_write`]).
//!
//! A panic from a user `Drop` during reclamation cannot be propagated to
//! anyone useful (it belongs to an entry removed by an earlier write); it is
//! caught and counted ([`swallowed_drop_panics`]).

use alloc::boxed::Box;
use core::cell::Cell;
use core::ptr::NonNull;
use crossbeam_epoch::{Collector, Guard};

/// Which collector a tree's guards must come from, and how it retires.
pub(crate) struct Reclaimer {
    /// `None`: crossbeam-epoch's default (global) collector.
    collector: Option<Collector>,
}

impl core::fmt::Debug for Reclaimer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reclaimer")
            .field("own_collector", &self.collector.is_some())
            .finish_non_exhaustive()
    }
}

/// A type-erased `Box<T>` waiting to be dropped.
struct Retired {
    ptr: NonNull<u8>,
    drop: unsafe fn(NonNull<u8>),
}

/// Drops the `Box<T>` behind `ptr`. A panic from `T`'s `Drop` is caught and
/// counted ([`swallowed_drop_panics`]): it runs at an arbitrary later point
/// on an arbitrary thread (inside another thread's `pin`), where unwinding
/// would be far worse.
///
/// # Safety
/// `ptr` came from `Box::<T>::into_raw` and is not used again.
unsafe fn drop_box<T>(ptr: NonNull<u8>) {
    let r = crate::unwind::catch_unwind(crate::unwind::AssertUnwindSafe(|| {
        // SAFETY: caller.
        drop(unsafe { Box::from_raw(ptr.cast::<T>().as_ptr()) });
    }));
    if r.is_err() {
        count_swallowed_drop_panic();
    }
}

/// Panics from `K`/`V` `Drop`s that could not be propagated, process-wide.
#[cfg(not(latchtree_loom))]
static SWALLOWED_DROP_PANICS: crate::sync::AtomicU64 = crate::sync::AtomicU64::new(0);

/// Counts one panic from a user `Drop` that was caught and not propagated.
pub(crate) fn count_swallowed_drop_panic() {
    // Relaxed: a statistic; nothing is ordered by it.
    #[cfg(not(latchtree_loom))]
    SWALLOWED_DROP_PANICS.fetch_add(1, crate::sync::Ordering::Relaxed);
}

/// How many panics from a [`LatchTree`](crate::LatchTree) key's or value's
/// `Drop` were caught and not propagated, in the whole process: during
/// background reclamation (which runs at an arbitrary point on an arbitrary
/// thread, where unwinding would be far worse), after the first one in a
/// tree's own `drop`, and every one when a tree is dropped while its thread
/// is already unwinding (resuming would abort the process).
///
/// Process-wide rather than per tree: a retired entry may be reclaimed after
/// its tree is gone. Always 0 under the crate's loom build.
///
/// ```
/// let before = latchtree::swallowed_drop_panics();
/// struct Bomb;
/// impl Drop for Bomb {
///     fn drop(&mut self) {
///         panic!("boom");
///     }
/// }
/// let r = std::panic::catch_unwind(|| {
///     let tree = latchtree::LatchTree::new();
///     tree.insert(1, Bomb);
///     panic!("unwinding drops the tree: its Bomb's panic is counted, not resumed");
/// });
/// assert!(r.is_err());
/// assert!(latchtree::swallowed_drop_panics() > before);
/// ```
pub fn swallowed_drop_panics() -> u64 {
    #[cfg(not(latchtree_loom))]
    {
        SWALLOWED_DROP_PANICS.load(crate::sync::Ordering::Relaxed)
    }
    #[cfg(latchtree_loom)]
    {
        0
    }
}

/// What reclamation keeps per thread: the writer scopes it is inside, the
/// work postponed to the end of the outermost one, and the drop tickets
/// it holds. Without `std` there are no thread-locals: a thread is never
/// known to be inside a writer scope, so nothing is postponed (a drop due
/// in a write nested in another tree's batch closure runs under that
/// write's lock), and a waiter cannot tell that it holds a ticket itself
/// (the `guide::no_std` page says what that means for callers).
#[cfg(feature = "std")]
mod here {
    use alloc::boxed::Box;
    use alloc::vec::Vec;
    use core::cell::{Cell, RefCell};

    std::thread_local! {
        /// How many writer scopes this thread is inside. No destructor, so it
        /// stays readable during thread-local destruction.
        static WRITE_DEPTH: Cell<usize> = const { Cell::new(0) };
        /// Destructors and reclamation work postponed until this thread leaves
        /// its outermost scope ([`after_outermost_write`](super::after_outermost_write)).
        static POSTPONED: RefCell<Vec<Box<dyn FnOnce()>>> = const { RefCell::new(Vec::new()) };
        /// Whether `POSTPONED` may hold work: checked first, because it
        /// has no destructor to register on first use (every write's scope
        /// asks; most find nothing).
        static ANY_POSTPONED: Cell<bool> = const { Cell::new(false) };
        /// How many [`DropTicket`](super::DropTicket)s this thread holds (from
        /// the lock that took each until its drops ran). No destructor:
        /// readable during thread-local destruction.
        static TICKETS_HERE: Cell<usize> = const { Cell::new(0) };
    }

    /// Adds `by` (+1 or -1) to the scopes this thread is inside; returns how
    /// many it is inside now.
    pub(super) fn scopes(by: isize) -> usize {
        WRITE_DEPTH.with(|d| {
            d.set(d.get().wrapping_add_signed(by));
            d.get()
        })
    }

    /// Postpones `work`, or hands it back if thread-locals are being
    /// destroyed.
    pub(super) fn postpone(work: Box<dyn FnOnce()>) -> Option<Box<dyn FnOnce()>> {
        let mut work = Some(work);
        let _ = POSTPONED.try_with(|p| p.borrow_mut().extend(work.take()));
        if work.is_none() {
            ANY_POSTPONED.set(true);
        }
        work
    }

    /// The latest postponed work, taken off the list.
    pub(super) fn next_postponed() -> Option<Box<dyn FnOnce()>> {
        if !ANY_POSTPONED.get() {
            return None;
        }
        let work = POSTPONED.try_with(|p| p.borrow_mut().pop()).ok().flatten();
        if work.is_none() {
            ANY_POSTPONED.set(false);
        }
        work
    }

    /// Adds `by` to the tickets this thread holds; returns how many it
    /// holds now.
    pub(super) fn tickets(by: isize) -> usize {
        TICKETS_HERE.with(|t| {
            t.set(t.get().wrapping_add_signed(by));
            t.get()
        })
    }
}

/// See the `std` version.
#[cfg(not(feature = "std"))]
mod here {
    use alloc::boxed::Box;

    pub(super) fn scopes(_: isize) -> usize {
        0
    }

    pub(super) fn postpone(work: Box<dyn FnOnce()>) -> Option<Box<dyn FnOnce()>> {
        Some(work)
    }

    pub(super) fn next_postponed() -> Option<Box<dyn FnOnce()>> {
        None
    }

    pub(super) fn tickets(_: isize) -> usize {
        0
    }
}

/// Marks the current thread as (possibly) holding a writer lock, from
/// before it takes the lock until after it released it; see the module docs.
pub(crate) struct WriterScope(());

impl WriterScope {
    /// Enters a scope; hold the value across the whole write.
    pub(crate) fn enter() -> Self {
        here::scopes(1);
        WriterScope(())
    }
}

impl Drop for WriterScope {
    fn drop(&mut self) {
        if here::scopes(-1) > 0 {
            return;
        }
        // Outermost scope left: the lock is released. Run what was
        // postponed, one at a time without holding the list borrowed (a
        // destructor may write, and so postpone and drain, itself).
        while let Some(work) = here::next_postponed() {
            work();
        }
    }
}

/// Runs `work` (reclamation that pins and collects) when this thread
/// leaves its outermost [`WriterScope`]; right away if it is in none, or if
/// its thread-locals are being destroyed. A collection inside a write
/// nested in another tree's batch closure would run other deferred
/// closures under that write's lock (DESIGN §7).
pub(crate) fn after_outermost_write(work: impl FnOnce() + 'static) {
    if !in_writer_scope() {
        return work();
    }
    if let Some(work) = here::postpone(Box::new(work)) {
        work();
    }
}

/// The deferred destructor of a retired `Box<T>`: runs it now, or postpones
/// it if this thread is inside a writer scope.
///
/// # Safety
/// As for [`drop_box`]; no pinned reader can reach `ptr` any more.
unsafe fn drop_or_postpone<T>(ptr: NonNull<u8>) {
    /// # Safety
    /// `r.ptr` is a `Box` that `r.drop` may drop, and no reader can reach it.
    // Not generic, so that its closure does not need `T: 'static`.
    unsafe fn drop_after_outermost_write(r: Retired) {
        // SAFETY: the caller's contract; the closure runs once.
        after_outermost_write(move || unsafe { (r.drop)(r.ptr) });
    }
    let r = Retired {
        ptr,
        drop: drop_box::<T>,
    };
    // SAFETY: `drop_box::<T>` is the dropper of the `Box<T>` behind `ptr`
    // (caller), which no pinned reader can reach any more.
    unsafe { drop_after_outermost_write(r) };
}

/// Pins the current thread to the crate's default collector: the guard
/// every guarded read of a tree or index built with `new()` takes. With
/// `std`, that is crossbeam-epoch's default collector and this is
/// `crossbeam_epoch::pin()`, after a `Release` fence. Without `std`
/// (crossbeam then has no default collector: it keeps one participant per
/// thread in a thread-local) it is a collector the crate makes on first
/// use, and each call registers a participant for its guard (an
/// allocation): a hot path should pin a [`LocalHandle`](crate::LocalHandle)
/// of [`default_collector`] that it keeps.
///
/// The fence works around crossbeam-epoch 0.9.21's pin on targets other
/// than x86-64 (and under Miri): it publishes the pin with a `Relaxed`
/// store, which under C++20 rules ends the release sequence of the
/// previous unpin, so an epoch advance that reads the new pin is not
/// ordered after what the thread read under its previous guard, and the
/// garbage it read can be freed under it (a data race Miri reports; a
/// crossbeam-only reproducer shows it too). On x86-64 the
/// fence is a compiler barrier only.
///
/// ```
/// let tree = latchtree::LatchTree::new();
/// tree.insert(1, "one");
/// let guard = latchtree::pin();
/// assert_eq!(tree.get(&1, &guard), Some(&"one"));
/// ```
#[inline]
#[must_use = "a guard protects only while it is held"]
pub fn pin() -> Guard {
    // Release: pairs with the Acquire fence that ends crossbeam's epoch
    // advance (`Global::try_advance`, after it loads each participant's
    // epoch): an advance that reads this pin is ordered after every access
    // of this thread's earlier guards.
    core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
    #[cfg(feature = "std")]
    {
        crossbeam_epoch::pin()
    }
    #[cfg(not(feature = "std"))]
    {
        default_collector().register().pin()
    }
}

/// The collector of every tree and index built with `new()` (see [`pin`]):
/// crossbeam-epoch's default collector with `std`; without it, one made on
/// first use and kept for the life of the process.
///
/// ```
/// let tree = latchtree::LatchTree::new();
/// tree.insert(1, "one");
/// let handle = latchtree::default_collector().register(); // keep it per thread
/// let guard = handle.pin();
/// assert_eq!(tree.get(&1, &guard), Some(&"one"));
/// ```
#[inline]
pub fn default_collector() -> &'static Collector {
    #[cfg(feature = "std")]
    {
        use core::sync::atomic::{AtomicPtr, Ordering};
        // crossbeam's, remembered: its `default_collector()` is an
        // out-of-line `OnceLock` read, and every guarded read compares its
        // guard's collector with this one (`Reclaimer::check_guard`).
        static CACHED: AtomicPtr<Collector> = AtomicPtr::new(core::ptr::null_mut());
        // Acquire: pairs with the Release store below, so the collector is
        // seen as the storing thread saw it (crossbeam's `OnceLock` made
        // that thread see it whole).
        let c = CACHED.load(Ordering::Acquire);
        // SAFETY: non-null, it came from the `&'static Collector` below.
        if let Some(c) = unsafe { c.as_ref() } {
            return c;
        }
        let c = crossbeam_epoch::default_collector();
        // Release: pairs with the Acquire load above. Racing threads store
        // the same pointer.
        CACHED.store(core::ptr::from_ref(c).cast_mut(), Ordering::Release);
        c
    }
    #[cfg(not(feature = "std"))]
    {
        use core::sync::atomic::{AtomicPtr, Ordering};
        static DEFAULT: AtomicPtr<Collector> = AtomicPtr::new(core::ptr::null_mut());
        // Acquire: pairs with the AcqRel exchange below, so the collector
        // another thread made is seen whole.
        let mut c = DEFAULT.load(Ordering::Acquire);
        if c.is_null() {
            let made = Box::into_raw(Box::new(Collector::new()));
            c = match DEFAULT.compare_exchange(
                core::ptr::null_mut(),
                made,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => made,
                Err(theirs) => {
                    // SAFETY: `made` came from `Box::into_raw` just above and
                    // was never shared (the exchange failed).
                    drop(unsafe { Box::from_raw(made) });
                    theirs
                }
            };
        }
        // SAFETY: a non-null `DEFAULT` came from `Box::into_raw` and is
        // never freed, so it lives for the rest of the process.
        unsafe { &*c }
    }
}

impl Reclaimer {
    crate::sync::const_fn_unless_loom! {
        /// Uses crossbeam-epoch's default collector.
        pub(crate) fn global() -> Self {
            Reclaimer { collector: None }
        }
    }

    /// Uses `collector`.
    pub(crate) fn with_collector(collector: Collector) -> Self {
        Reclaimer {
            collector: Some(collector),
        }
    }

    /// A reclaimer for another tree that uses the same collector.
    pub(crate) fn same_collector(&self) -> Self {
        match &self.collector {
            None => Reclaimer::global(),
            Some(c) => Reclaimer::with_collector(c.clone()),
        }
    }

    /// Pins the tree's collector. For an own collector this registers a
    /// fresh participant each time (an allocation): callers on a hot path
    /// should pin their own `LocalHandle` of that collector instead.
    pub(crate) fn pin(&self) -> Guard {
        match &self.collector {
            None => pin(),
            Some(c) => {
                let handle = c.register();
                // Release: as in [`pin`].
                core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
                handle.pin()
            }
        }
    }

    /// Panics unless `guard` pins this tree's collector: a guard of another
    /// collector (or `unprotected()`) would not keep our nodes alive.
    #[inline(always)]
    pub(crate) fn check_guard(&self, guard: &Guard) {
        let ok = match (guard.collector(), &self.collector) {
            (Some(g), Some(c)) => g == c,
            (Some(g), None) => g == default_collector(),
            (None, _) => false,
        };
        if !ok {
            wrong_guard();
        }
    }
}

/// `check_guard`'s panic, out of the readers' way.
#[cold]
#[inline(never)]
fn wrong_guard() -> ! {
    panic!(
        "latchtree: the guard does not pin this tree's collector \
         (use the tree's own `pin()` or the collector it was built with)"
    )
}

/// Whether this thread is inside a [`WriterScope`]: then nothing that may
/// run user code should be dropped here (see [`postpone_drop`]).
pub(crate) fn in_writer_scope() -> bool {
    here::scopes(0) > 0
}

/// Postpones dropping the `Box<T>` behind `ptr` until this thread leaves
/// its outermost [`WriterScope`] (right away if it is in none, or if its
/// thread-locals are being destroyed).
///
/// # Safety
/// `ptr` came from `Box::<T>::into_raw`, no reader can reach it any more,
/// and it is not used again.
pub(crate) unsafe fn postpone_drop<T>(ptr: NonNull<T>) {
    // SAFETY: caller.
    unsafe { drop_or_postpone::<T>(ptr.cast()) };
}

/// Writes (while items wait) between two flushes a writer does to push the
/// epoch along while its announcement is outstanding (see the module docs).
/// Every such write counts once, whether it retires or only inserts; 64
/// keeps an insert + remove churn at the flush rate that 32 retiring writes
/// gave before insert-only writes counted too.
pub(crate) const HELP_EVERY: u32 = 64;

/// Items waiting from which a writer helps every [`HELP_BACKLOG_EVERY`]
/// writes rather than every [`HELP_EVERY`]: a large removal (a `clear`, a
/// batch) is freed within a few writes, while a guard held elsewhere (which
/// no flush can get past) costs at most one flush per that many writes.
pub(crate) const HELP_BACKLOG: usize = 64;

/// See [`HELP_BACKLOG`].
pub(crate) const HELP_BACKLOG_EVERY: u32 = 4;

/// The queue capacity a [`Limbo`] keeps when it shrinks.
const LIMBO_KEPT: usize = 64;

/// What a transaction retired, waiting for its grace period; kept under
/// the writer lock. See the module docs.
pub(crate) struct Limbo<T> {
    /// Retired items with their period, oldest first.
    queue: alloc::collections::VecDeque<(u64, T)>,
    /// The period of the queue's first and last items while it holds any
    /// (set by the push into an empty queue, every push, and the pop that
    /// stops at a newer item), kept beside it: every write asks, and a
    /// deque's ends cost an index computation each.
    ends: (u64, u64),
    /// The running (or last) transaction's period.
    period: u64,
    /// The period the outstanding (or last) announcement covers.
    announced: u64,
    /// Whether the running transaction retired anything yet.
    retiring: bool,
    /// Whether `begin` asked for this transaction's job already (so that
    /// its first retirement does not count it twice towards a help).
    asked: bool,
    /// Retiring transactions since the announcement or the last help.
    since_help: u32,
    /// The period announced as past its grace period; made on first use.
    #[cfg(not(latchtree_loom))]
    passed: Option<alloc::sync::Arc<crate::sync::AtomicU64>>,
}

impl<T> core::fmt::Debug for Limbo<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Limbo")
            .field("waiting", &self.queue.len())
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

/// What a writer does after its lock for its [`Limbo`]: announce a period
/// (defer the closure) and flush its epoch bag.
#[must_use]
pub(crate) struct Job {
    #[cfg(not(latchtree_loom))]
    announce: Option<(alloc::sync::Arc<crate::sync::AtomicU64>, u64)>,
}

/// A write's limbo job, set by its body or its release hook (both may: they
/// share it) and run after the lock by its owner's `Drop`, also when the
/// body panics.
#[derive(Default)]
pub(crate) struct JobSlot(Cell<Option<Job>>);

impl JobSlot {
    /// Lets `f` set or widen the job.
    pub(crate) fn with(&self, f: impl FnOnce(&mut Option<Job>)) {
        let mut j = self.0.take();
        f(&mut j);
        self.0.set(j);
    }

    /// Sets the job of a slot nothing set yet (a write's start: no cell
    /// round trip).
    pub(crate) fn start_with(&self, job: Option<Job>) {
        let old = self.0.replace(job);
        debug_assert!(old.is_none(), "a job set twice");
    }

    /// Takes the job, to run it.
    pub(crate) fn take(&self) -> Option<Job> {
        self.0.take()
    }
}

impl Job {
    /// Makes an announcing job cover `period` (later than what it covers);
    /// false for a job that only flushes.
    fn widen(&mut self, period: u64) -> bool {
        #[cfg(not(latchtree_loom))]
        if let Some((_, p)) = &mut self.announce {
            *p = period;
            return true;
        }
        let _ = period;
        false
    }

    /// Runs the job; call it after the writer lock is released (pinning may
    /// run deferred closures). Inside another write's scope (a write nested
    /// in a batch closure) it is postponed to the end of the outermost
    /// scope instead: a collection would run other deferred closures under
    /// that write's lock (review finding).
    pub(crate) fn run(self, reclaim: &Reclaimer) {
        if in_writer_scope() {
            let reclaim = reclaim.same_collector();
            after_outermost_write(move || self.run_collecting(&reclaim, 1));
            return;
        }
        self.run_collecting(reclaim, 1);
    }

    /// [`run`](Job::run), collecting `collects` times (re-pinning in
    /// between, so that the epoch may advance): crossbeam frees at most 8
    /// sealed bags per collection, oldest first, so a backlog of other
    /// garbage queued ahead of the announcement needs several.
    pub(crate) fn run_collecting(self, reclaim: &Reclaimer, collects: usize) {
        #[cfg(not(latchtree_loom))]
        {
            let mut guard = reclaim.pin();
            if let Some((passed, period)) = self.announce {
                // Release: pairs with the Acquire load in `Limbo::passed`;
                // the closure runs only after every guard pinned before this
                // `defer` is gone (crossbeam), which happens-before it, so
                // the writer that sees the store frees after those guards.
                guard.defer(move || {
                    passed.fetch_max(period, crate::sync::Ordering::Release);
                });
            }
            // Seals this thread's bag (so the announcement reaches the
            // global queue now rather than after 63 more deferrals) and
            // collects, which advances the epoch if it can.
            guard.flush();
            for _ in 1..collects {
                guard.repin();
                guard.flush();
            }
        }
        #[cfg(latchtree_loom)]
        {
            let _ = (reclaim, collects);
        }
    }
}

impl<T> Limbo<T> {
    crate::sync::const_fn_unless_loom! {
        pub(crate) fn new() -> Self {
            Limbo {
                queue: alloc::collections::VecDeque::new(),
                ends: (0, 0),
                period: 0,
                announced: 0,
                retiring: false,
                asked: false,
                since_help: 0,
                #[cfg(not(latchtree_loom))]
                passed: None,
            }
        }
    }

    /// The latest period announced as past its grace period.
    fn passed(&self) -> u64 {
        #[cfg(not(latchtree_loom))]
        {
            // Acquire: pairs with the Release `fetch_max` of the
            // announcement (see `Job::run`).
            self.passed
                .as_ref()
                .map_or(0, |p| p.load(crate::sync::Ordering::Acquire))
        }
        #[cfg(latchtree_loom)]
        {
            0
        }
    }

    /// Starts a transaction (under the writer lock): hands every item whose
    /// grace period has passed to `due`, to be freed after the lock: the
    /// epoch's, and `also`'s (the latest period another kind of reader is
    /// known to be done with: the address index's handler sections, or
    /// `u64::MAX`). If
    /// items of earlier periods still wait, sets `job` to announce them (no
    /// announcement outstanding) or, every [`HELP_EVERY`] writes, to flush
    /// (one is): so that a tree whose later writes only insert still frees
    /// what it removed, readers or none (review findings: 999 removed
    /// values were left undropped after 20 000 inserts; with no guard
    /// anywhere, all 1,000). Announcing them now is sound: their
    /// transactions' locks were released before this one began, and the
    /// announcement is deferred after this one's.
    pub(crate) fn begin(&mut self, also: u64, mut due: impl FnMut(T), job: &mut Option<Job>) {
        self.period += 1;
        self.retiring = false;
        self.asked = false;
        if self.queue.is_empty() {
            return;
        }
        let passed = self.passed().min(also);
        if self.ends.0 <= passed {
            while let Some(&(p, _)) = self.queue.front() {
                if p > passed {
                    self.ends.0 = p;
                    break;
                }
                if let Some((_, item)) = self.queue.pop_front() {
                    due(item);
                }
            }
            // Returns the queue's memory once a burst of retirements (a
            // `clear` of a large tree) has drained (round-2 review, F3).
            let cap = self.queue.capacity();
            if cap > LIMBO_KEPT && self.queue.len() * 4 < cap {
                self.queue.shrink_to((self.queue.len() * 2).max(LIMBO_KEPT));
            }
        }
        if !self.queue.is_empty() {
            // Announces them if nothing is outstanding, else counts towards
            // the next help: an outstanding announcement needs the epoch
            // moved twice more, and with no reader pinning, only this
            // writer's flushes move it (round-3 review: insert-only writes
            // set no job, and 1,000 cleared values were never dropped).
            *job = self.job(false);
            self.asked = true;
        }
    }

    /// Retires `item`, which left every copy readers can reach in the
    /// running transaction (under the writer lock). The first retirement of
    /// a transaction may set `job`, or widen the announcement `begin` set
    /// to this transaction's period (deferred after this lock too, so it
    /// covers this period's items as well).
    pub(crate) fn retire(&mut self, item: T, job: &mut Option<Job>) {
        if self.queue.is_empty() {
            self.ends.0 = self.period;
        }
        self.ends.1 = self.period;
        self.queue.push_back((self.period, item));
        if !self.retiring {
            self.retiring = true;
            if let Some(j) = job {
                if j.widen(self.period) {
                    self.announced = self.period;
                }
            } else if !self.asked {
                *job = self.job(false);
            }
        }
    }

    /// What to do after the lock for the waiting items: announce the
    /// latest period if no announcement is outstanding, else (every
    /// [`HELP_EVERY`] calls, every [`HELP_BACKLOG_EVERY`] while
    /// [`HELP_BACKLOG`] items wait, or always if `always_help`) flush.
    pub(crate) fn job(&mut self, always_help: bool) -> Option<Job> {
        if self.queue.is_empty() {
            return None;
        }
        let latest = self.ends.1;
        if self.passed() >= self.announced {
            if latest <= self.announced {
                // Announced and passed: due at the next `begin`.
                return None;
            }
            self.announced = latest;
            self.since_help = 0;
            #[cfg(not(latchtree_loom))]
            {
                let passed = self
                    .passed
                    .get_or_insert_with(|| alloc::sync::Arc::new(crate::sync::AtomicU64::new(0)));
                return Some(Job {
                    announce: Some((alloc::sync::Arc::clone(passed), latest)),
                });
            }
            #[cfg(latchtree_loom)]
            return Some(Job {});
        }
        self.since_help += 1;
        let backlog = self.queue.len() >= HELP_BACKLOG && self.since_help >= HELP_BACKLOG_EVERY;
        if always_help || backlog || self.since_help >= HELP_EVERY {
            self.since_help = 0;
            return Some(Job {
                #[cfg(not(latchtree_loom))]
                announce: None,
            });
        }
        None
    }

    /// Whether the oldest waiting item is past the epoch's grace period
    /// (so that `begin`'s `also` decides whether it is due).
    pub(crate) fn epoch_due(&self) -> bool {
        self.oldest().is_some_and(|p| p <= self.passed())
    }

    /// The period the next transaction will have.
    pub(crate) fn next_period(&self) -> u64 {
        self.period + 1
    }

    /// The period of the oldest waiting item.
    pub(crate) fn oldest(&self) -> Option<u64> {
        (!self.queue.is_empty()).then_some(self.ends.0)
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Gives the queue's spare memory back (after a [`drain`](Limbo::drain)).
    pub(crate) fn shrink_to_fit(&mut self) {
        self.queue.shrink_to_fit();
    }

    /// Takes every waiting item (for the owner's `Drop` or `shrink_to_fit`:
    /// no reader is left).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.queue.drain(..).map(|(_, item)| item)
    }
}

/// Drops that writers hand out as due under their lock and run after it,
/// counted by *phase*, so that a caller can wait for every drop handed out
/// before it began, on whichever thread runs it (issue 25, 1: a
/// `synchronize` that found the limbo empty returned while another thread
/// was still inside a removed value's `Drop`). The phase is read and
/// flipped under the writer lock; a writer takes a [`DropTicket`] of the
/// current phase for its due items and drops it after them. A waiter
/// ([`Phases::wait_for_drops`]) holds the waiters' lock across two flips,
/// each followed by a wait for the phase it ended: the kernel's SRCU, with
/// the writer lock ordering the flips. One waiter at a time is what makes
/// two flips enough (review: three unserialized flippers could end an empty
/// phase twice and return early), and an ended phase's count only falls
/// while its waiter waits (no flip can bring new tickets to it).
#[derive(Debug)]
pub(crate) struct Drops {
    /// The phase new tickets take (under the writer lock).
    phase: usize,
    /// Made on first use (`new` is `const`, and a ticket may outlive the
    /// tree when its drops are postponed).
    phases: Option<alloc::sync::Arc<Phases>>,
}

/// The counters of [`Drops`], shared with tickets and waiters.
#[derive(Debug, Default)]
pub(crate) struct Phases {
    /// Tickets outstanding per phase.
    counts: [crate::sync::AtomicUsize; 2],
    /// Held by a waiter across its two flips and waits.
    waiting: crate::sync::Mutex<()>,
}

/// One writer's due drops in flight (see [`Drops`]): dropped after them, on
/// the thread that took it (not `Send`: this thread's ticket count (`here`)
/// counts it).
#[derive(Debug)]
pub(crate) struct DropTicket {
    phases: alloc::sync::Arc<Phases>,
    phase: usize,
    _here: core::marker::PhantomData<*const ()>,
}

impl Drops {
    crate::sync::const_fn_unless_loom! {
        pub(crate) fn new() -> Self {
            Drops { phase: 0, phases: None }
        }
    }

    /// Under the writer lock, before handing out due items: the ticket to
    /// drop once they are dropped.
    pub(crate) fn ticket(&mut self) -> DropTicket {
        let phase = self.phase;
        let phases = alloc::sync::Arc::clone(self.phases.get_or_insert_with(Default::default));
        // Relaxed: the writer lock orders it before a later flip, and a
        // waiter reads the count after that flip (it took the lock too).
        phases.counts[phase].fetch_add(1, crate::sync::Ordering::Relaxed);
        here::tickets(1);
        DropTicket {
            phases,
            phase,
            _here: core::marker::PhantomData,
        }
    }

    /// Under the writer lock: the counters, if a ticket was ever taken.
    pub(crate) fn phases(&self) -> Option<alloc::sync::Arc<Phases>> {
        self.phases.clone()
    }

    /// Under the writer lock, by a waiter holding [`Phases::waiting`]: new
    /// tickets take the other phase from now on; returns the one that
    /// ended.
    pub(crate) fn flip(&mut self) -> usize {
        let ended = self.phase;
        self.phase ^= 1;
        ended
    }
}

impl Phases {
    /// Waits until every ticket taken before the call was dropped: two
    /// flips, each run by `flip` (a transaction of the owner that calls
    /// [`Drops::flip`]), each followed by a wait for the phase it ended,
    /// yielding meanwhile. A thread that holds a ticket itself (inside a
    /// due drop, or with one postponed to the end of its outermost write)
    /// would wait for itself, and so would one inside a writer scope (the
    /// flips' own drops would wait for that scope's end): both return at
    /// once (the callers' docs say so).
    pub(crate) fn wait_for_drops(&self, mut flip: impl FnMut() -> usize) {
        if here::tickets(0) > 0 || in_writer_scope() {
            return;
        }
        let _one_waiter = crate::sync::lock(&self.waiting);
        for _ in 0..2 {
            let ended = flip();
            // Acquire: pairs with each ticket's Release decrement (all of
            // them read-modify-writes, so reading the last one's value
            // synchronizes with every earlier one).
            while self.counts[ended].load(crate::sync::Ordering::Acquire) > 0 {
                crate::sync::wait_hint();
            }
        }
    }
}

impl Drop for DropTicket {
    fn drop(&mut self) {
        here::tickets(-1);
        // Release: pairs with the Acquire load in `Phases::wait_for_drops`,
        // so that the drops this ticket covered happen-before its return.
        self.phases.counts[self.phase].fetch_sub(1, crate::sync::Ordering::Release);
    }
}

impl DropTicket {
    /// Runs `drops` (a writer's due items) and then ends the ticket, now or
    /// (inside another write's scope) after the outermost write, with its
    /// drops.
    pub(crate) fn run_after(self, drops: impl FnOnce() + 'static) {
        after_outermost_write(move || {
            drops();
            drop(self);
        });
    }
}

/// What one round of a front-end's `flush` found, under its writer lock
/// (a transaction that changes nothing): the limbo's job, whether items
/// still wait, and whether anything was handed out as due.
pub(crate) struct FlushRound {
    pub(crate) job: Option<Job>,
    pub(crate) left: bool,
    pub(crate) freed: bool,
}

/// A front-end's `flush`: runs `round` (one empty transaction that frees
/// what is due and asks for the limbo's job) and the job, collecting
/// [`FLUSH_COLLECTS`] times, doubled for each round in a row that freed
/// nothing, until nothing waits, more than [`FLUSH_PATIENCE`] rounds in a
/// row freed nothing (a guard held somewhere keeps the rest), or
/// [`FLUSH_ROUNDS`] rounds ran. So one call works through 8 × (16 + 32 +
/// 64 + 128 + 256) = 3,968 bags of other code's garbage queued ahead of the
/// tree's (a guard held elsewhere makes every flush spend those 496
/// collections). Inside another write's scope, one round,
/// whose work waits for that write's end.
pub(crate) fn flush_limbo(reclaim: &Reclaimer, mut round: impl FnMut() -> FlushRound) {
    if in_writer_scope() {
        // Nested in another write's closure: what is due is dropped, and the
        // job runs, once that write has released its lock (no collecting
        // under it); waiting for more here could not help.
        if let Some(job) = round().job {
            job.run(reclaim);
        }
        return;
    }
    let mut idle = 0;
    for _ in 0..FLUSH_ROUNDS {
        let FlushRound { job, left, freed } = round();
        idle = if freed { 0 } else { idle + 1 };
        if !left || idle > FLUSH_PATIENCE {
            return;
        }
        if let Some(job) = job {
            // Twice as many collections for each round in a row that freed
            // nothing: other code's garbage may be queued ahead (issue 25,
            // 3: ~2,000 bags took five flushes).
            job.run_collecting(reclaim, FLUSH_COLLECTS << idle);
        }
    }
}

/// Rounds in a row in which [`flush_limbo`] may free nothing before it
/// gives up. An announcement needs two epoch steps after it was sealed and
/// one more round takes what it announced; the rest lets through other
/// garbage queued ahead of the announcement (a guard held elsewhere keeps
/// all of it queued, and then every flush spends these rounds: a small
/// bound keeps that affordable).
const FLUSH_PATIENCE: usize = 5;

/// Collections in a [`flush_limbo`] round after one that freed something:
/// crossbeam frees at most 8 sealed bags per collection, oldest first, so
/// this lets such a round work through up to 64 bags of other garbage
/// queued ahead of the tree's.
const FLUSH_COLLECTS: usize = 8;

/// The most rounds one [`flush_limbo`] runs (each frees a whole announced
/// backlog, so a few suffice; the bound keeps a flush finite while other
/// threads keep writing).
const FLUSH_ROUNDS: usize = 32;
