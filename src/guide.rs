//! A guide for profiler, symbolizer and JIT-runtime authors: what may run in
//! a signal handler, what a handler should record, and how a sample still
//! resolves after its module is gone. Everything here is also compiled and
//! run as a test.
//!
//! # What a signal handler may call
//!
//! [`AddrIndex::lookup`] and [`AddrIndex::lookup_many`] and the accessors of
//! the [`RawHit`] they return (plain values, no borrow); and a
//! [`HandlerSection`] ([`AddrIndex::handler_section`]), whose lookups borrow
//! the module's value in place. None of them takes a lock, pins an epoch,
//! touches a thread-local, allocates or frees, or waits: if the signal
//! interrupted a writer on the very same thread, the handler reads the copy
//! that writer is not touching and answers. With the `objects` feature,
//! `LoadedObjects::lookup`, `LoadedObjects::handler_section` and
//! `LoadedObjects::unindexed` too. Everything else —
//! writes, [`AddrIndex::module_address`], [`AddrIndex::get`], iteration,
//! [`AddrIndex::pin`] — pins a crossbeam epoch (a thread-local that may
//! allocate on first use) or takes the writer lock: normal threads only.
//!
//! Keep the index in a `static` ([`AddrIndex::new`] is `const`), so that the
//! handler needs no pointer to it.
//!
//! # What a handler should record
//!
//! `(hit.id().get(), hit.module_offset(pc))`, into memory allocated
//! beforehand (static atomics, a preallocated ring buffer):
//!
//! * [`ModuleId`]s are never reused: the pair names one module forever, even
//!   after it was unloaded and something else was mapped at its address (an
//!   address-keyed table would silently blame the newcomer).
//! * [`RawHit::module_offset`] is `pc - base`, where `base` is the module's
//!   [`ModuleMeta::base`] (for an ELF object its load bias): the link-time
//!   address that `addr2line`, `blazesym` or `nm` take. [`RawHit::offset`] is
//!   relative to the *range* instead, which is ambiguous for a module with
//!   several ranges.
//! * [`RawHit::tag`] is the module's user word, readable right in the
//!   handler: a generation number, an index into a table you preallocated.
//!   If it is a pointer, its pointee must outlive **every lookup that may
//!   have returned the tag**, not just the module: nothing tells you when
//!   handlers are done with a tag. For data a handler reads, use the
//!   module's value through a section instead (next section).
//!   [`RawHit::flags`] is the range's own word (e.g. an ELF segment's
//!   `p_flags`).
//!
//! # Payloads a handler reads in place, and when they are freed
//!
//! Make what the handler needs (a trap table, an unwinder) the module's
//! value, and read it through a [`HandlerSection`]:
//!
//! ```
//! use latchtree::AddrIndex;
//! struct TrapTable { traps: Vec<(u64, &'static str)> }
//! static CODE: AddrIndex<TrapTable> = AddrIndex::new();
//!
//! fn on_trap(pc: u64) -> Option<&'static str> {
//!     let section = CODE.handler_section(); // async-signal-safe
//!     let hit = section.lookup(pc)?;
//!     let at = hit.module_offset(pc);
//!     hit.value().traps.iter().find(|t| t.0 == at).map(|t| t.1)
//! } // the section closes here; `hit` cannot outlive it
//! # CODE.insert(0x1000..0x2000, TrapTable { traps: vec![(4, "oob")] }).unwrap();
//! # assert_eq!(on_trap(0x1004), Some("oob"));
//! ```
//!
//! The rules, exactly:
//!
//! 1. A value a section's lookup returned stays alive, unchanged, until
//!    that section is dropped (the borrow checker ties the hit to it).
//! 2. After [`remove`](crate::AddrIndex::remove) or
//!    [`set_value`](crate::AddrIndex::set_value) (which hands back the old value
//!    *and* tag), the index drops its reference to the old value once every
//!    section that was open at the removal has closed **and** every guard
//!    pinned before it is dropped. It does so in a later write of the index,
//!    [`flush`](crate::AddrIndex::flush), [`synchronize`](crate::AddrIndex::synchronize)
//!    or its drop, on that thread, after its writer lock: never in a
//!    handler, never in a reader. Writers never wait for sections;
//!    `synchronize` does, for a caller that must know (say, before reusing
//!    the memory a removed module's code lived in), and returns only once
//!    that drop has finished, also when another thread's write runs it.
//!    It waits for the readers that could see the value, not for later
//!    ones: it is not a general barrier.
//! 3. The value is freed when its last `Arc` goes: the index's, or the
//!    caller's [`Removed`] and its clones.
//! 4. A section left open keeps everything removed after it alive: keep
//!    sections as short as the handler.
//! 5. The index frees payloads, not what they describe: unmapping code or
//!    a library is yours (or the loader's) to order after `synchronize`.
//!
//! # Sampling several threads with `SIGPROF`
//!
//! `setitimer(ITIMER_PROF)` signals whichever thread is running when the
//! process's CPU-time timer fires: busy threads are sampled in proportion,
//! idle ones never. For per-thread rates, give each thread its own timer:
//! `timer_create(CLOCK_THREAD_CPUTIME_ID)` with `SIGEV_THREAD_ID` naming
//! the thread (`gettid()`). Either way the index needs nothing per thread:
//! sections and lookups use no thread-local and no registration, so a
//! thread created after the profiler started is sampled like the others.
//! A handler that keeps state of its own per thread (an unwinder's rule
//! cache, where the stack ends) can have the timer carry it: a pointer in
//! `sigev_value` arrives as the signal's `si_value`, no thread-local needed.
//! Keep what it points to alive until the handler is uninstalled, since a
//! last signal may still be pending when the timer is deleted
//! (`examples/profile/sampler.rs` does all of this).
//!
//! # Constructors and other objects not indexed yet
//!
//! `LoadedObjects` indexes what its last `refresh` saw. A library's
//! constructors run inside `dlopen`, before any refresh can see it, so a
//! sample taken there misses. `LoadedObjects::unindexed(pc)` asks glibc's
//! `_dl_find_object` (2.35+, async-signal-safe, looked up at refresh time),
//! which `dlopen` updates before it runs constructors: it gives the
//! mapping's span (whose start is the bias for the usual layout, so
//! `pc - map.start` can be recorded) and the `.eh_frame_hdr` address (so an
//! unwinder can go on). Not the path, build id or segments: those come with
//! the next refresh. On other loaders, or
//! before the first refresh, such a pc stays a miss.
//!
//! # Side by side, for this job
//!
//! | | signal-safe | after a `dlclose` | per-object payload | unwind info | cost per pc |
//! |---|---|---|---|---|---|
//! | `LoadedObjects` | yes, also interrupting its own writer | resolves by id until forgotten | yes, freed after its grace period | `.eh_frame_hdr`, `.sframe`, image span | ≈ `_dl_find_object` (README) |
//! | glibc `_dl_find_object` | yes (2.35+) | gone | no | `dlfo_eh_frame` | the reference |
//! | `findshlibs` | no: `dl_iterate_phdr` takes the loader's lock, so a handler that interrupts a `dlopen` deadlocks | a stale snapshot | no | no | a full walk |
//! | `RwLock<BTreeMap>` | no: a handler that interrupts a writer on its own thread deadlocks | up to you | yes, with your own grace period | up to you | a lock |
//!
//! # Resolving later, even after an unload
//!
//! On a normal thread, turn the number back into an id with
//! [`ModuleId::from_raw`] and ask [`AddrIndex::module`] (still loaded), then
//! [`AddrIndex::removed`] (unloaded): an index made with
//! [`AddrIndex::keeping_removed`] keeps what [`AddrIndex::remove`] handed
//! back ([`Removed`]: the value as an `Arc`, the ranges, `base` and `tag`),
//! the last `n` removals ([`KeepRemoved::Last`]: size `n` to the removals
//! that can happen between a sample and its resolution) or every one until
//! you [`forget`](crate::AddrIndex::forget) it
//! ([`KeepRemoved::UntilForgotten`]). Ask in that order: a module the index
//! misses has been removed, and is kept from that moment on. An index made
//! with [`AddrIndex::new`] keeps nothing; then keep the [`Removed`]s
//! yourself for as long as samples may still name their modules.
//!
//! # A real handler, interrupting a write on its own thread
//!
//! ```
//! # #[cfg(unix)] {
//! use latchtree::{AddrIndex, ModuleId, ModuleMeta};
//! use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
//!
//! static MODULES: AddrIndex<&'static str> = AddrIndex::new();
//! // What the handler saw: preallocated, written with plain atomic stores.
//! static SEEN_ID: AtomicU64 = AtomicU64::new(0);
//! static SEEN_OFFSET: AtomicU64 = AtomicU64::new(0);
//! static SEEN_TAG: AtomicU64 = AtomicU64::new(0);
//! /// The "interrupted pc" (a real profiler reads it from the `ucontext`).
//! const PC: u64 = 0x7f00_1234;
//!
//! extern "C" fn on_signal(_: libc::c_int) {
//!     // Async-signal-safe: no lock, pin, thread-local, allocation or free.
//!     if let Some(hit) = MODULES.lookup(PC) {
//!         SEEN_ID.store(hit.id().get(), Relaxed);
//!         SEEN_OFFSET.store(hit.module_offset(PC), Relaxed);
//!         SEEN_TAG.store(hit.tag(), Relaxed);
//!     }
//! }
//!
//! // SAFETY: a zeroed `sigaction` is a valid "no flags, empty mask" value,
//! // and `on_signal` only calls async-signal-safe code.
//! unsafe {
//!     let mut action: libc::sigaction = std::mem::zeroed();
//!     action.sa_sigaction = on_signal as usize;
//!     assert_eq!(libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()), 0);
//! }
//!
//! // A library: text and data, offsets relative to its load bias 0x7f00_0000,
//! // and a tag (here an index into a table the program preallocated).
//! let meta = ModuleMeta { base: Some(0x7f00_0000), tag: 42 };
//! let lib = MODULES
//!     .insert_module_with([0x7f00_1000..0x7f00_8000, 0x7f00_a000..0x7f00_b000], "libfoo.so", meta)
//!     .unwrap();
//!
//! // The signal lands in the middle of a batch on this very thread: the
//! // handler reads the copy the batch is not writing, and answers at once.
//! MODULES.write(|batch| {
//!     batch.insert(0x1000..0x2000, "jit-code").unwrap();
//!     // SAFETY: raising a signal whose handler is installed above.
//!     assert_eq!(unsafe { libc::raise(libc::SIGUSR1) }, 0);
//!     batch.insert(0x3000..0x4000, "more-jit-code").unwrap();
//! });
//! assert_eq!(SEEN_ID.load(Relaxed), lib.get());
//! assert_eq!(SEEN_OFFSET.load(Relaxed), 0x1234); // the link-time address
//! assert_eq!(SEEN_TAG.load(Relaxed), 42);
//!
//! // The library is unloaded; a late sample still resolves, from what
//! // `remove` handed back.
//! let removed = MODULES.remove(lib).unwrap();
//! let sample = (SEEN_ID.load(Relaxed), SEEN_OFFSET.load(Relaxed));
//! assert_eq!(MODULES.lookup(PC), None);
//! assert_eq!(ModuleId::from_raw(sample.0), removed.id());
//! assert_eq!(*removed, "libfoo.so");
//! assert_eq!(removed.base() + sample.1, PC);
//! # }
//! ```
//!
//! # Keeping up with `dlopen` and `dlclose`
//!
//! Rescan on a normal thread (glibc's `dlpi_adds`/`dlpi_subs` counters say
//! when anything changed) and apply the difference as one
//! [`AddrIndex::write`] batch: readers see the old set of objects or the new
//! one, never half of it. With the `objects` feature, the crate does this for
//! you: see `LoadedObjects`.
//!
//! # Limits
//!
//! * Readers can starve only while writes never stop; a handler that
//!   interrupted the writer never retries (that writer cannot run meanwhile).
//! * A write — including one issued from a handler — is never signal-safe:
//!   it takes the writer lock.
//!
//! [`AddrIndex`]: crate::AddrIndex
//! [`AddrIndex::lookup`]: crate::AddrIndex::lookup
//! [`AddrIndex::lookup_many`]: crate::AddrIndex::lookup_many
//! [`AddrIndex::handler_section`]: crate::AddrIndex::handler_section
//! [`HandlerSection`]: crate::HandlerSection
//! [`AddrIndex::remove`]: crate::AddrIndex::remove
//! [`AddrIndex::module_address`]: crate::AddrIndex::module_address
//! [`AddrIndex::get`]: crate::AddrIndex::get
//! [`AddrIndex::pin`]: crate::AddrIndex::pin
//! [`AddrIndex::new`]: crate::AddrIndex::new
//! [`AddrIndex::module`]: crate::AddrIndex::module
//! [`AddrIndex::write`]: crate::AddrIndex::write
//! [`RawHit`]: crate::RawHit
//! [`RawHit::module_offset`]: crate::RawHit::module_offset
//! [`RawHit::offset`]: crate::RawHit::offset
//! [`RawHit::tag`]: crate::RawHit::tag
//! [`RawHit::flags`]: crate::RawHit::flags
//! [`AddrIndex::removed`]: crate::AddrIndex::removed
//! [`AddrIndex::keeping_removed`]: crate::AddrIndex::keeping_removed
//! [`KeepRemoved::Last`]: crate::KeepRemoved::Last
//! [`KeepRemoved::UntilForgotten`]: crate::KeepRemoved::UntilForgotten
//! [`ModuleId`]: crate::ModuleId
//! [`ModuleId::from_raw`]: crate::ModuleId::from_raw
//! [`ModuleMeta::base`]: crate::ModuleMeta::base
//! [`Removed`]: crate::Removed

pub mod from_btreemap;
pub mod no_std;
