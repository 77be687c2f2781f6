//! `LoadedObjects`: a live index of this process's loaded ELF objects
//! (feature `objects`, Linux, 64-bit).
//!
//! Layers, each in its own file:
//! - [`scan`]: one `dl_iterate_phdr` pass (the only FFI), and the pure
//!   [`scan::parse_object`] that turns one object's program headers into
//!   segments, a build id and problems;
//! - [`note`]: the build-id note parser;
//! - [`info`]: [`ObjectInfo`], what is kept per object, and its path;
//! - [`diff`]: what changed between the index and a scan;
//! - [`problem`]: what a refresh reports as odd.

// Phase 1 of issue 11: the scan is in, `LoadedObjects` (its only user
// outside tests) comes with AddrIndex v2.
#![allow(dead_code)]

mod diff;
mod info;
mod note;
mod problem;
mod scan;
#[cfg(test)]
mod tests;

pub use info::{LoadSegment, ObjectInfo, ObjectKind};
pub use note::{BuildId, NoteError};
pub use problem::{Problem, ProblemKind};
pub use scan::LoadCounters;
