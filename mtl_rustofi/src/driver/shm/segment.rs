//! The shared-memory segment of one job on one host: a header line and
//! one ring per ordered pair of local ranks (a rank's messages to itself
//! included).
//!
//! Every local rank creates or opens the same POSIX object, named after
//! the user, Open MPI's job id (two jobs on a host never meet) and the
//! host name (hosts that share `/dev/shm`, such as containers or network
//! namespaces on one machine, never meet either: Open MPI tells same-host
//! peers by host name too), sizes
//! it (the same size from every rank, so the order does not matter; a
//! fresh object reads as zeros, which is every ring's empty state), maps
//! it and counts itself in the header. The rank that completes the count
//! unlinks the name: from then on the memory lives only in the mappings,
//! and nothing is left in `/dev/shm` however the ranks end. A rank that
//! dies before attaching leaves the name behind until the runtime's
//! cleanup (the path is registered with it, as for the libfabric rail).

use super::ring::{Raw, CELL, LINE};
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};

/// Cells per ring at the least: 128 KiB, eight of the largest eager
/// packets. The rail's packet limit is set from it, so it is the same
/// whatever size a job's rings have.
pub(crate) const MIN_RING_CELLS: usize = 4096;
/// Cells per ring at the most: 256 KiB. A core's rings, the one it fills
/// and the one it empties, then stay within its 1 MiB L2 cache together
/// with what else it touches; with 512 KiB rings the small messages were
/// slower again.
const MAX_RING_CELLS: usize = 8192;
/// What the rings of one segment may take together before they shrink
/// towards [`MIN_RING_CELLS`]: the segment grows with the square of the
/// local ranks.
const RINGS_BUDGET: usize = 64 << 20;
const _: () = assert!(
    MIN_RING_CELLS.is_power_of_two() && MAX_RING_CELLS.is_power_of_two(),
    "rings index cells with a mask"
);
/// Bytes of the header (the attach count on a line of its own).
const HEADER: usize = 4096;

/// Cells per ring in the segment of `ranks` local ranks: the largest power
/// of two within the budget, from [`MIN_RING_CELLS`] to [`MAX_RING_CELLS`]
/// (8,192 up to 16 ranks, 4,096 beyond). A window of 64
/// messages of 2 KiB (66 cells each) would overfill a ring of 4,096 and
/// make the sender wait for the receiver in the middle of every window.
/// Every local rank computes it from the same count, so all agree.
pub(crate) fn ring_cells(ranks: usize) -> usize {
    let fit = RINGS_BUDGET / (ranks.max(1) * ranks.max(1) * CELL);
    let pow2 = match fit {
        0 => 0,
        f => 1 << (usize::BITS - 1 - f.leading_zeros()),
    };
    pow2.clamp(MIN_RING_CELLS, MAX_RING_CELLS)
}

/// Bytes of one ring of `cells` cells: the consumer's tail line, then the
/// cells (a whole number of lines: `cells` is a power of two, at least
/// [`MIN_RING_CELLS`]).
fn ring_bytes(cells: usize) -> usize {
    LINE + cells * CELL
}

/// A mapped segment.
pub(crate) struct Segment {
    base: *mut u8,
    len: usize,
    ranks: usize,
    /// Cells per ring ([`ring_cells`] of `ranks`).
    cells: usize,
    path: String,
}

/// The object's name for a job on a host (and its path under `/dev/shm`).
pub(crate) fn name(jobid: u32, host: u32) -> String {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    format!("/rustofi1-{uid}-{jobid:08x}-{host:08x}")
}

/// A hash (FNV-1a) of this host's name.
pub(crate) fn host_id() -> u32 {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `len` bytes into our buffer.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    let end = if r == 0 {
        buf.iter().position(|&b| b == 0).unwrap_or(buf.len())
    } else {
        0
    };
    buf[..end].iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

/// Size of the segment of `ranks` local ranks.
pub(crate) fn size(ranks: usize) -> usize {
    HEADER + ranks * ranks * ring_bytes(ring_cells(ranks))
}

fn os_error(what: &str, name: &str) -> String {
    format!("{what} {name}: {}", std::io::Error::last_os_error())
}

impl Segment {
    /// Creates or opens the job's segment for `ranks` local ranks and
    /// counts this rank in; the last of them unlinks it.
    pub(crate) fn attach(jobid: u32, host: u32, ranks: usize) -> Result<Segment, String> {
        let name = name(jobid, host);
        let len = size(ranks);
        let c = CString::new(name.clone()).expect("no NUL in the name");
        // SAFETY: a valid C string; the descriptor is closed below.
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o600) };
        if fd < 0 {
            return Err(os_error("shm_open", &name));
        }
        let r = Self::map(fd, len, &name);
        // SAFETY: our descriptor; the mapping (if any) stays valid.
        unsafe { libc::close(fd) };
        let base = match r {
            Ok(b) => b,
            Err(e) => {
                // SAFETY: a valid C string.
                unsafe { libc::shm_unlink(c.as_ptr()) };
                return Err(e);
            }
        };
        let seg = Segment {
            base,
            len,
            ranks,
            cells: ring_cells(ranks),
            path: format!("/dev/shm{name}"),
        };
        let n = seg.attached().fetch_add(1, Ordering::AcqRel) + 1;
        if n as usize >= ranks {
            // SAFETY: a valid C string. Every local rank has mapped it.
            unsafe { libc::shm_unlink(c.as_ptr()) };
        }
        if n as usize > ranks {
            return Err(format!(
                "{name} already had {} ranks attached of {ranks}: a leftover of an earlier job \
                 with the same id (removed now; start the job again)",
                n - 1
            ));
        }
        Ok(seg)
    }

    fn map(fd: i32, len: usize, name: &str) -> Result<*mut u8, String> {
        // SAFETY: fstat writes into the zeroed struct we pass.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and struct.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(os_error("fstat", name));
        }
        let have = st.st_size as usize;
        if have != 0 && have != len {
            return Err(format!(
                "{name} has {have} bytes, this job needs {len}: a leftover of an earlier job \
                 with the same id (removed now; start the job again)"
            ));
        }
        // SAFETY: a valid descriptor; growing to the same size twice is a
        // no-op, so every rank may do it.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            return Err(os_error("ftruncate", name));
        }
        // SAFETY: a fresh shared mapping of the whole object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_error("mmap", name));
        }
        Ok(p as *mut u8)
    }

    fn attached(&self) -> &AtomicU64 {
        // SAFETY: the header lies in the mapping, page aligned.
        unsafe { &*(self.base.add(LINE) as *const AtomicU64) }
    }

    /// The path the name had under `/dev/shm` (for the runtime's cleanup).
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Where the ring from local rank `from` to local rank `to` starts.
    fn ring_offset(&self, from: usize, to: usize) -> usize {
        assert!(from < self.ranks && to < self.ranks);
        HEADER + (from * self.ranks + to) * ring_bytes(self.cells)
    }

    /// The ring from local rank `from` to local rank `to`.
    pub(crate) fn ring(&self, from: usize, to: usize) -> Raw {
        let off = self.ring_offset(from, to);
        // SAFETY: the ring lies within the mapping (checked indices; the
        // mapping is `size(ranks)` long), its tail line and cells 64-byte
        // aligned (page-aligned base, HEADER and ring_bytes multiples of
        // 64); the mapping outlives every Raw (the rail drops its rings
        // before the segment).
        unsafe { Raw::new(self.base.add(off), self.base.add(off + LINE), self.cells) }
    }
}

/// `madvise` advice (Linux 5.14, not in the libc crate): fault the range
/// in, writable, as if written, without writing.
const MADV_POPULATE_WRITE: libc::c_int = 23;

impl Segment {
    /// Maps the pages of the ring from `from` to `to` into this process,
    /// writable, allocating any not yet allocated, without changing a byte.
    /// Otherwise the first lap through a ring takes a page fault every 128
    /// cells on each side (some microseconds each in a virtual machine):
    /// the first few thousand small messages to a peer were a third
    /// slower. Only a hint: where the kernel lacks the advice (before
    /// 5.14), the pages fault in as they are reached, as they would anyway.
    pub(crate) fn prime(&self, from: usize, to: usize) -> bool {
        assert!(from < self.ranks && to < self.ranks);
        // SAFETY: sysconf has no preconditions.
        let page = (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize;
        let off = self.ring_offset(from, to);
        let start = off / page * page;
        let end = (off + ring_bytes(self.cells)).div_ceil(page) * page;
        let end = end.min(self.len);
        // SAFETY: a page-aligned range inside our mapping (`off` lies in it
        // and the end is clamped to it); the advice changes no contents.
        let r = unsafe {
            libc::madvise(
                self.base.add(start) as *mut libc::c_void,
                end - start,
                MADV_POPULATE_WRITE,
            )
        };
        r == 0
    }
}

#[cfg(all(test, not(loom)))]
impl Segment {
    /// Of the whole pages of the cells of the ring from `from` to `to`,
    /// how many hold memory (`mincore`: allocated in the shared object, by
    /// whichever rank), and how many there are.
    pub(crate) fn resident_pages(&self, from: usize, to: usize) -> (usize, usize) {
        // SAFETY: sysconf has no preconditions.
        let page = (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize;
        let off = self.ring_offset(from, to) + LINE;
        let start = off.div_ceil(page) * page;
        let end = (off + self.cells * CELL) / page * page;
        let mut v = vec![0u8; (end - start) / page];
        // SAFETY: a page-aligned range inside our mapping, and one vector
        // byte per page of it.
        let r = unsafe {
            libc::mincore(
                self.base.add(start) as *mut libc::c_void,
                end - start,
                v.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
        (v.iter().filter(|&&b| b & 1 != 0).count(), v.len())
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: our mapping, no longer used (the rail's rings are gone).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

// SAFETY: the mapping is plain memory reached through the ring protocol;
// the segment is shared by the driver (used by the token holder) and the
// rail's `RingWatch` (which only reads ring words atomically).
unsafe impl Send for Segment {}
// SAFETY: shared, a segment only hands out ring addresses (`ring`, reading
// fields set at attach); the memory behind them is reached through the
// ring protocol's atomics, and it is unmapped only when the last owner
// drops it.
unsafe impl Sync for Segment {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::ring::Cells;
    use super::*;

    fn exists(p: &str) -> bool {
        std::path::Path::new(p).exists()
    }

    /// Removes the name of a segment not every rank attached to.
    fn unlink(job: u32, host: u32) {
        let c = CString::new(name(job, host)).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::shm_unlink(c.as_ptr()) }, 0);
    }

    #[test]
    fn unlinked_once_every_rank_attached_and_rings_are_shared() {
        let job = 0xfe00_0000 | std::process::id();
        let a = Segment::attach(job, 1, 2).unwrap();
        assert!(exists(a.path()), "still named while a rank is missing");
        // The same job on another host (sharing /dev/shm) has its own.
        let other = Segment::attach(job, 2, 2).unwrap();
        assert_ne!(other.path(), a.path());
        unlink(job, 2);
        let b = Segment::attach(job, 1, 2).unwrap();
        assert!(!exists(a.path()), "unlinked once both attached");
        // What one mapping's producer writes the other's consumer reads.
        let mut p = super::super::ring::Producer::new(a.ring(0, 1));
        let mut c = super::super::ring::Consumer::new(b.ring(0, 1));
        p.push(&[b"hello"]).unwrap();
        let mut got = Vec::new();
        assert!(c.pop(|x| got.extend_from_slice(x)).unwrap());
        assert_eq!(got, b"hello");
        // The reverse ring is a different one.
        let mut c2 = super::super::ring::Consumer::new(a.ring(1, 0));
        assert!(!c2.pop(|_| {}).unwrap());
        // Priming a ring that holds a packet changes none of its bytes
        // (where the kernel lacks the advice, before 5.14, it is refused
        // with EINVAL and changes nothing either).
        p.push(&[b"primed"]).unwrap();
        for (seg, from, to) in [(&a, 0, 1), (&b, 0, 1), (&b, 1, 1)] {
            if !seg.prime(from, to) {
                let e = std::io::Error::last_os_error().raw_os_error();
                assert_eq!(e, Some(libc::EINVAL), "priming failed otherwise");
            }
        }
        got.clear();
        assert!(c.pop(|x| got.extend_from_slice(x)).unwrap());
        assert_eq!(got, b"primed");
        assert!(!c.pop(|_| {}).unwrap());
    }

    #[test]
    fn rings_are_as_large_as_the_budget_allows_within_bounds() {
        let cells: Vec<usize> = [1, 2, 8, 11, 12, 16, 17, 23, 64, 192, 65535]
            .iter()
            .map(|&n| ring_cells(n))
            .collect();
        assert_eq!(
            cells,
            [8192, 8192, 8192, 8192, 8192, 8192, 4096, 4096, 4096, 4096, 4096]
        );
        for n in [1, 11, 12, 16] {
            assert!(n * n * ring_bytes(ring_cells(n)) <= RINGS_BUDGET + n * n * LINE);
        }
        // Each ring of a mapped segment has its own cells, the last one
        // ending at the end of the mapping.
        let job = 0xfc00_0000 | std::process::id();
        let s = Segment::attach(job, 1, 1).unwrap();
        assert_eq!(s.cells, 8192);
        assert_eq!(s.len, HEADER + ring_bytes(8192));
        assert_eq!(s.ring(0, 0).count(), 8192);
        let mut p = super::super::ring::Producer::new(s.ring(0, 0));
        let cell = [0u8; CELL - 8];
        let mut pushed = 0;
        while p.push(&[&cell]).is_ok() {
            pushed += 1;
        }
        assert_eq!(pushed, 8192, "one cell per packet until the ring is full");
        // Beyond 16 ranks the rings have the smaller size; the last ring
        // ends where the mapping does.
        let s = Segment::attach(job, 2, 17).unwrap();
        unlink(job, 2);
        assert_eq!((s.cells, s.ring(16, 16).count()), (4096, 4096));
        assert_eq!(s.ring_offset(16, 16) + ring_bytes(4096), s.len);
    }

    #[test]
    fn a_leftover_of_another_size_is_refused_and_removed() {
        let job = 0xfd00_0000 | std::process::id();
        let _a = Segment::attach(job, 1, 3).unwrap();
        let e = Segment::attach(job, 1, 2).err().unwrap();
        assert!(e.contains("leftover"), "{e}");
        assert!(!exists(&format!("/dev/shm{}", name(job, 1))));
    }
}
