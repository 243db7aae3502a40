//! Memory of a receive bounce buffer, mapped straight from the kernel.
//!
//! A heap allocation of a 64 KiB buffer is zeroed by `calloc` (it does not
//! come from fresh pages), which makes every posted buffer resident at
//! once: 17 MB per rank over tcp before any message. Anonymous pages are
//! zero without being touched, so a buffer costs only the pages messages
//! have written: one page for a small message.

use crate::engine::EngineError;
use std::ops::{Deref, DerefMut};

pub(super) struct RxMem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone (like a Box<[u8]>);
// moving it to another thread moves that ownership.
unsafe impl Send for RxMem {}

impl RxMem {
    pub(super) fn new(len: usize) -> Result<RxMem, EngineError> {
        let len = len.max(1);
        // SAFETY: a fresh private anonymous mapping; no existing memory is
        // named.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(EngineError(format!(
                "cannot map {len} bytes for a receive buffer: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(RxMem {
            ptr: p as *mut u8,
            len,
        })
    }
}

impl Deref for RxMem {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for RxMem {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` maps `len` writable bytes for the life of self,
        // and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for RxMem {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `new` with this length and is
        // unmapped once; the driver drops a buffer only after its endpoint
        // is closed and its registration released.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}
