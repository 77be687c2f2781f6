//! A JIT trap registry on `latchtree::AddrIndex` (x86-64 Linux), the way a
//! WebAssembly runtime keeps one: executable pages of generated code whose
//! instructions trap on purpose (`ud2`, an integer division by zero, a load
//! from a guard page), and SIGILL/SIGFPE/SIGSEGV handlers that find the
//! faulting module with a handler section, read its trap table **in
//! place**, and resume at the table's landing pad. Meanwhile another thread
//! tiers modules up (`set_value`: a new table, the old one freed by the
//! index once no handler can see it), unregisters and re-registers them,
//! and takes traps of its own inside an open write batch.
//!
//! No side table, no use counts, no hand-rolled grace period: the trap
//! tables are the modules' values, and the index frees them.
//!
//! `cargo run --release -p latchtree-examples --bin jit [-- SECONDS]`

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod jit {
    use latchtree::{AddrIndex, ModuleMeta, Segment};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    use std::time::{Duration, Instant};

    /// One module's trap table: where its code traps, with which signal,
    /// and where to resume. Read in place by the signal handlers.
    struct TrapTable {
        code: u64,
        traps: [(u64, i32, u64); 3],
        serial: u64,
    }

    static CREATED: AtomicU64 = AtomicU64::new(0);
    static FREED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

    impl TrapTable {
        fn new(code: u64) -> TrapTable {
            let serial = CREATED.fetch_add(1, Relaxed);
            let (ill, fpe, segv) = (libc::SIGILL, libc::SIGFPE, libc::SIGSEGV);
            TrapTable {
                code,
                traps: [(0, ill, 2), (25, fpe, 27), (48, segv, 51)],
                serial,
            }
        }
    }

    impl Drop for TrapTable {
        fn drop(&mut self) {
            FREED.lock().unwrap().push(self.serial); // never in a handler
        }
    }

    /// The generated code of one module (one page): `ud2; ret` at 0,
    /// `xor edx,edx; mov eax,1; xor ecx,ecx; div ecx; ret` at 16, and
    /// `mov rax,[rdi]; ret` at 48.
    const CODE_BYTES: [(usize, &[u8]); 3] = [
        (0, &[0x0F, 0x0B, 0xC3]),
        (
            16,
            &[0x31, 0xD2, 0xB8, 1, 0, 0, 0, 0x31, 0xC9, 0xF7, 0xF1, 0xC3],
        ),
        (48, &[0x48, 0x8B, 0x07, 0xC3]),
    ];
    const PAGE: usize = 4096;

    static CODE: AddrIndex<TrapTable> = AddrIndex::new();
    static ATTRIBUTED: AtomicU64 = AtomicU64::new(0);
    static WRONG: AtomicU64 = AtomicU64::new(0);
    static IN_BATCH: AtomicU64 = AtomicU64::new(0);
    static CHURN_IN_BATCH: AtomicBool = AtomicBool::new(false);
    static CHURN_PAGE: AtomicU64 = AtomicU64::new(0);

    /// The trap handler: async-signal-safe (a section, atomics, `_exit`).
    extern "C" fn on_trap(sig: libc::c_int, _: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes the interrupted context.
        let regs = unsafe { &mut (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
        let pc = regs[libc::REG_RIP as usize] as u64;
        let section = CODE.handler_section();
        let resume = section.lookup(pc).and_then(|hit| {
            let table = hit.value();
            let at = hit.module_offset(pc);
            let trap = table.traps.iter().find(|t| t.0 == at && t.1 == sig)?;
            (table.code == hit.base()).then_some(hit.base() + trap.2)
        });
        let Some(resume) = resume else {
            WRONG.fetch_add(1, Relaxed);
            let msg = b"jit: a trap no module claims\n";
            // SAFETY: write(2) and _exit(2) are async-signal-safe.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::_exit(3);
            }
        };
        if CHURN_IN_BATCH.load(Relaxed) && pc & !(PAGE as u64 - 1) == CHURN_PAGE.load(Relaxed) {
            IN_BATCH.fetch_add(1, Relaxed);
        }
        ATTRIBUTED.fetch_add(1, Relaxed);
        regs[libc::REG_RIP as usize] = resume as i64;
    }

    /// Maps a page, copies the code in, makes it executable.
    fn emit() -> u64 {
        // SAFETY: a fresh anonymous mapping, written before it becomes
        // executable, never unmapped (modules are re-registered, not freed).
        unsafe {
            let p = libc::mmap(
                core::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            for (at, bytes) in CODE_BYTES {
                core::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>().add(at), bytes.len());
            }
            assert_eq!(
                libc::mprotect(p, PAGE, libc::PROT_READ | libc::PROT_EXEC),
                0
            );
            p as u64
        }
    }

    /// Runs the three trapping functions of the module at `code`.
    fn run(code: u64, guard: u64) {
        for (at, _) in CODE_BYTES {
            // SAFETY: generated code following the C ABI (one pointer
            // argument, no stack use); its traps resume at a `ret`.
            let f: extern "C" fn(u64) -> u64 = unsafe { core::mem::transmute(code as usize + at) };
            std::hint::black_box(f(guard));
        }
    }

    fn register(code: u64) -> latchtree::ModuleId {
        let meta = ModuleMeta {
            base: Some(code),
            tag: 0,
        };
        CODE.insert_module_with([Segment::from(code..code + 64)], TrapTable::new(code), meta)
            .unwrap()
    }

    pub fn main(seconds: f64) {
        for sig in [libc::SIGILL, libc::SIGFPE, libc::SIGSEGV] {
            // SAFETY: the handler only uses a handler section and atomics.
            unsafe {
                let mut sa: libc::sigaction = core::mem::zeroed();
                sa.sa_sigaction = on_trap as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO;
                assert_eq!(libc::sigaction(sig, &sa, core::ptr::null_mut()), 0);
            }
        }
        // SAFETY: an inaccessible page: every load from it faults.
        let guard = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                PAGE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as u64;
        let stable: Vec<u64> = (0..4).map(|_| emit()).collect();
        let stable_ids: Vec<_> = stable.iter().map(|&c| register(c)).collect();
        let churned = emit();
        CHURN_PAGE.store(churned, Relaxed);
        let deadline = Instant::now() + Duration::from_secs_f64(seconds);
        let (mut tiers, mut reloads) = (0u64, 0u64);
        std::thread::scope(|s| {
            for t in 0..2 {
                let stable = &stable;
                s.spawn(move || {
                    let mut i = t;
                    while Instant::now() < deadline {
                        run(stable[i % stable.len()], guard);
                        i += 1;
                    }
                });
            }
            // The registry thread: tier-up, unload and reload, traps of its
            // own inside an open write batch.
            while Instant::now() < deadline {
                let id = stable_ids[(tiers % 4) as usize];
                let code = stable[(tiers % 4) as usize];
                drop(CODE.set_value(id, TrapTable::new(code), tiers).unwrap());
                tiers += 1;
                let churn = register(churned);
                run(churned, guard);
                CODE.write(|batch| {
                    CHURN_IN_BATCH.store(true, Relaxed);
                    run(churned, guard); // the handler must not wait for this batch
                    CHURN_IN_BATCH.store(false, Relaxed);
                    batch.remove(churn);
                });
                reloads += 1;
            }
        });
        for id in stable_ids {
            drop(CODE.remove(id));
        }
        CODE.synchronize();
        let freed = FREED.lock().unwrap().clone();
        let mut unique = freed.clone();
        unique.sort_unstable();
        unique.dedup();
        println!("traps attributed: {}", ATTRIBUTED.load(Relaxed));
        println!(
            "traps taken inside an open write batch: {}",
            IN_BATCH.load(Relaxed)
        );
        println!("wrong answers: {}", WRONG.load(Relaxed));
        println!("tier-ups: {tiers}, unload/reload cycles: {reloads}");
        println!(
            "trap tables created: {}, freed: {} ({} distinct)",
            CREATED.load(Relaxed),
            freed.len(),
            unique.len()
        );
    }
}

fn main() {
    let seconds = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    jit::main(seconds);
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    println!("the JIT example needs x86-64 Linux ({seconds} s not run)");
}
