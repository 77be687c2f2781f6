//! GNU build ids, read from a loaded object's `PT_NOTE` segments.
//!
//! A note segment is a sequence of notes, each `namesz: u32, descsz: u32,
//! type: u32`, then the name (`namesz` bytes, its NUL included), padded to
//! the segment's alignment, then the descriptor (`descsz` bytes), padded
//! likewise. In memory the words are in the running process's byte order. The
//! build id is the descriptor of the note named `"GNU\0"` of type
//! `NT_GNU_BUILD_ID` (3): what `readelf -n` prints as "Build ID" and what
//! profilers upload so that samples can be symbolized offline.
//!
//! [`find_build_id`] is a pure function over a byte slice: it never reads
//! outside the slice, never panics, and stops with a [`NoteError`] at the
//! first note whose sizes do not fit (after that there is no way to know
//! where the next note starts).

use core::fmt;

/// `NT_GNU_BUILD_ID`.
const NT_GNU_BUILD_ID: u32 = 3;

/// Size of a note header: three 32-bit words.
const HEADER_LEN: usize = 12;

/// A GNU build id: the bytes of an object's `NT_GNU_BUILD_ID` note
/// (usually 20, a SHA-1). Displays as lowercase hex, as `readelf -n` and
/// debuginfod print it.
///
/// ```
/// use latchtree::BuildId;
/// let id = BuildId::from_bytes(&[0x1f, 0x95, 0xd5]).unwrap();
/// assert_eq!(id.to_string(), "1f95d5");
/// assert_eq!(id.as_bytes(), &[0x1f, 0x95, 0xd5]);
/// assert_eq!(BuildId::from_bytes(&[]), None);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BuildId(Box<[u8]>);

impl BuildId {
    /// A build id of these bytes; `None` if there are none (an empty
    /// descriptor is a malformed note, not a build id).
    ///
    /// ```
    /// assert!(latchtree::BuildId::from_bytes(b"\x01").is_some());
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Option<BuildId> {
        (!bytes.is_empty()).then(|| BuildId(bytes.into()))
    }

    /// The raw bytes.
    ///
    /// ```
    /// let id = latchtree::BuildId::from_bytes(&[0xab, 0xcd]).unwrap();
    /// assert_eq!(id.as_bytes(), &[0xab, 0xcd]);
    /// ```
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BuildId({self})")
    }
}

/// What was wrong with a `PT_NOTE` segment. Offsets count from the start of
/// the segment.
///
/// ```
/// use latchtree::NoteError;
/// let e = NoteError::TruncatedHeader { offset: 16 };
/// assert_eq!(e.to_string(), "note at offset 16: fewer than 12 bytes left for its header");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NoteError {
    /// Fewer than 12 bytes were left for the header of the note at `offset`.
    TruncatedHeader {
        /// Where the note starts.
        offset: u64,
    },
    /// The name of the note at `offset` runs past the end of the segment.
    NameOutOfBounds {
        /// Where the note starts.
        offset: u64,
    },
    /// The descriptor of the note at `offset` runs past the end of the
    /// segment.
    DescriptorOutOfBounds {
        /// Where the note starts.
        offset: u64,
    },
    /// The segment's `p_align` is neither at most 4 nor 8 (the only note
    /// alignments ELF defines).
    UnsupportedAlignment {
        /// The segment's `p_align`.
        align: u64,
    },
    /// The build-id note at `offset` has an empty descriptor.
    EmptyBuildId {
        /// Where the note starts.
        offset: u64,
    },
    /// A second build-id note, at `offset`, differs from the first (the
    /// first is kept).
    ConflictingBuildIds {
        /// Where the second note starts.
        offset: u64,
    },
    /// The segment does not lie inside one of the object's readable
    /// `PT_LOAD` segments (or its bounds overflow), so it was not read.
    OutsideLoadSegments,
}

impl fmt::Display for NoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoteError::TruncatedHeader { offset } => write!(
                f,
                "note at offset {offset}: fewer than {HEADER_LEN} bytes left for its header"
            ),
            NoteError::NameOutOfBounds { offset } => {
                write!(f, "note at offset {offset}: its name runs past the segment")
            }
            NoteError::DescriptorOutOfBounds { offset } => write!(
                f,
                "note at offset {offset}: its descriptor runs past the segment"
            ),
            NoteError::UnsupportedAlignment { align } => {
                write!(f, "note segment alignment {align} is neither 4 nor 8")
            }
            NoteError::EmptyBuildId { offset } => {
                write!(f, "build-id note at offset {offset} is empty")
            }
            NoteError::ConflictingBuildIds { offset } => write!(
                f,
                "build-id note at offset {offset} differs from an earlier one"
            ),
            NoteError::OutsideLoadSegments => f.write_str(
                "note segment lies outside the object's readable PT_LOAD segments; not read",
            ),
        }
    }
}

impl std::error::Error for NoteError {}

/// What [`find_build_id`] found in one note segment.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct NoteScan<'a> {
    /// The descriptor of the first non-empty GNU build-id note.
    pub(crate) build_id: Option<&'a [u8]>,
    /// The first thing wrong with the segment, if any; notes before it
    /// were read.
    pub(crate) error: Option<NoteError>,
}

/// Finds the GNU build id in the note segment `notes`, whose `p_align` is
/// `align`. Reads only `notes`; never panics.
pub(crate) fn find_build_id(notes: &[u8], align: u64) -> NoteScan<'_> {
    let mut found = NoteScan::default();
    // binutils' rule: alignments below 4 mean 4.
    let align: usize = match align {
        0..=4 => 4,
        8 => 8,
        other => {
            found.error = Some(NoteError::UnsupportedAlignment { align: other });
            return found;
        }
    };
    let mut offset = 0;
    while offset < notes.len() {
        match next_note(notes, offset, align) {
            Ok((note, next)) => {
                if note.name == b"GNU\0" && note.kind == NT_GNU_BUILD_ID {
                    let error = match found.build_id {
                        _ if note.desc.is_empty() => Some(NoteError::EmptyBuildId {
                            offset: offset as u64,
                        }),
                        None => {
                            found.build_id = Some(note.desc);
                            None
                        }
                        Some(first) if first == note.desc => None,
                        Some(_) => Some(NoteError::ConflictingBuildIds {
                            offset: offset as u64,
                        }),
                    };
                    // Keep the first problem; the walk goes on.
                    found.error = found.error.or(error);
                }
                offset = next;
            }
            Err(error) => {
                found.error = found.error.or(Some(error));
                break;
            }
        }
    }
    found
}

/// One note, borrowed from its segment.
struct Note<'a> {
    name: &'a [u8],
    kind: u32,
    desc: &'a [u8],
}

/// The note at `offset` and where the next one starts (possibly past the
/// end when the last note's padding is cut off, which is harmless).
fn next_note(notes: &[u8], offset: usize, align: usize) -> Result<(Note<'_>, usize), NoteError> {
    let at = offset as u64;
    let word = |i: usize| -> Option<u32> {
        let start = offset.checked_add(4 * i)?;
        let bytes = notes.get(start..start.checked_add(4)?)?;
        Some(u32::from_ne_bytes(bytes.try_into().ok()?))
    };
    let (Some(namesz), Some(descsz), Some(kind)) = (word(0), word(1), word(2)) else {
        return Err(NoteError::TruncatedHeader { offset: at });
    };
    // `word(2)` was in bounds, so this does not overflow.
    let name_start = offset + HEADER_LEN;
    let name_out_of_bounds = NoteError::NameOutOfBounds { offset: at };
    let name_end = usize::try_from(namesz)
        .ok()
        .and_then(|n| name_start.checked_add(n))
        .ok_or(name_out_of_bounds)?;
    let name = notes.get(name_start..name_end).ok_or(name_out_of_bounds)?;
    let (desc, desc_end) = if descsz == 0 {
        (&[][..], name_end)
    } else {
        let out_of_bounds = NoteError::DescriptorOutOfBounds { offset: at };
        let start = align_up(name_end, align).ok_or(out_of_bounds)?;
        let end = usize::try_from(descsz)
            .ok()
            .and_then(|n| start.checked_add(n))
            .ok_or(out_of_bounds)?;
        (notes.get(start..end).ok_or(out_of_bounds)?, end)
    };
    let note = Note { name, kind, desc };
    Ok((note, align_up(desc_end, align).unwrap_or(usize::MAX)))
}

/// `n` rounded up to a multiple of `align` (a power of two); `None` on
/// overflow.
fn align_up(n: usize, align: usize) -> Option<usize> {
    Some(n.checked_add(align - 1)? & !(align - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds one note in native byte order, padded to `align`.
    fn note(name: &[u8], kind: u32, desc: &[u8], align: usize) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(name.len() as u32).to_ne_bytes());
        out.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(name);
        out.resize(out.len().next_multiple_of(align), 0);
        out.extend_from_slice(desc);
        out.resize(out.len().next_multiple_of(align), 0);
        out
    }

    const ID: &[u8] = &[
        0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
    ];

    #[test]
    fn finds_the_build_id_after_other_notes() {
        let mut seg = note(b"GNU\0", 1, &[0; 16], 4); // NT_GNU_ABI_TAG
        seg.extend(note(b"GNU\0", NT_GNU_BUILD_ID, ID, 4));
        assert_eq!(
            find_build_id(&seg, 4),
            NoteScan {
                build_id: Some(ID),
                error: None
            }
        );
    }

    #[test]
    fn eight_byte_aligned_segments_pad_to_eight() {
        // A 5-byte name: padded to 8 with align 8, to 8 with align 4 as well,
        // but a 3-byte descriptor before the next note pads differently.
        let mut seg = note(b"Xen\0\0", 5, &[1, 2, 3], 8);
        seg.extend(note(b"GNU\0", NT_GNU_BUILD_ID, ID, 8));
        assert_eq!(find_build_id(&seg, 8).build_id, Some(ID));
        assert_eq!(find_build_id(&seg, 8).error, None);
        // Read as 4-aligned, the second header lands in padding: garbage
        // sizes, reported, never a panic or an out-of-bounds read.
        let wrong = find_build_id(&seg, 4);
        assert_eq!(wrong.build_id, None);
        assert!(wrong.error.is_some());
    }

    #[test]
    fn other_owners_and_types_are_not_build_ids() {
        let mut seg = note(b"GNU\0", 4, ID, 4); // NT_GNU_GOLD_VERSION
        seg.extend(note(b"GNUX", NT_GNU_BUILD_ID, ID, 4));
        seg.extend(note(b"GN\0", NT_GNU_BUILD_ID, ID, 4));
        assert_eq!(find_build_id(&seg, 4), NoteScan::default());
    }

    #[test]
    fn truncated_header_is_reported() {
        let mut seg = note(b"GNU\0", NT_GNU_BUILD_ID, ID, 4);
        let first = seg.len() as u64;
        seg.extend_from_slice(&[4, 0, 0, 0, 20]);
        let found = find_build_id(&seg, 4);
        assert_eq!(found.build_id, Some(ID), "notes before the bad one count");
        assert_eq!(
            found.error,
            Some(NoteError::TruncatedHeader { offset: first })
        );
    }

    #[test]
    fn name_or_descriptor_past_the_end_is_reported() {
        let seg = note(b"GNU\0", NT_GNU_BUILD_ID, ID, 4);
        for cut in 1..seg.len() {
            let found = find_build_id(&seg[..cut], 4);
            assert_eq!(found.build_id, None, "cut at {cut}");
            let expected = match cut {
                ..12 => NoteError::TruncatedHeader { offset: 0 },
                12..16 => NoteError::NameOutOfBounds { offset: 0 },
                _ => NoteError::DescriptorOutOfBounds { offset: 0 },
            };
            assert_eq!(found.error, Some(expected), "cut at {cut}");
        }
    }

    #[test]
    fn huge_sizes_do_not_overflow() {
        for (namesz, descsz) in [
            (u32::MAX, 0),
            (4, u32::MAX),
            (u32::MAX - 2, u32::MAX),
            (0, u32::MAX - 3),
        ] {
            let mut seg = Vec::new();
            seg.extend_from_slice(&namesz.to_ne_bytes());
            seg.extend_from_slice(&descsz.to_ne_bytes());
            seg.extend_from_slice(&NT_GNU_BUILD_ID.to_ne_bytes());
            seg.extend_from_slice(b"GNU\0");
            let found = find_build_id(&seg, 4);
            assert_eq!(found.build_id, None);
            assert!(
                matches!(
                    found.error,
                    Some(
                        NoteError::NameOutOfBounds { .. } | NoteError::DescriptorOutOfBounds { .. }
                    )
                ),
                "{namesz} {descsz}: {:?}",
                found.error
            );
        }
    }

    #[test]
    fn empty_and_conflicting_build_ids_are_reported() {
        let empty = note(b"GNU\0", NT_GNU_BUILD_ID, &[], 4);
        let found = find_build_id(&empty, 4);
        assert_eq!(found.build_id, None);
        assert_eq!(found.error, Some(NoteError::EmptyBuildId { offset: 0 }));

        let mut seg = note(b"GNU\0", NT_GNU_BUILD_ID, ID, 4);
        let second = seg.len() as u64;
        seg.extend(note(b"GNU\0", NT_GNU_BUILD_ID, ID, 4)); // same: fine
        seg.extend(note(b"GNU\0", NT_GNU_BUILD_ID, &[7; 20], 4));
        let found = find_build_id(&seg, 4);
        assert_eq!(found.build_id, Some(ID), "the first one wins");
        assert_eq!(
            found.error,
            Some(NoteError::ConflictingBuildIds { offset: 2 * second })
        );
    }

    #[test]
    fn odd_alignments() {
        let seg = note(b"GNU\0", NT_GNU_BUILD_ID, ID, 4);
        for align in [0, 1, 2, 4] {
            assert_eq!(find_build_id(&seg, align).build_id, Some(ID), "{align}");
        }
        assert_eq!(
            find_build_id(&seg, 16).error,
            Some(NoteError::UnsupportedAlignment { align: 16 })
        );
        assert_eq!(find_build_id(&[], 4), NoteScan::default());
    }

    /// Every prefix and every single-byte corruption of a real-looking
    /// segment: no panic, and whatever is found is a slice of the input.
    #[test]
    fn corrupted_segments_never_panic() {
        let mut seg = note(b"GNU\0", 1, &[0; 16], 4);
        seg.extend(note(b"GNU\0", NT_GNU_BUILD_ID, ID, 4));
        for i in 0..seg.len() {
            for value in [0, 1, 3, 0x7f, 0xff] {
                let mut bad = seg.clone();
                bad[i] = value;
                for end in [bad.len(), i + 1, i / 2] {
                    let found = find_build_id(&bad[..end], 4);
                    if let Some(id) = found.build_id {
                        let range = bad.as_ptr_range();
                        assert!(range.contains(&id.as_ptr()) || id.is_empty());
                    }
                }
            }
        }
    }
}
