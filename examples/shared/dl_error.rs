//! `dlerror()` as a `String`, shared by the examples. Included with
//! `#[path]`.

use std::ffi::CStr;

/// The last `dlerror()` message.
pub(crate) fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the
    // next dl* call on this thread; we copy it out at once.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        "unknown error".to_owned()
    } else {
        // SAFETY: non-null: a valid C string, as above.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    }
}
