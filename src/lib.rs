//! A **latched red-black tree**: an ordered map whose readers never block and
//! never wait for a writer (and write no shared memory unless a write lands
//! during their read: then they retry, and count the retry), and on top of it an
//! **address-range index** whose [`AddrIndex::lookup`] answers "which module
//! contains this address" from any thread — including a signal handler that
//! interrupted the very thread that is registering a module.
//!
//! It is the Linux kernel's `rbtree_latch.h` (the tree behind
//! `__module_address()` and `is_bpf_text_address()`) for Rust.
//!
//! # How it works
//!
//! The tree is kept **twice**. Every entry is one allocation holding its key,
//! its value and two sets of links, one per copy. A 64-bit sequence counter,
//! even at rest, says which copy readers use:
//!
//! ```text
//! writer:  seq += 1 (odd)  → readers go to copy 1; modify copy 0
//!          seq += 1 (even) → readers go to copy 0 (new); modify copy 1
//! reader:  loop { s = seq; r = search(copy[s & 1]); if seq == s { return r } }
//! ```
//!
//! A reader therefore always searches a copy that no writer is touching —
//! unless a writer flipped the counter meanwhile, in which case the reader
//! notices at its final check and searches again. Every word a reader can
//! touch while a writer writes it is an atomic, every descent is capped (so a
//! copy rewritten under a slow reader cannot loop it), and a removed entry is
//! freed only after it left both copies and no pinned reader can still see it
//! ([crossbeam-epoch](https://docs.rs/crossbeam-epoch)).
//!
//! # The two front-ends
//!
//! * [`LatchTree<K, V>`]: a generic ordered map with `BTreeMap`-like names.
//!   Readers pin a [`Guard`] ([`pin()`]) and get references that live as long
//!   as it. Point queries (`get`, `upper_bound`, `lower_bound`, first/last),
//!   atomic batches ([`LatchTree::write`]) and consistent ordered snapshots.
//!   Porting from `BTreeMap` or `SkipMap`: [`guide::from_btreemap`] lists
//!   what differs.
//! * [`AddrIndex<T>`]: non-overlapping `[start, end)` ranges of `u64`
//!   addresses, several per module, registered and removed atomically.
//!   [`AddrIndex::lookup`] is async-signal-safe: no lock, no epoch pin, no
//!   thread-local, no allocation, no free. Its nodes live in type-stable
//!   storage (recycled but never freed while the index lives) so that a
//!   reader landing on a recycled node reads valid atomics and retries.
//!
//! ```
//! use latchtree::{AddrIndex, LatchTree};
//! use std::ops::Bound;
//!
//! // An ordered map shared by `&` between threads.
//! let symbols = LatchTree::new();
//! symbols.write(|batch| {
//!     batch.insert(0x1000_u64, "main");
//!     batch.insert(0x1400, "parse");
//! });
//! let guard = latchtree::pin();
//! assert_eq!(symbols.upper_bound(Bound::Included(&0x1404), &guard), Some((&0x1400, &"parse")));
//!
//! // Which module contains an address?
//! static MODULES: AddrIndex<String> = AddrIndex::new();
//! let id = MODULES.insert_module([0x40_0000..0x40_8000, 0x60_0000..0x60_1000], "app".into()).unwrap();
//! let hit = MODULES.lookup(0x40_1234).unwrap(); // signal-safe
//! assert_eq!((hit.id(), hit.offset(0x40_1234)), (id, 0x1234));
//! ```
//!
//! **Profilers, symbolizers, JIT runtimes:** the [`guide`] says what a
//! signal handler may call, what it should record, and how a sample still
//! resolves after its module was unloaded (with a compiled example that
//! installs a real handler).
//!
//! # Guarantees
//!
//! * **Readers never wait**, not for a writer on another thread, nor for one
//!   they interrupted on their own thread (they read the other copy).
//! * **Writers never wait for readers.** Writers are serialized by an
//!   internal lock.
//! * **Linearizable point reads and atomic batches**: a write, or a whole
//!   [`write`](LatchTree::write) batch, becomes visible to every reader at
//!   once; a reader sees all of it or none of it.
//! * **Misbehaving user code cannot cause undefined behaviour.** A panic in
//!   `Ord` or in a batch closure rolls the write back; see
//!   [`LatchTree`](LatchTree#user-code-that-misbehaves).
//!
//! # Features
//!
//! * `std` (default): thread-locals, the OS's lock for writers, panics in
//!   user code rolled back. Without it the core builds on `core` + `alloc`;
//!   [`guide::no_std`] says what changes.
//! * `objects`: `LoadedObjects`, a live index of
//!   the process's ELF objects (Linux, 64-bit; needs `std`).
//! * `serde`: `Serialize`/`Deserialize` for [`LatchTree`].
//! * `huge-pages`: large indexes ask Linux for transparent huge pages for
//!   their node chunks (needs `std`).
//!
//! # Trade-offs and limits
//!
//! * **Two link sets per entry** (48 bytes of links on 64-bit targets), and
//!   every write does its work twice.
//! * **One writer at a time.** Writes are meant to be rarer than reads (module
//!   load/unload, JIT code registration, configuration).
//! * **Readers may retry while writes keep landing**; under a writer that
//!   never stops, a reader can starve. Retries are counted in
//!   [`Stats::read_retries`].
//! * Lookups cost a descent of about `log2(n)` dependent loads. An
//!   `AddrIndex::lookup` takes about a sorted array's binary search at
//!   module-sized `n` (1.0–1.35× its time, by CPU; a third to a half of a
//!   `BTreeMap`'s); at hundreds of
//!   thousands of ranges, past the caches, about a `BTreeMap` grown by
//!   inserts and twice one built in one go. `LatchTree`, whose generic keys
//!   cannot be cached beside the links, up to twice that.
#![warn(rust_2018_idioms)]
// Without `std` the crate builds on `core` and `alloc` (see the
// `guide::no_std` page); its own tests always have `std`.
#![cfg_attr(not(any(feature = "std", test)), no_std)]

extern crate alloc;

mod addr_index;
pub mod guide;
mod latch_tree;
#[cfg(all(feature = "objects", target_os = "linux", target_pointer_width = "64"))]
mod objects;
mod raw;
mod reclaim;
mod stats;
mod sync;
mod unwind;

#[doc(hidden)]
pub use addr_index::LayoutPolicy;
pub use addr_index::{
    AddrIndex, AddrIndexError, HandlerSection, Hit, IndexBatch, InsertError, KeepRemoved, ModuleId,
    ModuleMeta, ModuleRef, NodeMemory, RawHit, Removed, Segment,
};
pub use crossbeam_epoch::{Collector, Guard, LocalHandle};
pub use latch_tree::{Batch, Iter, Keys, LatchTree, Range, UnsortedInput, Values};
#[cfg(all(feature = "objects", target_os = "linux", target_pointer_width = "64"))]
pub use objects::{
    BuildId, EhFrameError, HandlerObject, LoadCounters, LoadSegment, LoadedObjects, MappedObject,
    NoteError, ObjectHit, ObjectInfo, ObjectKind, ObjectRef, ObjectsSection, Problem, ProblemKind,
    ReadError, Refresh, UnindexedObject,
};
pub use reclaim::{default_collector, pin, swallowed_drop_panics};
pub use stats::Stats;

/// The handler sections' grace period on its own, for the loom model of
/// read section vs retire (`tests/loom_addr_index.rs`); not an API.
#[cfg(latchtree_loom)]
#[doc(hidden)]
pub mod loom_section {
    pub use crate::reclaim::section::{SectionClock, Sections};
}

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
