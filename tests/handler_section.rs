//! Handler sections (issue 18): signal handlers read module values *in
//! place* through `AddrIndex::handler_section` while the thread they
//! interrupted, the index's writer, replaces (`set_value`), removes and
//! re-registers them, and two more threads read through sections of their
//! own. Every payload word read must carry its module's pattern (0 wrong
//! payloads), and every payload is freed exactly once, by the index, after
//! the sections that could see it closed: under AddressSanitizer a payload
//! freed too early is a heap-use-after-free (the `section_no_wait` defect
//! makes this test report one; `.ci/run sanitizers` runs it without).

#![cfg(all(unix, not(miri)))]

use latchtree::{AddrIndex, ModuleId};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::thread;

/// A trap table stand-in: `words[i] == seal(slot, generation, i)`; its drop
/// poisons the words before freeing them.
struct Payload {
    slot: u64,
    generation: u64,
    words: Box<[u64; 32]>,
}

fn seal(slot: u64, generation: u64, i: usize) -> u64 {
    (slot << 48) ^ (generation << 8) ^ i as u64 ^ 0x5EA1_0000_0000
}

static CREATED: AtomicU64 = AtomicU64::new(0);
static FREED: AtomicU64 = AtomicU64::new(0);

impl Payload {
    fn new(slot: u64, generation: u64) -> Self {
        CREATED.fetch_add(1, Relaxed);
        Payload {
            slot,
            generation,
            words: Box::new(core::array::from_fn(|i| seal(slot, generation, i))),
        }
    }

    /// Whether every word carries the pattern (read in place, one by one).
    fn intact(&self) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, w)| *w == seal(self.slot, self.generation, i))
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        self.words.fill(0xDEAD_DEAD_DEAD_DEAD);
        FREED.fetch_add(1, Relaxed);
    }
}

static INDEX: AddrIndex<Payload> = AddrIndex::new();
const SLOTS: u64 = 32;

fn range(slot: u64) -> std::ops::Range<u64> {
    0x1000_0000 + slot * 0x1000..0x1000_0000 + slot * 0x1000 + 0x800
}

static HITS: AtomicU64 = AtomicU64::new(0);
static WRONG: AtomicU64 = AtomicU64::new(0);
static HANDLED: AtomicU64 = AtomicU64::new(0);

/// One section's reads: every slot's address, checking each hit's payload
/// in place (async-signal-safe: atomics only).
fn read_all() {
    let section = INDEX.handler_section();
    for slot in 0..SLOTS {
        if let Some(hit) = section.lookup(range(slot).start + 0x10) {
            let p = hit.value();
            if p.slot != slot || !p.intact() {
                WRONG.fetch_add(1, Relaxed);
            }
            HITS.fetch_add(1, Relaxed);
        }
    }
    let hits = section.lookup_many([range(0).start, range(SLOTS - 1).start, 0x10]);
    for (want, hit) in [0, SLOTS - 1].into_iter().zip(&hits) {
        if let Some(h) = hit
            && (h.value().slot != want || !h.value().intact())
        {
            WRONG.fetch_add(1, Relaxed);
        }
    }
    if hits[2].is_some() {
        WRONG.fetch_add(1, Relaxed);
    }
}

extern "C" fn on_signal(_: libc::c_int) {
    read_all();
    HANDLED.fetch_add(1, Relaxed);
}

#[test]
fn handlers_read_payloads_in_place_while_their_writer_frees_them() {
    let rounds: u64 = if std::env::var_os("CI").is_some() {
        100_000
    } else {
        300_000
    };
    // SAFETY: installs a handler that only reads the index through a
    // section and touches atomics (async-signal-safe).
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &sa, core::ptr::null_mut()),
            0
        );
    }
    let ids: Vec<Option<ModuleId>> = (0..SLOTS)
        .map(|s| Some(INDEX.insert(range(s), Payload::new(s, 0)).unwrap()))
        .collect();
    let stop = AtomicBool::new(false);
    let writer_done = AtomicBool::new(false);
    let pthread = AtomicU64::new(0);
    let (done, me) = (&writer_done, &pthread);
    let ids = thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    while !stop.load(Acquire) {
                        read_all();
                    }
                })
            })
            .collect();
        let mut ids = ids;
        let writer = s.spawn(move || {
            // SAFETY: always safe to call.
            me.store(unsafe { libc::pthread_self() } as u64, Release);
            for g in 1..=rounds {
                let slot = (g * 7) % SLOTS;
                match (g % 3, ids[slot as usize]) {
                    (0, Some(id)) => {
                        drop(INDEX.remove(id));
                        ids[slot as usize] = None;
                    }
                    (_, Some(id)) => {
                        drop(INDEX.set_value(id, Payload::new(slot, g), g).unwrap());
                    }
                    (_, None) => {
                        let id = INDEX.insert(range(slot), Payload::new(slot, g)).unwrap();
                        ids[slot as usize] = Some(id);
                    }
                }
            }
            done.store(true, Release);
            ids
        });
        while pthread.load(Acquire) == 0 {
            thread::yield_now();
        }
        while !writer_done.load(Acquire) {
            // SAFETY: the writer thread is alive until `writer_done` (it is
            // joined below); SIGUSR1's handler is installed.
            unsafe { libc::pthread_kill(pthread.load(Relaxed) as libc::pthread_t, libc::SIGUSR1) };
            thread::yield_now();
        }
        let ids = writer.join().unwrap();
        stop.store(true, Release);
        for r in readers {
            r.join().unwrap();
        }
        ids
    });
    let (hits, wrong, handled) = (
        HITS.load(Relaxed),
        WRONG.load(Relaxed),
        HANDLED.load(Relaxed),
    );
    eprintln!("{handled} handlers on the writer, {hits} payload hits, {wrong} wrong");
    assert_eq!(wrong, 0, "a section read a wrong or freed payload");
    assert!(handled > 0 && hits > 0, "nothing was exercised");
    for id in ids.into_iter().flatten() {
        drop(INDEX.remove(id));
    }
    INDEX.synchronize();
    assert_eq!(
        (CREATED.load(Relaxed), FREED.load(Relaxed)),
        (CREATED.load(Relaxed), CREATED.load(Relaxed)),
        "every payload is freed exactly once, by the index"
    );
}
