//! Module records.
//!
//! A module's **record** ([`Record`]) holds what the index knows of it: its
//! value (an `Arc<T>`, shared with [`Removed`](crate::Removed)), its
//! segments, base and tag. It is immutable once created: `set_value` makes a
//! new record. Records are heap boxes; pinned readers reach them from a range
//! node's `module` word or from the module table, and a record is retired
//! into the index's limbo only after it left both copies of both; once its
//! grace period passed (`crate::reclaim`) its memory, and its value's when
//! the index held the last reference, is recycled for a later record
//! (`garbage.rs`, `make_record`) or freed.

use super::types::Segments;
use alloc::boxed::Box;
use alloc::sync::Arc;
use core::ptr::NonNull;

/// See the module docs.
pub(crate) struct Record<T> {
    pub(crate) id: u64,
    pub(crate) value: Arc<T>,
    /// Sorted by start, non-overlapping, non-empty.
    pub(crate) segments: Segments,
    pub(crate) base: u64,
    pub(crate) tag: u64,
}

impl<T> Record<T> {
    /// A new boxed record, as a raw pointer (the index owns it from now on).
    pub(crate) fn boxed(
        id: u64,
        value: Arc<T>,
        segments: Segments,
        base: u64,
        tag: u64,
    ) -> NonNull<Record<T>> {
        NonNull::from(Box::leak(Box::new(Record {
            id,
            value,
            segments,
            base,
            tag,
        })))
    }
}
