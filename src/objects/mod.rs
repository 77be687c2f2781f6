//! [`LoadedObjects`]: a live index of this process's loaded ELF objects
//! (feature `objects`; Linux, 64-bit).
//!
//! One thing a file. What the loader shows, lowest first (each imports
//! only files listed before it):
//! - [`segment`]: what program headers say of an object (kind, `PT_LOAD`
//!   segments, how its memory is read);
//! - [`note`]: the build-id note parser;
//! - [`eh_frame`]: where `.eh_frame` is, from `.eh_frame_hdr`, or why not;
//! - [`problem`]: what a refresh reports as odd;
//! - [`scan`]: one `dl_iterate_phdr` pass (the only FFI besides `hold` and
//!   `find`), and the pure [`scan::parse_object`] that turns one object's
//!   program headers into segments, a build id and problems;
//! - [`info`]: [`ObjectInfo`], what is kept per object, and its path;
//! - [`find`]: glibc's `_dl_find_object`, for objects not indexed yet;
//! - [`hold`]: a loader reference that keeps an object mapped while a
//!   refresh reads it;
//! - [`diff`]: what changed between the index and a scan.
//!
//! Then the index over them (an [`AddrIndex`](crate::AddrIndex) with one
//! module per object):
//! - [`mapped`]: [`MappedObject`], what a payload builder reads;
//! - [`index`]: [`LoadedObjects`] itself, its construction and counts;
//! - [`hit`]: the async-signal-safe lookups and [`ObjectHit`];
//! - [`object`]: [`ObjectRef`] and the reads and forgets by id;
//! - [`handler`]: handler sections ([`ObjectsSection`]);
//! - [`refresh`]: the refresh, applied as one batch, and [`Refresh`];
//! - `tests`: odd headers and refreshes of synthetic objects.
//!
//! `objects/` uses `addr_index` and the crate root; nothing there uses
//! `objects/`.

mod diff;
mod eh_frame;
mod find;
mod handler;
mod hit;
mod hold;
mod index;
mod info;
mod mapped;
mod note;
mod object;
mod problem;
mod refresh;
mod scan;
mod segment;
#[cfg(test)]
mod tests;

pub use eh_frame::EhFrameError;
pub use find::UnindexedObject;
pub use handler::{HandlerObject, ObjectsSection};
pub use hit::ObjectHit;
pub use index::LoadedObjects;
pub use info::ObjectInfo;
pub use mapped::{MappedObject, ReadError};
pub use note::{BuildId, NoteError};
pub use object::ObjectRef;
pub use problem::{Problem, ProblemKind};
pub use refresh::Refresh;
pub use scan::LoadCounters;
pub use segment::{LoadSegment, ObjectKind};
