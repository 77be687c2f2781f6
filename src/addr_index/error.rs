//! Errors of the address index.

use super::types::ModuleId;
use core::fmt;
use core::ops::Range;

/// Why a write of the index ([`insert`](crate::AddrIndex::insert),
/// [`insert_module`](crate::AddrIndex::insert_module),
/// [`set_value`](crate::AddrIndex::set_value)…) rejected its input. A
/// rejected call changes nothing.
///
/// ```
/// use latchtree::{AddrIndex, AddrIndexError};
/// let index = AddrIndex::new();
/// let a = index.insert(0x1000..0x2000, "a").unwrap();
/// let err = index.insert(0x1800..0x1900, "b").unwrap_err();
/// assert_eq!(
///     *err.error(),
///     AddrIndexError::Overlap { range: 0x1800..0x1900, existing: 0x1000..0x2000, module: a }
/// );
/// assert_eq!(err.into_value(), "b");
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
    /// [`set_value`](crate::AddrIndex::set_value) of an id that names no
    /// registered module (never issued, or already removed).
    UnknownModule(ModuleId),
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
            AddrIndexError::UnknownModule(id) => write!(f, "no module {id} is registered"),
        }
    }
}

impl core::error::Error for AddrIndexError {}

/// A rejected write and the value it was given, handed back untouched: the
/// index never drops a value it did not keep.
///
/// ```
/// use latchtree::{AddrIndex, AddrIndexError};
/// let index = AddrIndex::new();
/// let err = index.insert(5..5, String::from("code")).unwrap_err();
/// assert_eq!(err.to_string(), "empty range 0x5..0x5");
/// let (error, value) = err.into_parts();
/// assert_eq!((error, value.as_str()), (AddrIndexError::EmptyRange(5..5), "code"));
/// // Or keep only the error, for `?`:
/// let e: AddrIndexError = index.insert(9..1, String::new()).unwrap_err().into();
/// assert_eq!(e, AddrIndexError::InvertedRange(9..1));
/// ```
pub struct InsertError<T> {
    error: AddrIndexError,
    value: T,
}

impl<T> InsertError<T> {
    pub(crate) fn new(error: AddrIndexError, value: T) -> Self {
        InsertError { error, value }
    }

    /// Why the write was rejected (see the example on [`InsertError`]).
    pub fn error(&self) -> &AddrIndexError {
        &self.error
    }

    /// The value the write was given (see the example on [`InsertError`]).
    pub fn into_value(self) -> T {
        self.value
    }

    /// The error and the value (see the example on [`InsertError`]).
    pub fn into_parts(self) -> (AddrIndexError, T) {
        (self.error, self.value)
    }
}

impl<T> From<InsertError<T>> for AddrIndexError {
    fn from(e: InsertError<T>) -> Self {
        e.error
    }
}

/// Shows the error only: `T` need not be `Debug`.
impl<T> fmt::Debug for InsertError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InsertError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Display for InsertError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

/// Its `Display` is the error's, so it has no `source`.
impl<T> core::error::Error for InsertError<T> {}
