//! Where an object's `.eh_frame` section is, from its `.eh_frame_hdr`: the
//! header's encoded `eh_frame_ptr` gives the start, and the records'
//! length words, walked to the zero terminator, give the end (issue 25: an
//! unwinder needs both, and each consumer parsed the header by hand and
//! guessed the length). Pure over a [`ObjectMemory`], so that odd headers
//! are tested with synthetic bytes; never panics.

use super::segment::{LoadSegment, ObjectMemory};
use core::ops::Range;

/// `DW_EH_PE_omit`: no value.
const OMIT: u8 = 0xff;

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
) -> Option<Range<u64>> {
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
    if hdr.end.checked_sub(hdr.start)? < 4 {
        return None;
    }
    let head = read(hdr.start, 4)?;
    let (version, encoding) = (head[0], head[1]);
    if version != 1 || encoding == OMIT {
        return None;
    }
    let field = hdr.start + 4;
    let start = decode_pointer(encoding, field, hdr.start, |n| read(field, n))?;
    let segment = readable(&(start..start.checked_add(4)?))?.range.clone();
    // The records are read inside the segment the section starts in only
    // (review: an adjacent segment's bytes are not this section's).
    let word = |at: u64, n: usize| -> Option<&[u8]> {
        if at.checked_add(n as u64)? > segment.end {
            return None;
        }
        read(at, n)
    };
    let mut at = start;
    while let Some(bytes) = word(at, 4) {
        let length = u32::from_ne_bytes(bytes.try_into().ok()?);
        let next = match length {
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
    Some(start..at)
}

/// Decodes a `DW_EH_PE_*` encoded pointer whose bytes `bytes(n)` gives, at
/// address `field`, with `data` as the data-relative base (the header's
/// start). `None` for indirect, aligned, text- or function-relative
/// encodings (which `.eh_frame_hdr`'s `eh_frame_ptr` never uses) and for
/// values that do not fit.
fn decode_pointer<'m>(
    encoding: u8,
    field: u64,
    data: u64,
    bytes: impl Fn(usize) -> Option<&'m [u8]>,
) -> Option<u64> {
    let value: i128 = match encoding & 0x0f {
        0x00 | 0x04 => u64::from_ne_bytes(bytes(8)?.try_into().ok()?).into(),
        0x02 => u16::from_ne_bytes(bytes(2)?.try_into().ok()?).into(),
        0x03 => u32::from_ne_bytes(bytes(4)?.try_into().ok()?).into(),
        0x0a => i16::from_ne_bytes(bytes(2)?.try_into().ok()?).into(),
        0x0b => i32::from_ne_bytes(bytes(4)?.try_into().ok()?).into(),
        0x0c => i64::from_ne_bytes(bytes(8)?.try_into().ok()?).into(),
        _ => return None,
    };
    let base: i128 = match encoding & 0xf0 {
        0x00 => 0,
        0x10 => field.into(),
        0x30 => data.into(),
        _ => return None,
    };
    u64::try_from(base + value).ok()
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

    fn of(hdr: &Range<u64>, segments: &[LoadSegment], m: &Bytes) -> Option<Range<u64>> {
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
        assert_eq!(r, Some(AT + 0x20..AT + 0x20 + 16 + 24 + 4));
    }

    #[test]
    fn stops_at_the_segment_end_without_a_terminator() {
        // A record claiming more bytes than the segment holds ends the walk
        // before it.
        let m = image(&400u32.to_ne_bytes());
        let len = m.bytes.len() as u64;
        let r = of(&(AT..AT + 8), &segment(len), &m);
        assert_eq!(r, Some(AT + 0x20..AT + 0x20 + 40));
    }

    /// A record length that runs past the end of the address space ends
    /// the walk (review: `at + 4 + n` overflowed, a panic in debug builds).
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
        assert_eq!(of(&(at..at + 8), &seg, &m), Some(at + 0x20..at + 0x20));
    }

    #[test]
    fn other_encodings_and_odd_headers() {
        let mut m = image(&[0; 4]);
        let len = m.bytes.len() as u64;
        let seg = segment(len);
        // datarel udata4: relative to the header's start.
        m.bytes[1] = 0x33;
        m.bytes[4..8].copy_from_slice(&0x20u32.to_ne_bytes());
        assert_eq!(
            of(&(AT..AT + 8), &seg, &m).map(|r| r.start),
            Some(AT + 0x20)
        );
        // absolute udata8.
        m.bytes[1] = 0x04;
        m.bytes[4..12].copy_from_slice(&(AT + 0x20).to_ne_bytes());
        assert_eq!(
            of(&(AT..AT + 12), &seg, &m).map(|r| r.start),
            Some(AT + 0x20)
        );
        for (byte, value) in [(0, 2u8), (1, 0xff), (1, 0x9b), (1, 0x0f)] {
            let mut odd = image(&[0; 4]);
            odd.bytes[byte] = value;
            assert_eq!(of(&(AT..AT + 8), &seg, &odd), None, "{byte}: {value:#x}");
        }
        // A pointer outside every readable segment, a header too short.
        let mut far = image(&[0; 4]);
        far.bytes[4..8].copy_from_slice(&0x10_0000i32.to_ne_bytes());
        assert_eq!(of(&(AT..AT + 8), &seg, &far), None);
        assert_eq!(of(&(AT..AT + 3), &seg, &m), None);
    }
}
