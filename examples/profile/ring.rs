//! A fixed-size, lock-free ring of stack samples that a signal handler can
//! push to.
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

/// The deepest stack a sample keeps (the frames nearest the leaf).
pub(crate) const MAX_FRAMES: usize = 64;

/// One frame: the object its pc was in (`ModuleId::get`, 0 for none) and
/// the link-time address there (the raw pc for none). For a caller's frame
/// the pc is the return address minus one: inside the call instruction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Frame {
    pub(crate) object: u64,
    pub(crate) address: u64,
}

/// A stack as the handler builds it, on its own stack: leaf first.
#[derive(Debug)]
pub(crate) struct Stack {
    thread: u64,
    len: usize,
    frames: [Frame; MAX_FRAMES],
}

impl Stack {
    /// An empty stack of the sampled thread `thread`.
    pub(crate) fn new(thread: u64) -> Stack {
        Stack {
            thread,
            len: 0,
            frames: [Frame::default(); MAX_FRAMES],
        }
    }

    /// Adds the next caller's frame; false if the stack is full.
    pub(crate) fn push(&mut self, frame: Frame) -> bool {
        let Some(slot) = self.frames.get_mut(self.len) else {
            return false;
        };
        *slot = frame;
        self.len += 1;
        true
    }
}

/// A sample as the consumer gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Which sampled thread (the index it registered with).
    pub(crate) thread: u64,
    /// Leaf first.
    pub(crate) frames: Vec<Frame>,
}

struct Slot {
    /// `position` when free for the producer of that position,
    /// `position + 1` once that producer has published it.
    sequence: AtomicUsize,
    thread: AtomicU64,
    len: AtomicUsize,
    /// `object, address` of each frame.
    words: [AtomicU64; 2 * MAX_FRAMES],
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
                thread: AtomicU64::new(0),
                len: AtomicUsize::new(0),
                words: [const { AtomicU64::new(0) }; 2 * MAX_FRAMES],
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
    pub(crate) fn push(&self, stack: &Stack) -> bool {
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
                        slot.thread.store(stack.thread, Ordering::Relaxed);
                        slot.len.store(stack.len, Ordering::Relaxed);
                        for (words, frame) in slot.words.chunks(2).zip(&stack.frames[..stack.len]) {
                            words[0].store(frame.object, Ordering::Relaxed);
                            words[1].store(frame.address, Ordering::Relaxed);
                        }
                        // Release pairs with the consumer's Acquire load of
                        // the sequence: it sees every word.
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
            let len = slot.len.load(Ordering::Relaxed);
            out.push(Sample {
                thread: slot.thread.load(Ordering::Relaxed),
                frames: slot.words[..2 * len]
                    .chunks(2)
                    .map(|w| Frame {
                        object: w[0].load(Ordering::Relaxed),
                        address: w[1].load(Ordering::Relaxed),
                    })
                    .collect(),
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
