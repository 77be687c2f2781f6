//! What the profiled program does: busy functions of its own (two on the
//! main thread, one on a worker), and a checksum loop inside a library it
//! `dlopen`s and `dlclose`s.

use super::dl_error::dl_error;
use std::ffi::{CStr, c_uint, c_ulong, c_void};
use std::hint::black_box;

// The busy loops are `while` loops of plain arithmetic, so that even a
// debug build (no inlining) spends its time in these functions themselves,
// not in iterator methods: the profile names them.

/// Burns CPU in a function of its own (a splitmix-style hash chain).
#[inline(never)]
pub(crate) fn spin_hash(rounds: u64) -> u64 {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15_u64);
    let mut i = 0;
    while i < rounds {
        x = (x ^ (x >> 31))
            .wrapping_mul(0xbf58_476d_1ce4_e5b9)
            .wrapping_add(i);
        i += 1;
    }
    x
}

/// Burns CPU in another function of its own (primes by trial division).
#[inline(never)]
pub(crate) fn count_primes(below: u64) -> u64 {
    let below = black_box(below);
    let mut count = 0;
    let mut n = 2;
    while n < below {
        let mut d = 2;
        let mut prime = true;
        while d * d <= n {
            if n % d == 0 {
                prime = false;
                break;
            }
            d += 1;
        }
        count += prime as u64;
        n += 1;
    }
    count
}

/// Burns CPU on the worker thread (Collatz chain lengths).
#[inline(never)]
pub(crate) fn collatz_steps(below: u64) -> u64 {
    let mut steps = 0;
    let mut n = 1;
    while n < black_box(below) {
        let mut x = n;
        while x != 1 {
            x = if x % 2 == 0 { x / 2 } else { 3 * x + 1 };
            steps += 1;
        }
        n += 1;
    }
    steps
}

/// `uLong adler32_z(uLong adler, const Bytef *buf, z_size_t len)`.
type Adler32Z = unsafe extern "C" fn(c_ulong, *const u8, usize) -> c_ulong;

/// zlib, `dlopen`ed by this program, with the function it burns CPU in.
pub(crate) struct Zlib {
    handle: *mut c_void,
    adler32_z: Adler32Z,
    /// Whether zlib was already loaded before (then `dlclose` will not
    /// unmap it).
    pub(crate) was_loaded: bool,
    /// What the buffer is checksummed over.
    buffer: Vec<u8>,
}

/// The library and the function it burns CPU in.
pub(crate) const LIBRARY: &CStr = c"libz.so.1";
pub(crate) const FUNCTION: &CStr = c"adler32_z";

impl Zlib {
    /// `dlopen`s zlib and finds `adler32_z` in it.
    pub(crate) fn open() -> Result<Zlib, String> {
        // SAFETY: a valid C string; RTLD_NOLOAD loads nothing.
        let already = unsafe { libc::dlopen(LIBRARY.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        let was_loaded = !already.is_null();
        if was_loaded {
            // SAFETY: drops the reference NOLOAD just took.
            unsafe { libc::dlclose(already) };
        }
        // SAFETY: a valid C string. zlib's initializers do nothing that
        // matters to this process.
        let handle = unsafe { libc::dlopen(LIBRARY.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("dlopen({LIBRARY:?}): {}", dl_error()));
        }
        // SAFETY: `handle` is live; FUNCTION is a valid C string.
        let symbol = unsafe { libc::dlsym(handle, FUNCTION.as_ptr()) };
        if symbol.is_null() {
            let error = dl_error();
            // SAFETY: the handle from dlopen above, closed once.
            unsafe { libc::dlclose(handle) };
            return Err(format!("dlsym({FUNCTION:?}): {error}"));
        }
        // SAFETY: zlib's `adler32_z` has exactly the `Adler32Z` signature
        // (zlib.h, since 1.2.9).
        let adler32_z = unsafe { std::mem::transmute::<*mut c_void, Adler32Z>(symbol) };
        let buffer = (0..64 * 1024).map(|i| (i * 7 + 3) as u8).collect();
        Ok(Zlib {
            handle,
            adler32_z,
            was_loaded,
            buffer,
        })
    }

    /// The address of the function inside the library.
    pub(crate) fn function_address(&self) -> u64 {
        (self.adler32_z as *const ()).addr() as u64
    }

    /// Checksums the buffer `rounds` times, inside zlib. (Not inlined, so
    /// that the stacks name it between the library and its callers.)
    #[inline(never)]
    pub(crate) fn burn(&self, rounds: u32) -> c_uint {
        let mut sum: c_ulong = 1;
        for _ in 0..rounds {
            // SAFETY: the library is loaded (we hold its handle); the
            // pointer and length describe our live buffer.
            sum = unsafe { (self.adler32_z)(sum, self.buffer.as_ptr(), self.buffer.len()) };
        }
        sum as c_uint
    }

    /// `dlclose`s the library; nothing in it is called afterwards.
    pub(crate) fn close(self) -> Result<(), String> {
        // SAFETY: the handle from `open`, closed once (consumes `self`, so
        // `adler32_z` cannot be called after).
        match unsafe { libc::dlclose(self.handle) } {
            0 => Ok(()),
            _ => Err(format!("dlclose: {}", dl_error())),
        }
    }
}
