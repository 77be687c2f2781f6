//! Memory back through `&self`: an index grown to many ranges, with all but
//! 1 % removed through shared references only (writes, then
//! `synchronize`), gives its node memory back while lookups go on
//! answering: a compaction moves the live ranges out of sparse chunks and
//! the emptied chunks' pages go back to the OS (`madvise`). Before, it held
//! 114× a fresh index of the rest, for good.
//!
//! Asserted: the nodes left resident take at most twice the heap of a
//! fresh index of the rest (all of it: nodes, records, values, tables), and
//! the process's resident memory (after `malloc_trim`) fell by at least
//! most of what was purged. Printed besides: what the whole index still
//! holds. Part of that is the allocator's and not the index's to give back:
//! each module's record and value are heap allocations made in insertion
//! order, and the survivors of a 99 % removal pin a page each that
//! `malloc_trim` cannot return (a probe of as many allocations of those
//! sizes, freed in the same pattern, is printed beside).
//!
//! One `#[test]` on purpose: RSS and the allocator's count are
//! process-wide. Each growth order runs after the ones before it in the
//! same process, so the allocator's state they left moves the RSS figures
//! printed for the later ones (not the node figures asserted): for one
//! order's figures alone, name it in `MEMORY_BACK_ORDERS` (`random`,
//! `ascending`, `descending`, comma-separated; all three by default):
//!
//! ```text
//! MEMORY_BACK_ORDERS=random cargo test --release --all-features --test addr_index_memory_back -- --nocapture
//! ```
//!
//! Linux only (`/proc/self/statm`, `malloc_trim`); not under Miri (no
//! `madvise`: the memory is kept there, as without `std`).

#![cfg(all(feature = "std", target_os = "linux", target_env = "gnu", not(miri)))]

use latchtree::AddrIndex;
use std::collections::HashSet;
#[path = "common/live_bytes.rs"]
mod live_bytes;
use live_bytes::live;

/// Resident bytes of this process once glibc gave back what it holds free.
fn trimmed_rss() -> usize {
    // SAFETY: malloc_trim has no preconditions.
    unsafe { libc::malloc_trim(0) };
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize
}

/// Random-order keys (SplitMix64).
fn keys(n: usize) -> Vec<u64> {
    let mut s = 0x6d65_6d00_u64;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) >> 1
        })
        .collect()
}

/// What `n` pairs of allocations the size of a module record and of an
/// `Arc<u64>`, made in turn, hold resident once all but every 100th pair
/// are freed and the heap is trimmed.
fn fragmentation_probe(n: usize) -> usize {
    let before = trimmed_rss();
    let mut all: Vec<(Box<[u64; 10]>, std::sync::Arc<u64>)> = (0..n as u64)
        .map(|i| (Box::new([i; 10]), std::sync::Arc::new(i)))
        .collect();
    let kept: Vec<_> = all.drain(..).step_by(100).collect();
    drop(all);
    let held = trimmed_rss().saturating_sub(before);
    drop(kept);
    held
}

#[test]
fn removing_99_percent_through_shared_references_gives_node_memory_back() {
    let n = 100_000;
    // The epoch's thread-local state, which stays.
    latchtree::pin().flush();
    let keys = keys(n);
    let kept: HashSet<u64> = keys.iter().copied().step_by(100).collect();

    let start = live();
    let fresh = AddrIndex::new();
    for &k in &kept {
        fresh.insert(k * 2..k * 2 + 1, k).unwrap();
    }
    let fresh_heap = (live() - start) as usize;
    let fresh_nodes = fresh.node_memory();
    drop(fresh);
    let probe = fragmentation_probe(n);

    let orders = std::env::var("MEMORY_BACK_ORDERS")
        .unwrap_or_else(|_| "random,ascending,descending".into());
    for order in orders.split(',') {
        let mut keys = keys.clone();
        match order {
            "ascending" => keys.sort_unstable(),
            "descending" => keys.sort_unstable_by(|a, b| b.cmp(a)),
            "random" => {}
            other => panic!("MEMORY_BACK_ORDERS: unknown order {other:?}"),
        }
        let mut ids = Vec::with_capacity(n);
        let before = trimmed_rss();
        let index = AddrIndex::new();
        ids.extend(
            keys.iter()
                .map(|&k| (k, index.insert(k * 2..k * 2 + 1, k).unwrap())),
        );
        let grown = trimmed_rss() - before;
        let grown_nodes = index.node_memory();
        for &(k, id) in &ids {
            if !kept.contains(&k) {
                drop(index.remove(id));
            }
        }
        drop(ids);
        index.synchronize();
        let held = trimmed_rss().saturating_sub(before);
        let nodes = index.node_memory();
        eprintln!(
            "{order}: grown {} KiB resident ({} KiB of nodes); after removing 99 % and \
             synchronize {} KiB ({} KiB of nodes resident, {} KiB allocated); a fresh index \
             of the rest: {} KiB of heap ({} KiB of nodes); the allocator's probe keeps {} KiB",
            grown >> 10,
            grown_nodes.resident_node_bytes >> 10,
            held >> 10,
            nodes.resident_node_bytes >> 10,
            nodes.node_bytes >> 10,
            fresh_heap >> 10,
            fresh_nodes.node_bytes >> 10,
            probe >> 10,
        );
        assert!(
            nodes.resident_node_bytes <= 2 * fresh_heap,
            "{order}: {} resident node bytes, a fresh index has {fresh_heap} bytes of heap",
            nodes.resident_node_bytes,
        );
        let purged = grown_nodes.resident_node_bytes - nodes.resident_node_bytes;
        assert!(
            grown - held >= purged / 2,
            "{order}: RSS fell by {} bytes, {purged} bytes of nodes were purged",
            grown - held
        );
        for &k in &keys {
            assert_eq!(index.lookup(k * 2).is_some(), kept.contains(&k), "{k}");
        }
        index.check_invariants().unwrap();
        assert_eq!(index.range_count(), kept.len());
    }
}
