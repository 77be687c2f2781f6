//! Without the standard library: what builds on `core` + `alloc`, and what
//! a `no_std` user gives up.
//!
//! Kernels, hypervisors, embedded runtimes and wasm engines built without
//! `std` are exactly the code that resolves program counters from trap
//! handlers. With `default-features = false` the core of this crate builds
//! on `alloc` alone (CI builds it for `x86_64-unknown-none` and runs the
//! test suite against it on the host):
//!
//! ```toml
//! [dependencies]
//! latchtree = { version = "0.1", default-features = false }           # core + alloc
//! # latchtree = { version = "0.1", default-features = false, features = ["serde"] }
//! ```
//!
//! # What is the same
//!
//! * [`LatchTree`](crate::LatchTree) and [`AddrIndex`](crate::AddrIndex)
//!   with every method, batches, iterators, snapshots, `serde` (on
//!   `serde`'s `alloc`).
//! * The signal-safe read path: [`AddrIndex::lookup`](crate::AddrIndex::lookup),
//!   [`lookup_many`](crate::AddrIndex::lookup_many) and handler sections
//!   ([`AddrIndex::handler_section`](crate::AddrIndex::handler_section)) pin nothing, take
//!   no lock, use no thread-local and never allocate, with or without
//!   `std`: a trap handler of a no_std runtime resolves addresses exactly
//!   as one of a Linux process does. Readers never wait for a writer, so
//!   this latch needs no lock from the embedder on its read side.
//! * Reclamation by epoch ([crossbeam-epoch] with its `alloc` feature):
//!   removed values are dropped after every guard that could see them,
//!   on a writer's thread, never under its lock (but see below).
//!
//! # What you give up
//!
//! | With `std` | Without `std` |
//! |---|---|
//! | A panic in user code inside a write (an `Ord`, a batch closure) rolls the write back and resumes; a panic in a removed value's `Drop` is caught and counted ([`swallowed_drop_panics`](crate::swallowed_drop_panics)) | The crate catches nothing: a panic that unwinds out of user code inside a write, or out of a removed value's `Drop`, reaches a guard whose `Drop` panics, and a panic during cleanup makes your panic handler run with `can_unwind() == false`, never to return (abort, reset, or park the task). No half-done write is ever seen (readers keep the last committed copy), but later writers of that structure wait forever for its lock. Where panics abort anyway, as usual without `std`, nothing changes. Never undefined behaviour. |
//! | Writers wait for each other on the OS's `Mutex` | Writers wait for each other by spinning (reads are unaffected: they never wait) |
//! | [`pin()`](crate::pin) reuses the thread's participant (a thread-local) | `pin()` registers a participant per call, an allocation: keep a [`LocalHandle`](crate::LocalHandle) from [`default_collector()`](crate::default_collector)`.register()` per thread or context and pin that. Writers pin the same way to announce their garbage, so about one `AddrIndex` insert + remove pair in 32 allocates (0.031; 0.008 with `std`). While any guard is held somewhere, each such pin also leaves its participant and an empty bag behind, about 4 KiB, until that guard goes (10,000 `ranges_of` calls under a held guard hold 44 MB, against 3 KB with `std`): do not hold a guard for long |
//! | A write started from inside a write of the **same** tree (a batch closure calling `insert` on it) panics | It spins forever: use the batch handle, as always |
//! | A write nested in **another** tree's batch closure postpones its due drops to the end of the outermost write | They run when the nested write ends, still under the outer write's lock: a removed value's `Drop` must not write to the outer tree |
//! | [`AddrIndex::synchronize`](crate::AddrIndex::synchronize) called from inside a removed value's `Drop` returns at once | It waits for that very drop: do not call it from a `Drop` of a value the index held |
//! | `LoadedObjects` (feature `objects`) and the `huge-pages` feature | Not available: both need the OS (they enable `std`) |
//!
//! Every row on the right follows from one fact: without `std` there are no
//! thread-locals and no `catch_unwind`. The crate's test suite runs with
//! `--no-default-features` in CI; the tests that exercise the left column's
//! promises are marked ignored there, with the reason.
//!
//! ```
//! // What a no_std runtime does: a static index, written by the loader and
//! // read by its trap handler.
//! static CODE: latchtree::AddrIndex<&str> = latchtree::AddrIndex::new();
//! let id = CODE.insert(0x1000..0x2000, "module").unwrap();
//! let hit = CODE.lookup(0x1004).unwrap(); // in a trap handler: no pin, no lock
//! assert_eq!((hit.id(), hit.offset(0x1004)), (id, 4));
//!
//! // Guarded reads of a map: one participant per thread, kept.
//! let map = latchtree::LatchTree::new();
//! map.insert(1_u64, "one");
//! let handle = latchtree::default_collector().register();
//! assert_eq!(map.get(&1, &handle.pin()), Some(&"one"));
//! ```
//!
//! [crossbeam-epoch]: https://docs.rs/crossbeam-epoch
