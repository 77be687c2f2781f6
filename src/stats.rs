//! Observability counters.

/// Counters for observability, read with `Relaxed` loads (approximate while
/// writes are running).
///
/// ```
/// let tree = latchtree::LatchTree::new();
/// tree.insert(1, 1);
/// let stats = tree.stats();
/// assert_eq!(stats.writes, 1);
/// assert_eq!(stats.read_retries, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Reads that found a writer had flipped the latch meanwhile and retried
    /// (including attempts that hit the descent cap in a torn copy).
    pub read_retries: u64,
    /// Write transactions (single writes or batches) that changed the tree.
    pub writes: u64,
}
