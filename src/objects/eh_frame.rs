//! Where an object's `.eh_frame` section is, from its `.eh_frame_hdr`: the
//! header's encoded `eh_frame_ptr` gives the start, and the records'
//! length words, walked to the zero terminator, give the end (an unwinder
//! needs both, and each consumer parsed the header by hand and guessed the
//! length), or why it cannot be had ([`EhFrameError`]). Pure over a
//! [`ObjectMemory`], so that odd headers are tested with synthetic bytes;
//! never panics.
//!
//! A refresh walks only the objects it indexes anew, while it holds each
//! one mapped (`hold.rs`), not every object inside the loader's callback:
//! the walk reads a word per record, and large libraries have thousands.

use super::segment::{LoadSegment, ObjectMemory};
use core::fmt;
use core::ops::Range;

/// `DW_EH_PE_omit`: no value.
const OMIT: u8 = 0xff;

/// Why an object has no [`eh_frame`](crate::ObjectInfo::eh_frame): what
/// [`ObjectInfo::try_eh_frame`](crate::ObjectInfo::try_eh_frame) returns,
/// and what a refresh reports as [`ProblemKind::NoEhFrame`](crate::ProblemKind::NoEhFrame).
///
/// ```
/// use latchtree::EhFrameError;
/// assert_eq!(
///     EhFrameError::UnsupportedVersion(2).to_string(),
///     ".eh_frame_hdr version 2 (only version 1 is decoded)"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EhFrameError {
    /// The object has no `.eh_frame_hdr` (no `PT_GNU_EH_FRAME` segment
    /// inside a readable loaded segment): it was linked without
    /// `--eh-frame-hdr`, or has no unwind tables.
    NoHeader,
    /// The header's version byte is not 1.
    UnsupportedVersion(u8),
    /// The header's `eh_frame_ptr` encoding is one this crate does not
    /// decode: omitted, indirect, aligned, or text- or function-relative
    /// (the linker never writes those).
    UnsupportedEncoding(u8),
    /// The header is shorter than its fields.
    TruncatedHeader,
    /// `eh_frame_ptr` points outside every readable loaded segment.
    OutsideLoadSegments {
        /// Where it points (run-time address).
        address: u64,
    },
    /// The object's `PT_LOAD` segments overlap (reported as
    /// [`ProblemKind::OverlappingSegments`](crate::ProblemKind::OverlappingSegments)):
    /// a merged segment may hold pages that are not readable, so nothing
    /// was read.
    OverlappingSegments,
    /// The object was unloaded before the refresh could read its header.
    Unloaded,
}

impl fmt::Display for EhFrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EhFrameError::NoHeader => f.write_str("no .eh_frame_hdr in a readable loaded segment"),
            EhFrameError::UnsupportedVersion(v) => {
                write!(f, ".eh_frame_hdr version {v} (only version 1 is decoded)")
            }
            EhFrameError::UnsupportedEncoding(e) => {
                write!(
                    f,
                    ".eh_frame_hdr's eh_frame_ptr encoding {e:#04x} is not decoded"
                )
            }
            EhFrameError::TruncatedHeader => {
                f.write_str(".eh_frame_hdr is shorter than its fields")
            }
            EhFrameError::OutsideLoadSegments { address } => write!(
                f,
                ".eh_frame_hdr points at {address:#x}, outside every readable loaded segment"
            ),
            EhFrameError::OverlappingSegments => {
                f.write_str("overlapping PT_LOAD segments: .eh_frame not read")
            }
            EhFrameError::Unloaded => f.write_str("unloaded before its .eh_frame could be read"),
        }
    }
}

impl std::error::Error for EhFrameError {}

/// The `.eh_frame` range that the `.eh_frame_hdr` at `hdr` points at, if
/// the header is version 1 with a direct (not indirect) pointer encoding,
/// and the section starts inside a readable segment of `segments`. The
/// walk stops at the terminator, at the end of that segment, or at a
/// record that would run past it (then the range ends at the last whole
/// record).
///
/// # Safety
/// `memory.read` must be sound for every range inside a readable segment
/// of `segments` while this runs (as for `parse_object`).
pub(crate) unsafe fn eh_frame_of(
    hdr: &Range<u64>,
    segments: &[LoadSegment],
    memory: &impl ObjectMemory,
) -> Result<Range<u64>, EhFrameError> {
    let readable = |r: &Range<u64>| {
        segments
            .iter()
            .find(|s| s.is_readable() && s.range.start <= r.start && r.end <= s.range.end)
    };
    // Reads `N` bytes at `addr` if they lie inside a readable segment.
    let read = |addr: u64, n: usize| -> Option<&[u8]> {
        let r = addr..addr.checked_add(n as u64)?;
        readable(&r)?;
        // SAFETY: `r` lies inside a readable segment (checked just above),
        // for which the caller makes `memory.read` sound.
        unsafe { memory.read(r.start, n) }.filter(|b| b.len() == n)
    };
    if hdr.end.checked_sub(hdr.start).is_none_or(|len| len < 4) {
        return Err(EhFrameError::TruncatedHeader);
    }
    let head = read(hdr.start, 4).ok_or(EhFrameError::TruncatedHeader)?;
    let (version, encoding) = (head[0], head[1]);
    if version != 1 {
        return Err(EhFrameError::UnsupportedVersion(version));
    }
    let field = hdr.start + 4;
    let in_header = |n: usize| {
        // The field must lie inside the header itself.
        (field.checked_add(n as u64)? <= hdr.end)
            .then(|| read(field, n))
            .flatten()
    };
    let start = decode_pointer(encoding, field, hdr.start, in_header)?;
    let outside = EhFrameError::OutsideLoadSegments { address: start };
    let first = start..start.checked_add(4).ok_or(outside)?;
    let segment = readable(&first).ok_or(outside)?.range.clone();
    // The records are read inside the segment the section starts in only
    // (an adjacent segment's bytes are not this section's).
    let word = |at: u64, n: usize| -> Option<&[u8]> {
        if at.checked_add(n as u64)? > segment.end {
            return None;
        }
        read(at, n)
    };
    let mut at = start;
    while let Some(bytes) = word(at, 4) {
        let Ok(bytes) = <[u8; 4]>::try_from(bytes) else {
            break;
        };
        let next = match u32::from_ne_bytes(bytes) {
            0 => {
                at += 4; // the terminator belongs to the section
                break;
            }
            0xffff_ffff => word(at + 4, 8)
                .and_then(|long| long.try_into().ok())
                .and_then(|long| at.checked_add(12)?.checked_add(u64::from_ne_bytes(long))),
            n => at.checked_add(4 + u64::from(n)),
        };
        match next {
            Some(next) if next <= segment.end => at = next,
            _ => break,
        }
    }
    Ok(start..at)
}

/// Decodes a `DW_EH_PE_*` encoded pointer whose bytes `bytes(n)` gives, at
/// address `field`, with `data` as the data-relative base (the header's
/// start). Indirect, aligned, text- or function-relative encodings (which
/// `.eh_frame_hdr`'s `eh_frame_ptr` never uses) are unsupported; bytes that
/// cannot be read, a truncated header; a value that does not fit, outside
/// every segment.
fn decode_pointer<'m>(
    encoding: u8,
    field: u64,
    data: u64,
    bytes: impl Fn(usize) -> Option<&'m [u8]>,
) -> Result<u64, EhFrameError> {
    let unsupported = Err(EhFrameError::UnsupportedEncoding(encoding));
    let base: i128 = match encoding & 0xf0 {
        _ if encoding == OMIT => return unsupported,
        0x00 => 0,
        0x10 => field.into(),
        0x30 => data.into(),
        _ => return unsupported,
    };
    let value: i128 = match encoding & 0x0f {
        0x00 | 0x04 => u64::from_ne_bytes(array(bytes(8))?).into(),
        0x02 => u16::from_ne_bytes(array(bytes(2))?).into(),
        0x03 => u32::from_ne_bytes(array(bytes(4))?).into(),
        0x0a => i16::from_ne_bytes(array(bytes(2))?).into(),
        0x0b => i32::from_ne_bytes(array(bytes(4))?).into(),
        0x0c => i64::from_ne_bytes(array(bytes(8))?).into(),
        _ => return unsupported,
    };
    let sum = base + value;
    u64::try_from(sum).map_err(|_| EhFrameError::OutsideLoadSegments {
        address: sum as u64,
    })
}

/// `N` bytes, or a truncated header.
fn array<const N: usize>(bytes: Option<&[u8]>) -> Result<[u8; N], EhFrameError> {
    (bytes.and_then(|b| b.try_into().ok())).ok_or(EhFrameError::TruncatedHeader)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory made of one buffer at a fixed address.
    struct Bytes {
        at: u64,
        bytes: Vec<u8>,
    }

    impl ObjectMemory for Bytes {
        unsafe fn read(&self, addr: u64, len: usize) -> Option<&[u8]> {
            let from = usize::try_from(addr.checked_sub(self.at)?).ok()?;
            self.bytes.get(from..from.checked_add(len)?)
        }
    }

    const AT: u64 = 0x1000;

    fn of(
        hdr: &Range<u64>,
        segments: &[LoadSegment],
        m: &Bytes,
    ) -> Result<Range<u64>, EhFrameError> {
        // SAFETY: `Bytes::read` is sound for any range (it checks bounds).
        unsafe { eh_frame_of(hdr, segments, m) }
    }

    fn segment(len: u64) -> Vec<LoadSegment> {
        vec![LoadSegment {
            range: AT..AT + len,
            flags: 4, // PF_R
            file_offset: 0,
            file_size: len,
        }]
    }

    /// A header at `AT` (pcrel sdata4 pointer to `AT + 0x20`), then
    /// `.eh_frame` at `AT + 0x20`: a 12-byte record, a 20-byte one, and
    /// `tail`.
    fn image(tail: &[u8]) -> Bytes {
        let mut b = vec![1, 0x1b, 0x03, 0x3b];
        b.extend_from_slice(&(0x20i32 - 4).to_ne_bytes());
        b.resize(0x20, 0);
        for len in [12u32, 20] {
            b.extend_from_slice(&len.to_ne_bytes());
            b.extend(core::iter::repeat_n(0xaa, len as usize));
        }
        b.extend_from_slice(tail);
        Bytes { at: AT, bytes: b }
    }

    #[test]
    fn walks_records_to_the_terminator() {
        let m = image(&[0, 0, 0, 0, 0xee, 0xee]);
        let len = m.bytes.len() as u64;
        let r = of(&(AT..AT + 8), &segment(len), &m);
        assert_eq!(r, Ok(AT + 0x20..AT + 0x20 + 16 + 24 + 4));
    }

    #[test]
    fn stops_at_the_segment_end_without_a_terminator() {
        // A record claiming more bytes than the segment holds ends the walk
        // before it.
        let m = image(&400u32.to_ne_bytes());
        let len = m.bytes.len() as u64;
        let r = of(&(AT..AT + 8), &segment(len), &m);
        assert_eq!(r, Ok(AT + 0x20..AT + 0x20 + 40));
    }

    /// A record length that runs past the end of the address space ends
    /// the walk (`at + 4 + n` could overflow: a panic in debug builds).
    #[test]
    fn a_length_past_the_address_space_ends_the_walk() {
        let at = u64::MAX - 0x3f;
        let mut m = image(&[]);
        m.at = at;
        m.bytes.truncate(0x20);
        m.bytes.extend_from_slice(&0xffff_fff0u32.to_ne_bytes());
        m.bytes.resize(0x40, 0);
        let seg = vec![LoadSegment {
            range: at..u64::MAX,
            flags: 4,
            file_offset: 0,
            file_size: 0x3f,
        }];
        assert_eq!(of(&(at..at + 8), &seg, &m), Ok(at + 0x20..at + 0x20));
    }

    #[test]
    fn other_encodings_and_odd_headers() {
        let mut m = image(&[0; 4]);
        let len = m.bytes.len() as u64;
        let seg = segment(len);
        // datarel udata4: relative to the header's start.
        m.bytes[1] = 0x33;
        m.bytes[4..8].copy_from_slice(&0x20u32.to_ne_bytes());
        assert_eq!(of(&(AT..AT + 8), &seg, &m).map(|r| r.start), Ok(AT + 0x20));
        // absolute udata8.
        m.bytes[1] = 0x04;
        m.bytes[4..12].copy_from_slice(&(AT + 0x20).to_ne_bytes());
        assert_eq!(of(&(AT..AT + 12), &seg, &m).map(|r| r.start), Ok(AT + 0x20));
        // Each odd header says why.
        for (byte, value, why) in [
            (0, 2u8, EhFrameError::UnsupportedVersion(2)),
            (1, 0xff, EhFrameError::UnsupportedEncoding(0xff)),
            (1, 0x9b, EhFrameError::UnsupportedEncoding(0x9b)),
            (1, 0x0f, EhFrameError::UnsupportedEncoding(0x0f)),
        ] {
            let mut odd = image(&[0; 4]);
            odd.bytes[byte] = value;
            assert_eq!(
                of(&(AT..AT + 8), &seg, &odd),
                Err(why),
                "{byte}: {value:#x}"
            );
        }
        // A pointer outside every readable segment, a header too short (or
        // too short for its pointer's encoding).
        let mut far = image(&[0; 4]);
        far.bytes[4..8].copy_from_slice(&0x10_0000i32.to_ne_bytes());
        let address = AT + 4 + 0x10_0000;
        let outside = EhFrameError::OutsideLoadSegments { address };
        assert_eq!(of(&(AT..AT + 8), &seg, &far), Err(outside));
        assert_eq!(
            of(&(AT..AT + 3), &seg, &m),
            Err(EhFrameError::TruncatedHeader)
        );
        m.bytes[1] = 0x04; // udata8 needs 12 bytes
        assert_eq!(
            of(&(AT..AT + 8), &seg, &m),
            Err(EhFrameError::TruncatedHeader)
        );
    }
}
