//! Crate docs: see README (filled in below).
#![doc = include_str!("../README.md")]

mod addr_index;
mod latch_tree;
mod raw;
mod reclaim;
mod stats;
mod sync;

pub use addr_index::{AddrIndex, AddrIndexError, Hit, ModuleId, RawHit};
pub use crossbeam_epoch::{Collector, Guard, LocalHandle, pin};
pub use latch_tree::{Batch, LatchTree};
pub use stats::Stats;
