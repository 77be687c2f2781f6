//! Errors of the address index.

use super::ModuleId;
use core::fmt;
use core::ops::Range;

/// Why [`AddrIndex::insert`](crate::AddrIndex::insert) or
/// [`insert_module`](crate::AddrIndex::insert_module) rejected its input. A
/// rejected call changes nothing.
///
/// ```
/// use latchtree::{AddrIndex, AddrIndexError};
/// let index = AddrIndex::new();
/// let a = index.insert(0x1000..0x2000, "a").unwrap();
/// assert_eq!(
///     index.insert(0x1800..0x1900, "b"),
///     Err(AddrIndexError::Overlap { range: 0x1800..0x1900, existing: 0x1000..0x2000, module: a })
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddrIndexError {
    /// `start == end`: the range holds no address.
    EmptyRange(Range<u64>),
    /// `start > end`.
    InvertedRange(Range<u64>),
    /// `insert_module` was given no range at all.
    NoRanges,
    /// The range overlaps one already registered by `module` (the lowest
    /// such range is reported; for several new ranges, the lowest new range
    /// that overlaps anything).
    Overlap {
        /// The rejected range.
        range: Range<u64>,
        /// The registered range it overlaps.
        existing: Range<u64>,
        /// The module that owns `existing`.
        module: ModuleId,
    },
    /// Two ranges of the same `insert_module` call overlap each other.
    SelfOverlap(Range<u64>, Range<u64>),
}

impl fmt::Display for AddrIndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrIndexError::EmptyRange(r) => write!(f, "empty range {:#x}..{:#x}", r.start, r.end),
            AddrIndexError::InvertedRange(r) => {
                write!(
                    f,
                    "inverted range {:#x}..{:#x} (start > end)",
                    r.start, r.end
                )
            }
            AddrIndexError::NoRanges => f.write_str("a module needs at least one range"),
            AddrIndexError::Overlap {
                range,
                existing,
                module,
            } => write!(
                f,
                "range {:#x}..{:#x} overlaps {:#x}..{:#x} of module {module}",
                range.start, range.end, existing.start, existing.end
            ),
            AddrIndexError::SelfOverlap(a, b) => write!(
                f,
                "ranges {:#x}..{:#x} and {:#x}..{:#x} of one module overlap",
                a.start, a.end, b.start, b.end
            ),
        }
    }
}

impl std::error::Error for AddrIndexError {}
