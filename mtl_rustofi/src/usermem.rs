//! User buffers: the memory of an MPI request, seen by the protocol core.
//!
//! The core copies eager payloads into and out of user buffers and hands
//! their address ranges to the driver for zero-copy sends, reads and tagged
//! transfers. All of that goes through the types here, so the promise that
//! makes it sound is made once, where a buffer enters Rust: a [`UserBuf`]
//! can only be made by `unsafe` [`UserBuf::new`], whose caller guarantees
//! that the memory stays valid (readable, and writable for receives) until
//! the request it belongs to completes. The core drops every `UserBuf` of a
//! request before it reports that request's completion.

use std::ptr;

/// An address range handed to a driver (which may dereference it) or
/// published to a peer (as an RMA target). Plain data: holding one grants
/// no access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) addr: usize,
    pub(crate) len: usize,
}

impl Region {
    /// The part of this region from `off`, at most `len` bytes.
    pub(crate) fn slice(self, off: usize, len: usize) -> Region {
        let off = off.min(self.len);
        Region {
            addr: self.addr + off,
            len: len.min(self.len - off),
        }
    }

    /// Whether `inner` lies wholly within this region.
    #[cfg(test)]
    pub(crate) fn contains(self, inner: Region) -> bool {
        inner.addr >= self.addr
            && inner
                .addr
                .checked_add(inner.len)
                .is_some_and(|end| end <= self.addr + self.len)
    }
}

/// The buffer of a live MPI request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UserBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a UserBuf is only a promise about memory of a live request; it is
// used by whichever thread holds the progress token (one at a time).
unsafe impl Send for UserBuf {}

/// Copies `src` into the front of `dst`, which must be at least as long
/// (else it panics), as [`copy_bytes`] does: no `memcpy` call for a small
/// copy of a length known only at run time.
#[inline(always)]
pub(crate) fn copy_into(dst: &mut [u8], src: &[u8]) {
    let dst = &mut dst[..src.len()];
    // SAFETY: both slices are `src.len()` bytes long, and they cannot
    // overlap: `dst` is borrowed mutably while `src` is borrowed.
    unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// Copies `n` bytes from `from` to `to`. Up to 16 bytes (the common small
/// message) take at most two loads and two stores rather than a call of
/// the library's `memcpy`, which costs more than such a copy.
///
/// # Safety
/// `from` must be readable and `to` writable for `n` bytes, and the two
/// ranges must not overlap; either may be null or dangling when `n` is 0.
/// Neither need be aligned.
#[inline(always)]
pub(crate) unsafe fn copy_bytes(from: *const u8, to: *mut u8, n: usize) {
    // Each small copy is of the first `w` and the last `w` bytes, for a
    // width `w` with `w <= n <= 2 * w`: both lie within the `n` bytes and
    // together cover them.
    if (8..=16).contains(&n) {
        // SAFETY: per the contract; `w` is 8.
        unsafe {
            let head = ptr::read_unaligned(from.cast::<u64>());
            let tail = ptr::read_unaligned(from.add(n - 8).cast::<u64>());
            ptr::write_unaligned(to.cast::<u64>(), head);
            ptr::write_unaligned(to.add(n - 8).cast::<u64>(), tail);
        }
    } else if n > 16 {
        // SAFETY: per the contract.
        unsafe { ptr::copy_nonoverlapping(from, to, n) };
    } else if n >= 4 {
        // SAFETY: per the contract; `w` is 4 (`n` is below 8).
        unsafe {
            let head = ptr::read_unaligned(from.cast::<u32>());
            let tail = ptr::read_unaligned(from.add(n - 4).cast::<u32>());
            ptr::write_unaligned(to.cast::<u32>(), head);
            ptr::write_unaligned(to.add(n - 4).cast::<u32>(), tail);
        }
    } else if n > 0 {
        // SAFETY: per the contract; 1 to 3 bytes, copied one by one: the
        // first, the middle and the last.
        unsafe {
            *to = *from;
            *to.add(n / 2) = *from.add(n / 2);
            *to.add(n - 1) = *from.add(n - 1);
        }
    }
}

impl UserBuf {
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes (and for writes, if the
    /// buffer receives) until the request it belongs to completes, and no
    /// one else may write it meanwhile. `ptr` may be null or dangling only
    /// if `len` is 0.
    pub(crate) unsafe fn new(ptr: *mut u8, len: usize) -> UserBuf {
        UserBuf { ptr, len }
    }

    /// A buffer of no bytes.
    #[cfg(test)]
    pub(crate) fn empty() -> UserBuf {
        UserBuf {
            ptr: ptr::null_mut(),
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn region(&self) -> Region {
        Region {
            addr: self.ptr as usize,
            len: self.len,
        }
    }

    /// The part of the buffer from `off`, at most `len` bytes (clipped to
    /// the buffer, so the piece stays within the memory `new` vouched for).
    pub(crate) fn sub(&self, off: usize, len: usize) -> UserBuf {
        let off = off.min(self.len);
        UserBuf {
            ptr: self.ptr.wrapping_add(off),
            len: len.min(self.len - off),
        }
    }

    /// Copies `src` to the start of the buffer, clipped to its length;
    /// returns the bytes copied ([`copy_bytes`]: no `memcpy` call for a
    /// small one). Inlined: the arrival of an eager message (and each
    /// piece of a rendezvous by messages) copies its payload here, and the
    /// call cost each short arrival 7 Ir (`bench/engine-ir`: 1,637 ->
    /// 1,623 per round trip of both engines). In the build measured, its
    /// callers stayed inlined into the packet handler with it.
    #[inline(always)]
    pub(crate) fn write(&self, src: &[u8]) -> usize {
        let n = src.len().min(self.len);
        // SAFETY: `new`'s contract makes `ptr` writable for `len >= n`
        // bytes while the request lives, and `src` is readable for
        // `n <= src.len()` bytes, a distinct Rust slice (the core never
        // hands a user buffer out as a slice).
        unsafe { copy_bytes(src.as_ptr(), self.ptr, n) };
        n
    }

    /// Copies the whole buffer into the front of `dst`. Panics if `dst` is
    /// shorter than the buffer.
    pub(crate) fn read_into(&self, dst: &mut [u8]) {
        let dst = &mut dst[..self.len];
        if self.len > 0 {
            // SAFETY: `new`'s contract makes `ptr` readable for `len` bytes;
            // `dst` is a distinct `len`-byte slice of our own memory.
            unsafe { ptr::copy_nonoverlapping(self.ptr, dst.as_mut_ptr(), self.len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_clips_and_read_copies() {
        let mut mem = vec![0u8; 4];
        // SAFETY: `mem` outlives `b` and is not touched while `b` is used.
        let b = unsafe { UserBuf::new(mem.as_mut_ptr(), mem.len()) };
        assert_eq!(b.write(&[1, 2, 3, 4, 5, 6]), 4);
        let mut out = [0u8; 6];
        b.read_into(&mut out);
        assert_eq!(out, [1, 2, 3, 4, 0, 0]);
        assert_eq!(mem, [1, 2, 3, 4]);
        assert_eq!(b.sub(3, 9).write(&[7, 7]), 1);
        assert_eq!(b.sub(9, 1).len(), 0);
        assert_eq!(mem, [1, 2, 3, 7]);
        assert!(UserBuf::empty().is_empty());
    }

    #[test]
    fn a_short_copy_copies_exactly_its_bytes() {
        let src: Vec<u8> = (1..=16).collect();
        for n in 0..=16 {
            let mut dst = [0xee; 16];
            let from = if n == 0 {
                std::ptr::null()
            } else {
                src.as_ptr()
            };
            // SAFETY: `src` and `dst` hold `16 >= n` bytes and are
            // distinct; none is read for 0.
            unsafe { copy_bytes(from, dst.as_mut_ptr(), n) };
            assert_eq!(&dst[..n], &src[..n], "{n} bytes");
            assert!(dst[n..].iter().all(|&b| b == 0xee), "{n} bytes: no more");
        }
    }

    #[test]
    fn copy_into_fills_the_front_only() {
        let src: Vec<u8> = (1..=40).collect();
        for n in 0..=40 {
            let mut dst = [0xee; 40];
            copy_into(&mut dst, &src[..n]);
            assert_eq!(&dst[..n], &src[..n], "{n} bytes");
            assert!(dst[n..].iter().all(|&b| b == 0xee), "{n} bytes: no more");
        }
    }

    #[test]
    #[should_panic]
    fn copy_into_a_shorter_slice_panics() {
        copy_into(&mut [0; 4], &[1; 5]);
    }

    #[test]
    fn write_copies_every_small_and_large_length_exactly() {
        let src: Vec<u8> = (1..=40).collect();
        for cap in 0..=36 {
            // Under Miri, for each capacity the lengths 0, one below it, it,
            // one above it and 36: every copy length `n` from 0 to 36 (each
            // width of `copy_bytes`) is still made up to the end of the
            // source (`len` = `n`) and, below 36, clipped at the end of the
            // buffer (`cap` = `n` < `len`), as with every pair.
            let lens = (0..=36).filter(|&len: &usize| {
                !cfg!(miri) || len == 0 || len == 36 || len.abs_diff(cap) <= 1
            });
            for len in lens {
                let mut mem = vec![0xeeu8; cap + 4];
                // SAFETY: `mem` outlives `b` and is not touched while `b`
                // is used; `b` covers its first `cap` bytes.
                let b = unsafe { UserBuf::new(mem.as_mut_ptr(), cap) };
                let n = b.write(&src[..len]);
                assert_eq!(n, len.min(cap));
                assert_eq!(&mem[..n], &src[..n], "cap {cap}, len {len}");
                assert!(mem[n..].iter().all(|&x| x == 0xee), "cap {cap}, len {len}");
            }
        }
    }

    #[test]
    fn regions_slice_and_contain() {
        let r = Region { addr: 100, len: 50 };
        assert_eq!(r.slice(10, 20), Region { addr: 110, len: 20 });
        assert_eq!(r.slice(40, 20), Region { addr: 140, len: 10 });
        assert!(r.contains(Region { addr: 120, len: 30 }));
        assert!(!r.contains(Region { addr: 120, len: 31 }));
        assert!(!r.contains(Region { addr: 99, len: 1 }));
    }
}
