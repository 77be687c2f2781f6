//! Type-stable storage for the address index's range nodes.
//!
//! Node memory is allocated in chunks that are never returned to the
//! allocator while the index lives; a node that left both copies goes on a
//! free list and is reused by a later write. This is what lets
//! [`AddrIndex::lookup`](crate::AddrIndex::lookup) run without pinning an
//! epoch (and so from a signal handler):
//!
//! * **It can never fault.** Every pointer a reader can load from the tree
//!   (from a root or a link, in any interleaving) is null or points into a
//!   chunk, and chunks outlive every `&AddrIndex`.
//! * **It can never race on plain memory.** Every field a reader reads
//!   (`start`, `end`, `id`, `base`, `tag`, `flags`, `module`, the links and
//!   copy 0's cached child keys) is an atomic, so a reader
//!   standing on a node that is being recycled reads garbage, not UB.
//! * **It can never return garbage.** A node's fields are rewritten only
//!   after it left both copies, and only by a transaction that has already
//!   flipped the latch on the rewriting thread (`Txn::begin`), so a flip's
//!   `Release` fence is *sequenced before* every rewrite store. A reader that
//!   could still stand on the node loaded `seq` before that flip (a reader
//!   that loaded it later cannot reach the node), so if it reads a rewritten
//!   value, the fence synchronizes with its `Acquire` fence and its re-check
//!   fails (case 2 in `raw::latch`). (A flip by an earlier writer on another
//!   thread would not do: fence synchronization needs the fence sequenced
//!   before the store the reader reads.) A reader that validates read only
//!   values of the version it started in, in which the node was linked with
//!   those very fields.
//! * **It can never loop.** Torn shapes are cut off by the descent cap.
//!
//! A module's `base` and `tag` are copied into each of its range nodes, so
//! that the signal-safe path reads them under the same validation as the
//! range. They are never rewritten in a linked node: `set_value` puts fresh
//! nodes in place of the old ones (`Txn::replace`), so a reader sees the old
//! node or the new one, each whole.
//!
//! Once the slab holds 2 MiB of nodes, it grows by chunks of exactly 2 MiB,
//! 2 MiB-aligned, which the kernel can back with one transparent huge page
//! each (one TLB entry for 16 384 nodes instead of 512 entries): with the
//! `huge-pages` feature on Linux, the slab asks for that (`madvise`). Each
//! such chunk starts its nodes at a different offset (`chunk_colour`), so
//! that nodes of equal rank in successive chunks do not share cache sets.
//! Below
//! that size, chunks grow from 16 to 1024 nodes.
//!
//! The module value `T` is *not* in this storage: it lives in the module's
//! record (`record.rs`), which is reclaimed through the epoch, never inside a
//! reader.

use super::record::Record;
use super::types::{ModuleId, RawHit};
use crate::raw::{Height, KidKeys, Kids, LinkRef, Linked, Links, Parent};
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use alloc::alloc::Layout;
use alloc::vec;
use alloc::vec::Vec;
use core::ptr::{self, NonNull};

/// A huge page's size (x86-64 and aarch64 with 4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;

/// One address range. What a descent of copy 0 (the copy readers use while
/// no write is running) reads fills the first cache line: its child links,
/// its children's starts (`KidKeys`, so that a step needs one load, not a
/// link and then a key behind it), the bounds, the id and the base. The
/// tag and the flags (read once per hit), copy 0's parent word and the
/// subtree's height (the writer's, and the parent the cursors'), the record
/// (read by pinned readers and sections) and copy 1's links are on the
/// second.
#[repr(C, align(64))]
pub(crate) struct RangeNode<M> {
    hot: Kids<RangeNode<M>>,
    hot_keys: KidKeys,
    pub(crate) start: AtomicU64,
    pub(crate) end: AtomicU64,
    pub(crate) id: AtomicU64,
    pub(crate) base: AtomicU64,
    pub(crate) tag: AtomicU64,
    /// The segment's flags.
    pub(crate) flags: AtomicU32,
    /// The index of the chunk the node lies in: written whenever the node
    /// is handed out (a purge may have zeroed it since), read by the writer
    /// only, when the node comes back (`Slab::recycle`).
    chunk: AtomicU32,
    hot_parent: Parent<RangeNode<M>>,
    height: Height,
    /// The module record, valid while the node is linked; dereferenced only
    /// by pinned readers after validation.
    pub(crate) module: AtomicPtr<M>,
    cold: Links<RangeNode<M>>,
}

// Two lines, no more.
// (Loom's atomics are larger than a word.)
#[cfg(not(latchtree_loom))]
const _: () = assert!(core::mem::size_of::<RangeNode<()>>() <= 128);

// What a descent of copy 0 reads, and a hit's bounds, id and base, fill
// exactly the first line (on 64-bit targets, where a link is a word).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::offset_of!(RangeNode<()>, tag) == 64);

/// A node of an `AddrIndex<T>`: its module records are `Record<T>`s.
pub(super) type Node<T> = RangeNode<Record<T>>;

/// What a node holds besides its links: its range's fields (the plain
/// record a lookup returns) and its module record. What [`Slab::alloc`]
/// writes and [`RangeNode::fields`] reads.
#[derive(Debug)]
pub(crate) struct Fields<M> {
    pub(crate) hit: RawHit,
    pub(crate) module: *mut M,
}

// SAFETY: copy 0 is always `hot` with `hot_parent` and copy 1 always
// `cold`: distinct words.
unsafe impl<M> Linked for RangeNode<M> {
    #[inline(always)]
    fn links(&self, copy: usize) -> LinkRef<'_, Self> {
        if copy == 0 {
            LinkRef::with_keys(self, &self.hot, &self.hot_parent, &self.hot_keys)
        } else {
            self.cold.get()
        }
    }

    const COPY0_KID_KEYS: bool = true;
    const HAS_HEIGHT: bool = true;

    #[inline(always)]
    fn height(&self) -> Option<&Height> {
        Some(&self.height)
    }

    /// The start: it never changes while the node is in a copy or a shadow
    /// (`Slab::fill` writes it into a free node; `layout.rs` rewrites a
    /// shadow node's fields with the start it was found by).
    #[inline(always)]
    fn search_key(&self) -> u64 {
        // Relaxed: read by the writer, which wrote it (writer lock).
        self.start.load(Ordering::Relaxed)
    }
}

impl<M> RangeNode<M> {
    fn new() -> Self {
        RangeNode {
            hot: Kids::new(),
            hot_keys: KidKeys::new(),
            start: AtomicU64::new(0),
            end: AtomicU64::new(0),
            id: AtomicU64::new(0),
            base: AtomicU64::new(0),
            tag: AtomicU64::new(0),
            flags: AtomicU32::new(0),
            chunk: AtomicU32::new(0),
            hot_parent: Parent::new(),
            height: Height::new(),
            module: AtomicPtr::new(ptr::null_mut()),
            cold: Links::new(),
        }
    }
}

// Manual impls: a derive would require `M: Copy`.
impl<M> Clone for Fields<M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<M> Copy for Fields<M> {}

impl<M> RangeNode<M> {
    /// The range's fields. `Relaxed`: a reader reached the node through an
    /// `Acquire` link load and validates what it copied out (the latch's
    /// re-check catches torn values); the writer reads stores of this or an
    /// earlier write, ordered by the writer lock.
    #[inline(always)]
    pub(crate) fn hit(&self) -> RawHit {
        RawHit {
            start: self.start.load(Ordering::Relaxed),
            end: self.end.load(Ordering::Relaxed),
            id: ModuleId(self.id.load(Ordering::Relaxed)),
            base: self.base.load(Ordering::Relaxed),
            tag: self.tag.load(Ordering::Relaxed),
            flags: self.flags.load(Ordering::Relaxed),
        }
    }

    /// The range's fields and the module record (see [`hit`](Self::hit)).
    #[inline(always)]
    pub(crate) fn fields(&self) -> Fields<M> {
        Fields {
            hit: self.hit(),
            // Relaxed: as in `hit`.
            module: self.module.load(Ordering::Relaxed),
        }
    }
}

/// Chunks of nodes and which of them are free; owned by the writer (under
/// its lock).
///
/// Free nodes are handed out oldest chunk first (the small ones), lowest
/// node first, whether the chunk is purged or not, so that the live nodes
/// gather in the oldest chunks and the newest ones empty as the tree
/// shrinks or moves (a migration takes the first free nodes for the tree
/// it builds). A chunk whose every node is free is *purged* when the slab
/// has other free nodes to spare (see [`Slab::purge_emptied`]), or when
/// asked ([`Slab::purge_free_chunks`]):
/// its pages go back to the OS (`purge_pages`) while its addresses stay
/// mapped, so a reader still standing on one of its nodes reads old words
/// or zeros, never faults, and fails validation. Its nodes stay free: when
/// one is handed out again its pages fault back in, and it is rewritten
/// (through atomics, like any recycled node) before it is linked.
pub(crate) struct Slab<M> {
    /// Every chunk, oldest first (a chunk's index never changes).
    chunks: Vec<Chunk>,
    /// Each chunk's first node's address and index, lowest address first.
    by_addr: Vec<(usize, usize)>,
    /// Bit `c`: chunk `c` has a free node.
    has_free: Vec<u64>,
    /// Free nodes in all chunks, and in purged ones.
    free: usize,
    purged_free: usize,
    /// Nodes in purged chunks.
    purged: usize,
    /// A resident chunk was left wholly free since the last
    /// [`purge_emptied`](Slab::purge_emptied).
    emptied: bool,
    /// Nodes in all chunks.
    nodes: usize,
    /// 2 MiB chunks allocated so far (see [`chunk_colour`]).
    huge_chunks: usize,
    _nodes: core::marker::PhantomData<RangeNode<M>>,
}

/// One allocation of nodes, freed with the layout it was allocated with.
struct Chunk {
    base: NonNull<u8>,
    layout: Layout,
    /// Where its nodes start (`chunk_colour` bytes in), and how many.
    first: usize,
    len: usize,
    /// Bit `i`: node `i` is free (never handed out, or recycled).
    free_bits: Vec<u64>,
    /// Free nodes, and the lowest word of `free_bits` that may be non-zero.
    free: usize,
    hint: usize,
    /// Nodes `touched..len` were never handed out, nor written.
    touched: usize,
    /// Its pages are the OS's again (`purge_pages`), until a node of it is
    /// handed out.
    purged: bool,
    /// The OS would not purge it (no whole page inside, or `madvise`
    /// failed): not tried again.
    unpurgeable: bool,
}

impl Chunk {
    /// The address of its first node.
    fn first_addr(&self) -> usize {
        self.base.as_ptr().addr() + self.first
    }

    /// The lowest word of `free_bits` that holds a free node (one does).
    #[inline]
    fn lowest_free_word(&mut self) -> usize {
        let mut w = self.hint;
        while self.free_bits[w] == 0 {
            w += 1;
        }
        self.hint = w;
        w
    }
}

/// How far into its chunk the `k`-th 2 MiB chunk puts its first node: `k
/// mod 16` steps of 4 KiB + 128 B. Without it, ascending inserts (rank
/// about address order) put nodes of equal rank at equal offsets in
/// successive chunks, and the tree's top levels, which readers touch on
/// every lookup, fought over the same cache sets; the page step spreads
/// them over TLB-friendly pages too. Costs under 3 % of a chunk on average.
fn chunk_colour(k: usize) -> usize {
    (k % 16) * (4096 + 128)
}

impl<M> core::fmt::Debug for Slab<M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Slab")
            .field("chunks", &self.chunks.len())
            .field("free", &self.free)
            .field("purged_free", &self.purged_free)
            .finish()
    }
}

impl<M> Slab<M> {
    pub(crate) const fn new() -> Self {
        Slab {
            chunks: Vec::new(),
            by_addr: Vec::new(),
            has_free: Vec::new(),
            free: 0,
            purged_free: 0,
            purged: 0,
            emptied: false,
            nodes: 0,
            huge_chunks: 0,
            _nodes: core::marker::PhantomData,
        }
    }

    /// A node holding `f`, not in any copy.
    ///
    /// Call only inside a transaction that has flipped the latch on this
    /// thread (`Txn::begin`): the stores below may be read by stale readers
    /// still standing on a recycled node, which must then fail validation
    /// (see the module docs).
    pub(crate) fn alloc(&mut self, f: Fields<M>) -> NonNull<RangeNode<M>> {
        let n = match self.pop_free() {
            Some(n) => n,
            None => self.alloc_chunk(),
        };
        // SAFETY: a free node of this slab.
        unsafe { self.fill(n, f) };
        n
    }

    /// Writes `f` into `n`, a node in no copy (a free one the caller took,
    /// or one of a tree no reader can reach yet).
    ///
    /// Call only where [`alloc`](Slab::alloc) may be called.
    ///
    /// # Safety
    /// `n` is a node of this slab.
    pub(crate) unsafe fn fill(&mut self, n: NonNull<RangeNode<M>>, f: Fields<M>) {
        // SAFETY: a node of this slab (caller): it points into a live chunk.
        let node = unsafe { n.as_ref() };
        // Relaxed: sequenced after this transaction's first flip (its
        // Release fence, see the module docs), and published to readers by
        // the Release link store that links the node again.
        let h = &f.hit;
        node.start.store(h.start, Ordering::Relaxed);
        node.end.store(h.end, Ordering::Relaxed);
        node.id.store(h.id.0, Ordering::Relaxed);
        node.base.store(h.base, Ordering::Relaxed);
        node.tag.store(h.tag, Ordering::Relaxed);
        node.flags.store(h.flags, Ordering::Relaxed);
        node.module.store(f.module, Ordering::Relaxed);
    }

    /// The lowest free node of the oldest chunk that has one, if any (a
    /// purged chunk becomes resident again); not written (the caller writes
    /// it with [`fill`](Slab::fill) where [`alloc`](Slab::alloc) may be
    /// called). A node never handed out before is written empty first.
    /// ([`pop_free_run`](Slab::pop_free_run) of one node, without the
    /// run's loop: as that, an insert + remove pair cost 58 instructions
    /// more.)
    #[inline]
    pub(crate) fn pop_free(&mut self) -> Option<NonNull<RangeNode<M>>> {
        let c = first_set(&self.has_free)?;
        let chunk = self.take_chunk(c);
        let w = chunk.lowest_free_word();
        let bit = chunk.free_bits[w].trailing_zeros() as usize;
        chunk.free_bits[w] &= !(1 << bit);
        chunk.free -= 1;
        // A free bit is a node of the chunk, and the lowest one.
        // SAFETY: so `hand_out`'s contract holds.
        let (node, _) = unsafe { hand_out::<M>(chunk, c, w * 64 + bit) };
        self.handed_out(c, 1);
        Some(node)
    }

    /// Up to `max` (at least one) free nodes at once, each handed out as
    /// [`pop_free`](Slab::pop_free) hands one out: the lowest of the free
    /// nodes that the lowest word of the oldest chunk with any holds.
    /// Returns that word's first node `first`, the nodes taken as bits (bit
    /// `b`: node `first + b`, in the same chunk) and how many of them were
    /// never handed out before. For a caller that takes many nodes (a
    /// migration's reservation): a node costs a bit, not a search.
    pub(crate) fn pop_free_run(
        &mut self,
        max: usize,
    ) -> Option<(NonNull<RangeNode<M>>, u64, usize)> {
        let c = first_set(&self.has_free)?;
        let chunk = self.take_chunk(c);
        let w = chunk.lowest_free_word();
        let mut taken = chunk.free_bits[w];
        if taken.count_ones() as usize > max {
            // The lowest `max` of them.
            let mut rest = taken;
            taken = 0;
            for _ in 0..max {
                taken |= rest & rest.wrapping_neg();
                rest &= rest - 1;
            }
        }
        chunk.free_bits[w] &= !taken;
        let count = taken.count_ones() as usize;
        chunk.free -= count;
        // `first` bytes in, the `len` nodes after it are inside the
        // allocation (`grow`), and node `64 w` is one of them (word `w` has
        // a free bit, a node at or above it).
        // SAFETY: so the word's first node is inside the chunk, aligned.
        let first = unsafe {
            (chunk.base.add(chunk.first))
                .cast::<RangeNode<M>>()
                .add(w * 64)
        };
        let (mut bits, mut fresh) = (taken, 0);
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            // A bit taken off the free bits is a node of the chunk, and
            // they are taken lowest first.
            // SAFETY: so `hand_out`'s contract holds.
            fresh += usize::from(unsafe { hand_out::<M>(chunk, c, w * 64 + b) }.1);
        }
        self.handed_out(c, count);
        Some((first, taken, fresh))
    }

    /// Chunk `c`, about to hand out nodes: resident again if it was purged.
    #[inline]
    fn take_chunk(&mut self, c: usize) -> &mut Chunk {
        let chunk = &mut self.chunks[c];
        if chunk.purged {
            chunk.purged = false;
            self.purged_free -= chunk.free;
            self.purged -= chunk.len;
        }
        chunk
    }

    /// Counts `count` nodes of chunk `c` handed out.
    #[inline]
    fn handed_out(&mut self, c: usize, count: usize) {
        self.free -= count;
        if self.chunks[c].free == 0 {
            set_bit(&mut self.has_free, c, false);
        }
    }

    /// The nodes free to hand out, in any chunk.
    pub(crate) fn free_len(&self) -> usize {
        self.free
    }

    /// Grows the slab by a chunk, its nodes free.
    pub(crate) fn grow_free(&mut self) {
        self.grow();
    }

    /// Grows the slab by a chunk and pops one of its nodes (as
    /// [`pop_free`](Slab::pop_free)).
    pub(crate) fn alloc_chunk(&mut self) -> NonNull<RangeNode<M>> {
        self.grow();
        self.pop_free().expect("grow added free nodes")
    }

    /// The chunks allocated.
    pub(crate) fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// The chunks purged (tests).
    #[cfg(test)]
    pub(crate) fn purged_chunks(&self) -> usize {
        self.chunks.iter().filter(|c| c.purged).count()
    }

    /// Each chunk's first node and node count, lowest address first: every
    /// node the slab hands out is `first.add(i)` for one chunk and one
    /// `i < len` (a span includes nodes not written yet: use only those
    /// handed out).
    pub(crate) fn chunk_spans(&self) -> Vec<(NonNull<RangeNode<M>>, usize)> {
        (self.by_addr.iter())
            .map(|&(_, c)| {
                let c = &self.chunks[c];
                // SAFETY: `first` bytes in, inside the allocation (`grow`).
                (unsafe { c.base.add(c.first) }.cast(), c.len)
            })
            .collect()
    }

    /// The nodes in all chunks, free or not, purged or not.
    pub(crate) fn nodes(&self) -> usize {
        self.nodes
    }

    /// The nodes in chunks that are not purged: what the slab keeps in
    /// memory (at most; a chunk's pages fault in as its nodes are first
    /// written).
    pub(crate) fn resident_nodes(&self) -> usize {
        self.nodes - self.purged
    }

    /// The nodes a fresh slab holds once it grew to hold `need` (the same
    /// chunk schedule as [`grow`](Slab::grow)): what compaction aims for.
    pub(crate) fn fresh_nodes(need: usize) -> usize {
        let node = size_of::<RangeNode<M>>();
        let per_huge_page = HUGE_PAGE / node;
        let (mut nodes, mut chunks, mut huge) = (0, 0, 0);
        while nodes < need {
            nodes += if nodes >= per_huge_page {
                huge += 1;
                (HUGE_PAGE - chunk_colour(huge - 1)) / node
            } else {
                (chunks + 1).min(64) * 16
            };
            chunks += 1;
        }
        nodes
    }

    /// The bytes the chunks hold.
    #[cfg(all(test, not(latchtree_loom)))]
    pub(crate) fn chunk_bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.layout.size()).sum()
    }

    /// The chunk `node`, a node this slab handed out, lies in.
    fn chunk_of(&self, node: NonNull<RangeNode<M>>) -> usize {
        let a = node.as_ptr().addr();
        // SAFETY: a node of this slab: inside a live chunk.
        // Relaxed: the writer's own word, written when the node was first
        // handed out (`pop_free`).
        let c = unsafe { node.as_ref() }.chunk.load(Ordering::Relaxed) as usize;
        debug_assert!(
            a - self.chunks[c].first_addr() < self.chunks[c].len * size_of::<RangeNode<M>>(),
            "a node outside every chunk"
        );
        c
    }

    /// Puts a node that left both copies back among the free ones (a chunk
    /// this leaves wholly free is purged by the next
    /// [`purge_emptied`](Slab::purge_emptied)).
    #[inline]
    pub(crate) fn recycle(&mut self, node: NonNull<RangeNode<M>>) {
        let c = self.chunk_of(node);
        let chunk = &mut self.chunks[c];
        let i = (node.as_ptr().addr() - chunk.first_addr()) / size_of::<RangeNode<M>>();
        debug_assert!(
            chunk.free_bits[i / 64] & (1 << (i % 64)) == 0,
            "a node freed twice"
        );
        chunk.free_bits[i / 64] |= 1 << (i % 64);
        chunk.hint = chunk.hint.min(i / 64);
        chunk.free += 1;
        self.free += 1;
        if chunk.free == 1 {
            set_bit(&mut self.has_free, c, true);
        }
        if chunk.purged {
            self.purged_free += 1;
        } else if chunk.free == chunk.len {
            self.emptied = true;
        }
    }

    /// Purges the wholly free resident chunks, newest (largest) first, as
    /// long as the other resident chunks keep as many free nodes as there
    /// are nodes in use (room for a migration's new tree), so that growth
    /// and steady churn do not give pages back only to fault them in again
    /// (with half that, the largest insert of a growth to 262 144 in random
    /// order doubled). One chunk a call, the next call going on while
    /// emptied ones remain: a 2 MiB chunk's pages take some 0.3 ms to give
    /// back, and a write that emptied several (one of `synchronize`'s gives
    /// back 8,192 nodes) held the writer lock 2 ms for them. Cheap unless a
    /// chunk emptied since the last call.
    pub(crate) fn purge_emptied(&mut self) {
        if !core::mem::take(&mut self.emptied) {
            return;
        }
        let spare = (self.nodes - self.free).max(1);
        for c in (0..self.chunks.len()).rev() {
            let chunk = &self.chunks[c];
            let resident_free = self.free - self.purged_free;
            if !chunk.purged
                && !chunk.unpurgeable
                && chunk.free == chunk.len
                && resident_free - chunk.len >= spare
            {
                self.purge(c);
                // Others may wait: the next call looks again.
                self.emptied = true;
                return;
            }
        }
    }

    /// The oldest chunk from which on the nodes in use could all move to
    /// free nodes of older chunks, if that empties a chunk that holds any:
    /// what a defragmentation (`Layout::finish`) moves out. Nodes popped
    /// after that come from the older chunks ([`pop_free`] takes the
    /// oldest first).
    ///
    /// [`pop_free`]: Slab::pop_free
    pub(crate) fn evacuation(&self) -> Option<usize> {
        let (mut used_above, mut free_below) = (0, self.free);
        let mut first = None;
        for (c, chunk) in self.chunks.iter().enumerate().rev() {
            used_above += chunk.len - chunk.free;
            free_below -= chunk.free;
            if used_above > free_below {
                break;
            }
            first = Some(c);
        }
        let first = first?;
        (self.chunks[first..].iter().any(|c| c.free < c.len)).then_some(first)
    }

    /// The first `max` nodes in use (handed out, not free) in chunks
    /// `first..`, in address order: a word of free bits at a time, so that
    /// the nodes moved out already cost little to pass.
    pub(crate) fn nodes_from(&self, first: usize, max: usize) -> Vec<NonNull<RangeNode<M>>> {
        let mut nodes = Vec::new();
        for chunk in &self.chunks[first..] {
            for (w, &free) in chunk.free_bits.iter().enumerate() {
                let at = w * 64;
                if at >= chunk.touched {
                    break;
                }
                // Nodes from `touched` on were never handed out.
                let touched = chunk.touched - at;
                let mut used = !free & if touched < 64 { (1 << touched) - 1 } else { !0 };
                while used != 0 {
                    if nodes.len() == max {
                        return nodes;
                    }
                    let i = at + used.trailing_zeros() as usize;
                    used &= used - 1;
                    // `i < touched <= len`: inside the chunk (`grow`).
                    // SAFETY: so the node is inside the allocation, aligned.
                    nodes
                        .push(unsafe { chunk.base.add(chunk.first).cast::<RangeNode<M>>().add(i) });
                }
            }
        }
        nodes
    }

    /// Whether a resident chunk is wholly free (what
    /// [`purge_free_chunks`](Slab::purge_free_chunks) would purge).
    pub(crate) fn has_free_chunk(&self) -> bool {
        CAN_PURGE && (self.chunks.iter()).any(|c| !c.purged && !c.unpurgeable && c.free == c.len)
    }

    /// Purges up to `max` wholly free resident chunks, spare or not (a
    /// 2 MiB chunk's pages take some 0.3 ms to give back): for a caller
    /// that wants the memory back now (`AddrIndex::synchronize`). Returns
    /// whether none is left to purge.
    pub(crate) fn purge_free_chunks(&mut self, max: usize) -> bool {
        let mut left = max;
        for c in 0..self.chunks.len() {
            let chunk = &self.chunks[c];
            if !chunk.purged && !chunk.unpurgeable && chunk.free == chunk.len {
                if left == 0 {
                    return false;
                }
                self.purge(c);
                left -= 1;
            }
        }
        true
    }

    /// Gives chunk `c`'s pages back to the OS, if the OS lets it (see the
    /// type's docs); its nodes stay free.
    fn purge(&mut self, c: usize) {
        let chunk = &mut self.chunks[c];
        let size = size_of::<RangeNode<M>>();
        if chunk.unpurgeable || !purge_pages(chunk.first_addr(), chunk.len * size, chunk.base) {
            chunk.unpurgeable = true;
            return;
        }
        chunk.purged = true;
        self.purged_free += chunk.free;
        self.purged += chunk.len;
    }

    /// Adds a chunk, its nodes free.
    fn grow(&mut self) {
        let node = Layout::new::<RangeNode<M>>();
        let per_huge_page = HUGE_PAGE / node.size();
        let (len, align, colour) = if self.nodes >= per_huge_page {
            let colour = chunk_colour(self.huge_chunks);
            self.huge_chunks += 1;
            ((HUGE_PAGE - colour) / node.size(), HUGE_PAGE, colour)
        } else {
            ((self.chunks.len() + 1).min(64) * 16, node.align(), 0)
        };
        let size = if align == HUGE_PAGE {
            HUGE_PAGE
        } else {
            len * node.size()
        };
        let layout = Layout::from_size_align(size, align)
            .expect("a chunk of at most 2 MiB has a valid layout");
        // SAFETY: the layout's size is not zero (`len >= 16`, nodes are not
        // zero-sized).
        let raw = unsafe { alloc::alloc::alloc(layout) };
        let Some(base) = NonNull::new(raw) else {
            alloc::alloc::handle_alloc_error(layout)
        };
        if align == HUGE_PAGE {
            advise_huge_page(base, layout.size());
        }
        // `colour` is a multiple of 64 (the node's alignment), and `colour +
        // len * size` fits in the chunk by the choice of `len`: the nodes
        // are aligned and inside the allocation; they are written one at a
        // time as they are first handed out (`pop_free`), so growing costs
        // an allocation (its pages fault in a node at a time), not 2 MiB of
        // stores inside one write.
        let mut free_bits = vec![u64::MAX; len.div_ceil(64)];
        if len % 64 != 0 {
            free_bits[len / 64] = (1 << (len % 64)) - 1;
        }
        let chunk = Chunk {
            base,
            layout,
            first: colour,
            len,
            free_bits,
            free: len,
            hint: 0,
            touched: 0,
            purged: false,
            unpurgeable: false,
        };
        let c = self.chunks.len();
        let at = self
            .by_addr
            .partition_point(|&(f, _)| f < chunk.first_addr());
        self.by_addr.insert(at, (chunk.first_addr(), c));
        self.chunks.push(chunk);
        self.free += len;
        self.nodes += len;
        if c / 64 == self.has_free.len() {
            self.has_free.push(0);
        }
        set_bit(&mut self.has_free, c, true);
    }
}

/// Hands out node `i` of `chunk` (chunk `c`), just taken off its free
/// bits: writes it empty first if it was never handed out, and records its
/// chunk in it. Returns it, and whether it was never handed out before.
///
/// # Safety
/// `i` is a node of the chunk (`i < len`), and no free node below `i` is
/// left: nodes are taken lowest first.
#[inline(always)]
unsafe fn hand_out<M>(chunk: &mut Chunk, c: usize, i: usize) -> (NonNull<RangeNode<M>>, bool) {
    // `first` bytes in, the `len` nodes after it are inside the allocation
    // (`grow`), and `i < len` (caller).
    // SAFETY: so the node is inside the chunk, aligned.
    let node = unsafe { chunk.base.add(chunk.first).cast::<RangeNode<M>>().add(i) };
    let fresh = i >= chunk.touched;
    if fresh {
        // Every node below `touched` that is free would be taken before
        // `i` (caller), so `i` is the first node never handed out: nothing
        // was ever written there, no reader can reach it, and nothing needs
        // dropping.
        debug_assert_eq!(i, chunk.touched);
        chunk.touched += 1;
        // SAFETY: so writing a whole node there races with nothing.
        unsafe { node.write(RangeNode::new()) };
    }
    // SAFETY: a node of this chunk, written.
    // Relaxed: the writer's own word.
    unsafe { node.as_ref() }
        .chunk
        .store(c as u32, Ordering::Relaxed);
    (node, fresh)
}

/// The index of the lowest set bit of `bits`, if any.
#[inline]
fn first_set(bits: &[u64]) -> Option<usize> {
    let (w, word) = bits.iter().enumerate().find(|(_, w)| **w != 0)?;
    Some(w * 64 + word.trailing_zeros() as usize)
}

#[inline]
fn set_bit(bits: &mut [u64], i: usize, on: bool) {
    if on {
        bits[i / 64] |= 1 << (i % 64);
    } else {
        bits[i / 64] &= !(1 << (i % 64));
    }
}

/// Whether [`purge_pages`] can give pages back here (else the slab keeps
/// its memory, and compacting it would gain nothing).
pub(crate) const CAN_PURGE: bool = cfg!(all(
    feature = "std",
    target_os = "linux",
    not(miri),
    not(latchtree_loom)
));

/// Gives the whole pages inside `[start, start + len)` (nodes of the chunk
/// allocated at `_chunk`) back to the OS, keeping them mapped:
/// `madvise(MADV_DONTNEED)`, after which a private anonymous page reads as
/// zeros until it is written again (any other mapping reads what backs it).
/// Returns whether the OS did it. Pages are the OS's page size, read at run
/// time (16 or 64 KiB on some arm64 and ppc64 kernels): the kernel rounds a
/// length up to it, so a range rounded to a smaller page would reach past
/// the chunk.
///
/// Call only after a flip of the calling thread's running write (`Txn::
/// begin`), as for any store a stale reader may read (module docs): the
/// purge rewrites what such a reader may still load.
///
/// Why a reader racing it is harmless: every word a reader of a node reads
/// is an atomic (module docs), every bit pattern of those words is a valid
/// value, and the mapping stays, so a load during or after the call returns
/// the old word or zero and never faults; a node of a purged chunk is in no
/// copy (all its nodes are free), so a reader standing on one is a stale
/// reader whose validation fails, whatever it read. The writer assumes
/// nothing about a purged node's contents: it rewrites every field and link
/// through atomics before linking it again, as for any recycled node. This
/// rests on the OS's guarantee for `madvise`, not on Rust's memory model
/// (which cannot speak of it); it is off under Miri and loom, and where
/// `madvise` is not available (without `std`, other systems) the memory is
/// kept.
#[cfg(all(feature = "std", target_os = "linux", not(miri), not(latchtree_loom)))]
fn purge_pages(start: usize, len: usize, chunk: NonNull<u8>) -> bool {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let Ok(page) = usize::try_from(page) else {
        return false;
    };
    let Some((lo, hi)) = whole_pages(start, len, page) else {
        return false;
    };
    // The pages `[lo, hi)` lie inside the chunk's allocation (its nodes'
    // span, rounded inwards), which this slab owns and never frees while
    // the index lives: nothing else (no allocator metadata) is on them.
    // MADV_DONTNEED changes their contents only (see above), never the
    // mapping. The pointer is derived from the chunk's, so it keeps its
    // provenance.
    // SAFETY: so the call cannot make any access fault or alias.
    let r = unsafe {
        libc::madvise(
            chunk.as_ptr().with_addr(lo).cast(),
            hi - lo,
            libc::MADV_DONTNEED,
        )
    };
    r == 0
}

/// The whole pages of `page` bytes (a power of two) inside `[start, start
/// + len)`, if any: `[lo, hi)` with both ends multiples of `page`.
#[cfg_attr(
    not(all(feature = "std", target_os = "linux", not(miri), not(latchtree_loom))),
    allow(dead_code)
)]
fn whole_pages(start: usize, len: usize, page: usize) -> Option<(usize, usize)> {
    if !page.is_power_of_two() {
        return None;
    }
    let (lo, hi) = (start.next_multiple_of(page), (start + len) / page * page);
    (lo < hi).then_some((lo, hi))
}

#[cfg(not(all(feature = "std", target_os = "linux", not(miri), not(latchtree_loom))))]
fn purge_pages(_: usize, _: usize, _: NonNull<u8>) -> bool {
    false
}

/// Asks the kernel to back `[p, p + len)` (2 MiB-aligned, 2 MiB long) with a
/// transparent huge page. Best effort: with huge pages off, nothing changes.
#[cfg(all(feature = "huge-pages", target_os = "linux", not(miri)))]
fn advise_huge_page(p: NonNull<u8>, len: usize) {
    // The range is an allocation this slab owns, page-aligned; MADV_HUGEPAGE changes only how the
    // kernel backs it, never its contents or validity. The result is ignored: a refusal changes
    // nothing.
    // SAFETY: so the call cannot break memory safety.
    let _ = unsafe { libc::madvise(p.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
}

#[cfg(not(all(feature = "huge-pages", target_os = "linux", not(miri))))]
fn advise_huge_page(_: NonNull<u8>, _: usize) {}

impl<M> Drop for Slab<M> {
    fn drop(&mut self) {
        const { assert!(!core::mem::needs_drop::<RangeNode<M>>()) };
        for chunk in self.chunks.drain(..) {
            // Each chunk came from `std::alloc::alloc` with this layout in `grow` and is freed
            // once, when the index (and so every reader's borrow) is gone; nodes need no drop
            // (asserted).
            // SAFETY: so this frees each chunk once, with its own layout.
            unsafe { alloc::alloc::dealloc(chunk.base.as_ptr(), chunk.layout) };
        }
    }
}

#[cfg(all(test, not(latchtree_loom)))]
mod tests {
    use super::*;

    /// A purge never reaches past its chunk, whatever the OS's page size:
    /// the range it hands `madvise` is whole pages of that size inside the
    /// chunk's nodes (the kernel would round a length up to its page).
    #[test]
    fn purges_stay_inside_their_chunk_for_every_page_size() {
        for page in [4096, 16 << 10, 64 << 10] {
            for start in (0..200_000).step_by(4160) {
                for len in [2048, 4096 * 3, 128 << 10, 2 << 20] {
                    if let Some((lo, hi)) = whole_pages(start, len, page) {
                        assert!(lo >= start && hi <= start + len, "{page} {start} {len}");
                        assert!(lo % page == 0 && (hi - lo) % page == 0);
                    }
                }
            }
        }
        assert_eq!(whole_pages(0, 100, 3), None, "not a power of two");
    }

    /// `fresh_nodes` follows the chunk schedule `grow` follows.
    #[test]
    fn fresh_nodes_follows_the_growth_schedule() {
        let mut slab = Slab::<()>::new();
        let sizes: &[usize] = if cfg!(miri) {
            &[0, 1, 16, 17, 49, 100]
        } else {
            &[0, 1, 16, 17, 49, 100, 1000, 16_384, 16_385, 40_000]
        };
        for &need in sizes {
            while slab.nodes < need {
                slab.grow();
            }
            assert_eq!(Slab::<()>::fresh_nodes(need), slab.nodes, "need {need}");
        }
    }

    /// `nodes_from` lists the nodes in use from a chunk on, in address
    /// order, the first `max` of them: what testing every node's free bit
    /// finds (over words wholly free, wholly in use, and a chunk's
    /// untouched tail).
    #[test]
    fn nodes_from_lists_the_nodes_in_use_in_address_order() {
        let mut s = Slab::<()>::new();
        for _ in 0..4 {
            s.grow_free();
        }
        let taken: Vec<_> = (0..150).map(|_| s.pop_free().unwrap()).collect();
        for (i, &n) in taken.iter().enumerate() {
            // Some words wholly free, some wholly in use, some mixed.
            if (i / 64 == 1 && i % 5 != 0) || (i >= 128 && i % 2 == 0) {
                s.recycle(n);
            }
        }
        for first in 0..s.chunks.len() {
            let mut want = Vec::new();
            for chunk in &s.chunks[first..] {
                for i in 0..chunk.touched {
                    if chunk.free_bits[i / 64] & (1 << (i % 64)) == 0 {
                        want.push(chunk.first_addr() + i * size_of::<RangeNode<()>>());
                    }
                }
            }
            for max in [0, 1, 7, 64, want.len(), usize::MAX] {
                let got: Vec<_> = (s.nodes_from(first, max).iter())
                    .map(|n| n.as_ptr().addr())
                    .collect();
                assert_eq!(
                    got,
                    want[..max.min(want.len())],
                    "from chunk {first}, {max} at most"
                );
            }
        }
    }

    /// A run hands out the nodes that as many single pops would, in the
    /// same order (the lowest free ones of the oldest chunk that has any,
    /// at most `max` and within one word), and says how many of them were
    /// never handed out before.
    #[test]
    fn a_run_takes_what_single_pops_would() {
        let place = |s: &Slab<()>, n: NonNull<RangeNode<()>>| {
            let c = s.chunk_of(n);
            let i = (n.as_ptr().addr() - s.chunks[c].first_addr()) / size_of::<RangeNode<()>>();
            (c, i)
        };
        // Two slabs alike: three chunks (16 + 32 + 48 nodes), 70 nodes
        // handed out, two in three of them recycled.
        let (mut runs, mut pops) = (Slab::<()>::new(), Slab::<()>::new());
        for s in [&mut runs, &mut pops] {
            for _ in 0..3 {
                s.grow_free();
            }
            let taken: Vec<_> = (0..70).map(|_| s.pop_free().unwrap()).collect();
            for (i, &n) in taken.iter().enumerate() {
                if i % 3 != 1 {
                    s.recycle(n);
                }
            }
        }
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for max in [1, 5, 64, 3, 64, 2, 64, 64, 64, 64] {
            let touched: Vec<_> = runs.chunks.iter().map(|c| c.touched).collect();
            let Some((first, taken, fresh)) = runs.pop_free_run(max) else {
                break;
            };
            assert!(
                taken != 0 && taken.count_ones() as usize <= max,
                "{max}: {taken:#x}"
            );
            let (mut bits, mut never) = (taken, 0);
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                // SAFETY: bit `b` of a run is node `first + b` of its chunk.
                let (c, i) = place(&runs, unsafe { first.add(b) });
                never += usize::from(i >= touched[c]);
                got.push((c, i));
                let p = pops.pop_free().unwrap();
                want.push(place(&pops, p));
            }
            assert_eq!(fresh, never, "{max}: nodes never handed out before");
        }
        assert_eq!(got, want);
        assert_eq!(runs.free_len(), pops.free_len());
        assert!(runs.pop_free_run(64).is_none() && pops.pop_free().is_none());
    }

    /// Past 2 MiB of nodes, chunks are 2 MiB-aligned and 2 MiB long (what a
    /// huge page needs), and every node handed out is distinct and usable.
    #[test]
    #[cfg_attr(miri, ignore = "allocates 40 000 nodes")]
    fn large_slabs_grow_by_aligned_huge_page_chunks() {
        let mut slab = Slab::<()>::new();
        let fields = |i: u64| Fields {
            hit: RawHit {
                start: i,
                end: i + 1,
                id: ModuleId(i),
                base: 0,
                tag: i,
                flags: 0,
            },
            module: ptr::null_mut(),
        };
        let nodes: Vec<_> = (0..40_000).map(|i| slab.alloc(fields(i))).collect();
        let mut seen = alloc::collections::BTreeSet::new();
        for (i, n) in nodes.iter().enumerate() {
            assert!(seen.insert(n.as_ptr().addr()), "node {i} handed out twice");
            // SAFETY: the slab is alive.
            assert_eq!(unsafe { n.as_ref() }.tag.load(Ordering::Relaxed), i as u64);
        }
        let huge: Vec<_> = slab
            .chunks
            .iter()
            .filter(|c| c.layout.align() == HUGE_PAGE)
            .collect();
        assert!(
            huge.len() >= 2,
            "under two huge-page chunks after 40 000 nodes"
        );
        for c in &huge {
            assert_eq!(c.layout.size(), HUGE_PAGE);
            assert_eq!(c.base.as_ptr().addr() % HUGE_PAGE, 0);
        }
        // Successive huge chunks start their nodes at different offsets
        // (the colouring), each node inside its chunk.
        let offsets: Vec<usize> = huge
            .iter()
            .map(|c| {
                let lo = c.base.as_ptr().addr();
                nodes
                    .iter()
                    .map(|n| n.as_ptr().addr())
                    .filter(|&a| a >= lo && a < lo + HUGE_PAGE)
                    .inspect(|&a| assert!(a + size_of::<RangeNode<()>>() <= lo + HUGE_PAGE))
                    .min()
                    .expect("a chunk holds nodes")
                    - lo
            })
            .collect();
        assert_eq!(offsets[..2], [chunk_colour(0), chunk_colour(1)]);
        assert_eq!(slab.nodes, slab.free_len() + nodes.len());
    }
}
