//! `AddrIndex<T>`: which module contains an address, from any context.
//!
//! One thing a file, lowest first: each file imports only files listed
//! before it (and `crate::raw`, never the reverse).
//!
//! * `types.rs`, `error.rs`: the public plain types;
//! * `record.rs`: module records;
//! * `table.rs`: the per-copy module table (id → record);
//! * `garbage.rs`: what the index's writes retire (records, table
//!   segments), and how reclamation (`crate::reclaim`) empties and recycles
//!   them;
//! * `module.rs`: what a caller gets of a record ([`ModuleRef`],
//!   [`Removed`]);
//! * `kept.rs`: the store of removed modules kept for late samples, if
//!   asked ([`KeepRemoved`]);
//! * `slab.rs`: the type-stable range nodes (range, id, base, tag, flags);
//! * `index.rs`: [`AddrIndex`] itself (its parts, construction, `Drop`);
//! * `layout/`: where a large tree's nodes lie in memory: when a rebuild
//!   moves them into van Emde Boas order (`mod.rs`, with the
//!   [`LayoutPolicy`]) and how (`migration.rs`);
//! * `queries.rs`: every read;
//! * `handler.rs`: reads from a signal handler ([`HandlerSection`]);
//! * `batch.rs`: the operations inside a write ([`IndexBatch`]);
//! * `removed.rs`: what an index tells of the removed modules it keeps
//!   ([`AddrIndex::removed`], [`AddrIndex::forget`]);
//! * `write.rs`: every write, as one transaction through reclamation's
//!   (`crate::reclaim`: what a write drops, and when);
//! * `compact.rs`: giving memory back (`shrink_to_fit`, `&mut self`);
//! * `check.rs`: the invariant checker.
//!
//! One latch steers readers over everything: the two copies of the range
//! tree, the per-copy bounds and the per-copy module tables. A write changes
//! copy 0 of all three while readers are on copy 1, flips, then brings copy
//! 1 level: one pair of flips per operation or batch.

mod batch;
mod check;
mod compact;
mod error;
mod garbage;
mod handler;
mod index;
mod kept;
mod layout;
mod module;
mod queries;
mod record;
mod removed;
mod slab;
mod table;
mod types;
mod write;

pub use batch::IndexBatch;
pub use error::{AddrIndexError, InsertError};
pub use handler::HandlerSection;
pub use index::AddrIndex;
pub use kept::KeepRemoved;
pub use layout::LayoutPolicy;
pub use module::{ModuleRef, Removed};
pub use types::{Hit, ModuleId, ModuleMeta, NodeMemory, RawHit, Segment};
