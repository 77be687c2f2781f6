//! What a refresh found odd: [`Problem`] and [`ProblemKind`].

use super::eh_frame::EhFrameError;
use super::note::NoteError;
use core::fmt;
use core::ops::Range;
use std::path::Path;

/// Something odd about one object, found by a refresh. A problem never stops
/// a refresh: the object goes in as far as it can (see each kind), and the
/// other objects go in regardless.
///
/// ```
/// let objects = latchtree::LoadedObjects::new();
/// for problem in &objects.refresh().problems {
///     eprintln!("{} at {:#x}: {}", problem.path().display(), problem.bias(), problem.kind());
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub(crate) path: Box<Path>,
    pub(crate) bias: u64,
    pub(crate) kind: ProblemKind,
}

impl Problem {
    /// The object's path (as [`ObjectInfo::path`](crate::ObjectInfo::path)
    /// would give it; see the example on [`Problem`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The object's load bias (see the example on [`Problem`]).
    pub fn bias(&self) -> u64 {
        self.bias
    }

    /// What was odd (see the example on [`Problem`]).
    pub fn kind(&self) -> &ProblemKind {
        &self.kind
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (bias {:#x}): {}",
            self.path.display(),
            self.bias,
            self.kind
        )
    }
}

/// The kinds of [`Problem`].
///
/// ```
/// use latchtree::ProblemKind;
/// assert_eq!(ProblemKind::NoLoadSegment.to_string(), "no non-empty PT_LOAD segment: not indexed");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The object has no non-empty `PT_LOAD` segment: there is nothing to
    /// index, so it is left out (and not reported again while it stays).
    NoLoadSegment,
    /// A `PT_LOAD` segment with `p_memsz == 0`: left out.
    EmptySegment {
        /// Its `p_vaddr`.
        vaddr: u64,
    },
    /// A `PT_LOAD` segment whose run-time end does not fit in 64 bits: left
    /// out.
    SegmentOutOfRange {
        /// Its `p_vaddr`.
        vaddr: u64,
        /// Its `p_memsz`.
        memsz: u64,
    },
    /// Two `PT_LOAD` segments of the object overlap: they are indexed as
    /// one segment (the union of their bounds and of their flags; file
    /// offset and size of the lower one).
    OverlappingSegments {
        /// The lower segment (run-time addresses).
        first: Range<u64>,
        /// The one overlapping it.
        second: Range<u64>,
    },
    /// The object has no GNU build-id note.
    NoBuildId,
    /// A `PT_NOTE` segment is malformed; build ids found before the fault
    /// count.
    MalformedNote(NoteError),
    /// The object's file is gone from the file system (deleted or replaced
    /// since it was loaded): symbolizing it from `path` will fail or read
    /// the wrong file; compare build ids.
    FileVanished,
    /// The path is not valid UTF-8. It is kept exactly (as bytes in an
    /// `OsStr`); this only says that printing it is lossy.
    PathNotUtf8,
    /// A library that the loader gives no name (neither the main program
    /// nor the vDSO): its path is empty.
    NoPath,
    /// The index refused the object (its segments overlap another object's):
    /// it is left out, tried again on every rescan (the other object may be
    /// gone by then) and not reported again while it stays.
    Rejected(crate::addr_index::AddrIndexError),
    /// The object has no [`ObjectInfo::eh_frame`](crate::ObjectInfo::eh_frame),
    /// for this reason: a DWARF unwinder has nothing to read for it. It is
    /// indexed all the same.
    NoEhFrame(EhFrameError),
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProblemKind::NoLoadSegment => f.write_str("no non-empty PT_LOAD segment: not indexed"),
            ProblemKind::EmptySegment { vaddr } => {
                write!(f, "empty PT_LOAD segment at {vaddr:#x}: left out")
            }
            ProblemKind::SegmentOutOfRange { vaddr, memsz } => write!(
                f,
                "PT_LOAD segment at {vaddr:#x} of size {memsz:#x} ends past 2^64: left out"
            ),
            ProblemKind::OverlappingSegments { first, second } => write!(
                f,
                "PT_LOAD segments {:#x}..{:#x} and {:#x}..{:#x} overlap: merged",
                first.start, first.end, second.start, second.end
            ),
            ProblemKind::NoBuildId => f.write_str("no GNU build id"),
            ProblemKind::MalformedNote(e) => write!(f, "malformed PT_NOTE: {e}"),
            ProblemKind::FileVanished => f.write_str("its file is gone from the file system"),
            ProblemKind::PathNotUtf8 => f.write_str("path is not UTF-8 (kept as bytes)"),
            ProblemKind::NoPath => f.write_str("the loader gives it no name"),
            ProblemKind::Rejected(e) => write!(f, "not indexed: {e}"),
            ProblemKind::NoEhFrame(e) => write!(f, "no .eh_frame: {e}"),
        }
    }
}
