//! A fixed-size, lock-free ring of samples that a signal handler can push to.
//!
//! Bounded multi-producer queue after Dmitry Vyukov's: each slot carries a
//! sequence number that says whose turn it is. A producer claims a slot by
//! advancing `head` with a compare-exchange, writes the sample, then
//! publishes it by storing the slot's sequence (Release); the consumer reads
//! a slot only after seeing that sequence (Acquire). No allocation, no lock:
//! safe inside a signal handler, also one that interrupted the consumer (the
//! handler never waits for the consumer; when the ring is full the sample is
//! counted as dropped).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// One sample: the object the pc was in (`ModuleId::get`, 0 for none) and
/// its link-time address there (the raw pc for none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Sample {
    pub(crate) object: u64,
    pub(crate) address: u64,
}

struct Slot {
    /// `position` when free for the producer of that position,
    /// `position + 1` once that producer has published it.
    sequence: AtomicUsize,
    object: AtomicU64,
    address: AtomicU64,
}

/// The ring: `N` slots, `N` a power of two.
pub(crate) struct Ring<const N: usize> {
    slots: [Slot; N],
    /// Next position to write.
    head: AtomicUsize,
    /// Next position to read (consumer only).
    tail: AtomicUsize,
    dropped: AtomicUsize,
}

impl<const N: usize> Ring<N> {
    /// An empty ring, usable as a `static`.
    pub(crate) const fn new() -> Self {
        assert!(N.is_power_of_two());
        let mut slots = [const {
            Slot {
                sequence: AtomicUsize::new(0),
                object: AtomicU64::new(0),
                address: AtomicU64::new(0),
            }
        }; N];
        let mut i = 0;
        while i < N {
            slots[i].sequence = AtomicUsize::new(i);
            i += 1;
        }
        Ring {
            slots,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            dropped: AtomicUsize::new(0),
        }
    }

    /// Adds a sample; async-signal-safe. Returns false (and counts it as
    /// dropped) if the ring is full.
    pub(crate) fn push(&self, sample: Sample) -> bool {
        let mut position = self.head.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[position & (N - 1)];
            // Acquire pairs with the consumer's Release store that freed the
            // slot: its reads of the old sample happen before our writes.
            let sequence = slot.sequence.load(Ordering::Acquire);
            match sequence.wrapping_sub(position) as isize {
                0 => match self.head.compare_exchange_weak(
                    position,
                    position.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        slot.object.store(sample.object, Ordering::Relaxed);
                        slot.address.store(sample.address, Ordering::Relaxed);
                        // Release pairs with the consumer's Acquire load of
                        // the sequence: it sees both words.
                        slot.sequence
                            .store(position.wrapping_add(1), Ordering::Release);
                        return true;
                    }
                    Err(now) => position = now,
                },
                // The consumer has not freed this slot yet: full.
                d if d < 0 => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                // Another producer took this position: try the next.
                _ => position = self.head.load(Ordering::Relaxed),
            }
        }
    }

    /// Moves every published sample into `out`. One consumer at a time.
    pub(crate) fn drain(&self, out: &mut Vec<Sample>) {
        let mut position = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[position & (N - 1)];
            // Acquire pairs with the producer's Release store of the
            // sequence.
            if slot.sequence.load(Ordering::Acquire) != position.wrapping_add(1) {
                break; // empty, or its producer is still writing it
            }
            out.push(Sample {
                object: slot.object.load(Ordering::Relaxed),
                address: slot.address.load(Ordering::Relaxed),
            });
            // Release pairs with a producer's Acquire load: our reads above
            // happen before it overwrites the slot, one lap later.
            slot.sequence
                .store(position.wrapping_add(N), Ordering::Release);
            position = position.wrapping_add(1);
        }
        self.tail.store(position, Ordering::Relaxed);
    }

    /// Samples lost because the ring was full.
    pub(crate) fn dropped(&self) -> usize {
        self.dropped.load(Ordering::Relaxed)
    }
}
