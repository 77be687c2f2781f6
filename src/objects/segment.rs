//! What an object's program headers say about it: its kind, its loaded
//! segments, and how its memory inside them is read ([`ObjectMemory`]).

use core::ops::Range;

/// `p_flags` bit: the segment is executable.
pub(crate) const PF_X: u32 = 1;
/// `p_flags` bit: the segment is writable.
pub(crate) const PF_W: u32 = 2;
/// `p_flags` bit: the segment is readable.
pub(crate) const PF_R: u32 = 4;

/// Which kind of object this is; it decides how [`ObjectInfo::path`](super::ObjectInfo::path) was
/// found.
///
/// ```
/// # #[cfg(target_os = "linux")] {
/// use latchtree::{LoadedObjects, ObjectKind};
/// let objects = LoadedObjects::new();
/// objects.refresh();
/// let main = objects.lookup(main as *const () as u64).unwrap();
/// assert_eq!(objects.object(main.id()).unwrap().info().kind(), ObjectKind::MainProgram);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    /// The program the kernel started (`dl_iterate_phdr` gives it no name on
    /// glibc). Its path is where `/proc/self/exe` points.
    MainProgram,
    /// The kernel's virtual dynamic shared object. It has no file; its path
    /// is `[vdso]`, as in `/proc/self/maps`, and its image is in memory.
    Vdso,
    /// Anything else: the dynamic loader, shared libraries (also those
    /// `dlopen`ed later). Its path is the loader's name for it.
    Library,
}

/// One `PT_LOAD` segment of a loaded object: exactly the bytes the program
/// header describes (`[bias + p_vaddr, bias + p_vaddr + p_memsz)`), not
/// rounded to pages.
///
/// ```
/// use latchtree::LoadSegment;
/// let text = LoadSegment { range: 0x7f00_1000..0x7f00_3000, flags: 0b101, file_offset: 0x1000, file_size: 0x2000 };
/// assert!(text.is_executable() && text.is_readable() && !text.is_writable());
/// assert_eq!(text.link_range(0x7f00_0000), 0x1000..0x3000);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LoadSegment {
    /// Run-time addresses: `bias + p_vaddr .. bias + p_vaddr + p_memsz`.
    pub range: Range<u64>,
    /// `p_flags`: `PF_X` (1), `PF_W` (2), `PF_R` (4).
    pub flags: u32,
    /// `p_offset`: where the segment's bytes start in the file.
    pub file_offset: u64,
    /// `p_filesz`: how many of its bytes come from the file (the rest, up to
    /// its memory size, is zero-filled).
    pub file_size: u64,
}

impl LoadSegment {
    /// Whether `PF_X` is set.
    ///
    /// ```
    /// let s = latchtree::LoadSegment { range: 0..1, flags: 1, file_offset: 0, file_size: 1 };
    /// assert!(s.is_executable());
    /// ```
    pub fn is_executable(&self) -> bool {
        self.flags & PF_X != 0
    }

    /// Whether `PF_W` is set.
    ///
    /// ```
    /// let s = latchtree::LoadSegment { range: 0..1, flags: 6, file_offset: 0, file_size: 1 };
    /// assert!(s.is_writable());
    /// ```
    pub fn is_writable(&self) -> bool {
        self.flags & PF_W != 0
    }

    /// Whether `PF_R` is set.
    ///
    /// ```
    /// let s = latchtree::LoadSegment { range: 0..1, flags: 4, file_offset: 0, file_size: 1 };
    /// assert!(s.is_readable());
    /// ```
    pub fn is_readable(&self) -> bool {
        self.flags & PF_R != 0
    }

    /// The segment at link-time addresses (`p_vaddr .. p_vaddr + p_memsz`),
    /// given the object's load bias.
    ///
    /// ```
    /// let s = latchtree::LoadSegment { range: 0x5000..0x5800, flags: 4, file_offset: 0, file_size: 0x800 };
    /// assert_eq!(s.link_range(0x4000), 0x1000..0x1800);
    /// ```
    pub fn link_range(&self, bias: u64) -> Range<u64> {
        self.range.start.wrapping_sub(bias)..self.range.end.wrapping_sub(bias)
    }
}

/// Where the scan reads an object's memory from (its notes, its
/// `.eh_frame` records): the process's memory, or a test's bytes.
pub(crate) trait ObjectMemory {
    /// The `len` bytes at the run-time address `addr`, or `None` if they
    /// cannot be had.
    ///
    /// # Safety
    /// `addr..addr + len` must lie inside a readable `PT_LOAD` segment of
    /// the object whose headers are being parsed, and that object must stay
    /// loaded while the returned slice lives.
    unsafe fn read(&self, addr: u64, len: usize) -> Option<&[u8]>;
}
