//! The shared-memory segment of one job on one host: a header line and
//! one ring per ordered pair of local ranks (a rank's messages to itself
//! included).
//!
//! Every local rank opens the same POSIX object, named after the user,
//! Open MPI's job id (two jobs on a host never meet) and the host name
//! (hosts that share `/dev/shm`, such as containers or network namespaces
//! on one machine, never meet either: Open MPI tells same-host peers by
//! host name too). The rank that creates it sizes it: the rings take the
//! preferred size ([`ring_cells`]) if the whole segment fits in the room
//! the file system has left, else the largest that fits down to
//! [`MIN_RING_CELLS`], else the rail is refused with a message. The
//! others read the ring size off the object's length, so all agree. A
//! fresh object reads as zeros, which is every ring's empty state, so
//! nobody initialises anything. Each rank maps it and counts itself in
//! the header. The rank that completes the count unlinks the name: from
//! then on the memory lives only in the mappings, and nothing is left in
//! `/dev/shm` however the ranks end. A rank that dies before attaching
//! leaves the name behind until the runtime's cleanup (the path is
//! registered with it, as for the libfabric rail).
//!
//! Why the room is checked: the object is sparse, and its pages are
//! allocated as the rings are first touched. On a `/dev/shm` too small
//! for it (a container's default is 64 MiB) a touch past the end of the
//! room would kill the rank with SIGBUS, without a word, in the middle
//! of a job.

use super::ring::{Raw, CELL, LINE};
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// Size of the segment of `ranks` local ranks with rings of `cells`
/// cells.
pub(crate) fn size(ranks: usize, cells: usize) -> usize {
    HEADER + ranks * ranks * ring_bytes(cells)
}

/// Cells per ring of a new segment of `ranks` local ranks on a file
/// system with `room` bytes left: [`ring_cells`] if the whole segment
/// fits, else the largest power of two down to [`MIN_RING_CELLS`] that
/// does; `None` if not even that fits. The whole segment, not what a
/// job may touch of it: any pair may talk, and every rank polls the
/// first page of each ring to it.
pub(crate) fn ring_cells_within(ranks: usize, room: u64) -> Option<usize> {
    let mut cells = ring_cells(ranks);
    loop {
        if size(ranks, cells) as u64 <= room {
            return Some(cells);
        }
        if cells <= MIN_RING_CELLS {
            return None;
        }
        cells /= 2;
    }
}

/// The cells per ring of an existing segment of `len` bytes for `ranks`
/// local ranks, if `len` is the length of such a segment.
fn cells_of(ranks: usize, len: usize) -> Option<usize> {
    let mut cells = MIN_RING_CELLS;
    while cells <= MAX_RING_CELLS {
        if size(ranks, cells) == len {
            return Some(cells);
        }
        cells *= 2;
    }
    None
}

/// How long a rank that found the object waits for its creator to size
/// it (a few system calls away).
const SIZE_WAIT: Duration = Duration::from_secs(10);

/// Bytes the file system of `fd` can still allocate (`u64::MAX` where it
/// sets no limit: a tmpfs mounted with `size=0` reports no blocks).
fn room(fd: i32, name: &str) -> Result<u64, String> {
    // SAFETY: fstatvfs writes into the zeroed struct we pass.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and struct.
    if unsafe { libc::fstatvfs(fd, &mut st) } != 0 {
        return Err(os_error("fstatvfs", name));
    }
    if st.f_blocks == 0 {
        return Ok(u64::MAX);
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// The refusal of a segment that does not fit.
fn no_room(name: &str, ranks: usize, room: u64) -> String {
    let least = size(ranks, MIN_RING_CELLS);
    format!(
        "not enough room in /dev/shm for /dev/shm{name}: the rings of {ranks} local ranks need \
         at least {least} bytes ({:.1} MiB), {room} bytes are left; enlarge /dev/shm (a \
         container's is 64 MiB unless set, e.g. with docker run --shm-size) or set \
         mtl_rustofi_shm = off",
        least as f64 / (1 << 20) as f64
    )
}

fn os_error(what: &str, name: &str) -> String {
    format!("{what} {name}: {}", std::io::Error::last_os_error())
}

impl Segment {
    /// Creates or opens the job's segment for `ranks` local ranks and
    /// counts this rank in; the last of them unlinks it.
    pub(crate) fn attach(jobid: u32, host: u32, ranks: usize) -> Result<Segment, String> {
        let name = name(jobid, host);
        let c = CString::new(name.clone()).expect("no NUL in the name");
        let (base, len, cells) = match Self::open_sized(&c, &name, ranks) {
            Ok(m) => m,
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
            cells,
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

    /// Opens the object, creating and sizing it if this rank comes first,
    /// and maps it: the mapping, its length and the cells per ring.
    fn open_sized(c: &CStr, name: &str, ranks: usize) -> Result<(*mut u8, usize, usize), String> {
        // A creator that gave up unlinks the name between another rank's
        // two opens; that rank then tries to create it in turn.
        for _ in 0..3 {
            let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
            // SAFETY: a valid C string; the descriptor is closed below.
            let mut fd = unsafe { libc::shm_open(c.as_ptr(), flags, 0o600) };
            let created = fd >= 0;
            if !created {
                if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                    return Err(os_error("shm_open", name));
                }
                // SAFETY: as above.
                fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR, 0o600) };
                if fd < 0 {
                    if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT) {
                        continue;
                    }
                    return Err(os_error("shm_open", name));
                }
            }
            let sized = if created {
                Self::size_new(fd, name, ranks)
            } else {
                Self::size_found(fd, name, ranks)
            };
            let r = sized.and_then(|(len, cells)| Ok((Self::map(fd, len, name)?, len, cells)));
            // SAFETY: our descriptor; the mapping (if any) stays valid.
            unsafe { libc::close(fd) };
            return r;
        }
        Err(format!(
            "{name} was removed three times while this rank opened it"
        ))
    }

    /// Sizes the object this rank created: as large as [`ring_cells`]
    /// asks if it fits in the file system's room, else smaller.
    fn size_new(fd: i32, name: &str, ranks: usize) -> Result<(usize, usize), String> {
        let room = room(fd, name)?;
        let cells = ring_cells_within(ranks, room).ok_or_else(|| no_room(name, ranks, room))?;
        let len = size(ranks, cells);
        // SAFETY: a valid descriptor of an object of ours.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            return Err(os_error("ftruncate", name));
        }
        Ok((len, cells))
    }

    /// The length and ring size of an object another rank created, once
    /// that rank has sized it.
    fn size_found(fd: i32, name: &str, ranks: usize) -> Result<(usize, usize), String> {
        let start = Instant::now();
        loop {
            // SAFETY: fstat writes into the zeroed struct we pass.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: a valid descriptor and struct.
            if unsafe { libc::fstat(fd, &mut st) } != 0 {
                return Err(os_error("fstat", name));
            }
            let have = st.st_size as usize;
            if have != 0 {
                return cells_of(ranks, have).map(|c| (have, c)).ok_or_else(|| {
                    format!(
                        "{name} has {have} bytes, no segment of {ranks} ranks: a leftover of an \
                         earlier job with the same id (removed now; start the job again)"
                    )
                });
            }
            // The creator's own check, made here too: a rank does not
            // wait for one that found no room and gave up.
            let room = room(fd, name)?;
            if ring_cells_within(ranks, room).is_none() {
                return Err(no_room(name, ranks, room));
            }
            if start.elapsed() > SIZE_WAIT {
                return Err(format!(
                    "{name} was not sized within {} s: a leftover of an earlier job with the \
                     same id, or its creator died (removed now; start the job again)",
                    SIZE_WAIT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn map(fd: i32, len: usize, name: &str) -> Result<*mut u8, String> {
        // SAFETY: a fresh shared mapping of the whole object, which is
        // `len` bytes long.
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

    /// Cells per ring.
    pub(crate) fn cells(&self) -> usize {
        self.cells
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
        // mapping is `size(ranks, cells)` long), its tail line and cells 64-byte
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
    fn rings_shrink_to_the_room_left_and_are_refused_below_the_least() {
        let full = |n: usize| size(n, ring_cells(n)) as u64;
        // Room for the whole segment: the preferred size.
        assert_eq!(ring_cells_within(4, full(4)), Some(8192));
        assert_eq!(ring_cells_within(4, u64::MAX), Some(8192));
        // A byte short: the next size down, which needs about half.
        assert_eq!(ring_cells_within(4, full(4) - 1), Some(4096));
        let least = size(4, MIN_RING_CELLS) as u64;
        assert_eq!(ring_cells_within(4, least), Some(MIN_RING_CELLS));
        assert_eq!(ring_cells_within(4, least - 1), None);
        // 16 ranks in a container's default 64 MiB: the preferred rings
        // (64 MiB and the header) do not fit, the smaller ones do.
        assert!(full(16) > 64 << 20);
        assert_eq!(ring_cells_within(16, 64 << 20), Some(4096));
        // Beyond 16 ranks the preferred size is already the least.
        assert_eq!(ring_cells_within(17, full(17) - 1), None);
        // Every size a creator can pick is read back off its length, and
        // only those are.
        for n in [1, 2, 3, 16, 17, 192] {
            for cells in [MIN_RING_CELLS, MAX_RING_CELLS] {
                assert_eq!(cells_of(n, size(n, cells)), Some(cells));
                assert_eq!(cells_of(n, size(n, cells) + LINE), None);
            }
        }
        assert_eq!(cells_of(2, size(3, 8192)), None);
        assert_eq!(cells_of(2, 0), None);
    }

    /// Creates the job's object as another rank would have, sized to
    /// `len` after `delay` (0: at once).
    fn create_sized(
        job: u32,
        host: u32,
        len: usize,
        delay: Duration,
    ) -> std::thread::JoinHandle<()> {
        let c = CString::new(name(job, host)).unwrap();
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
        // SAFETY: a valid C string.
        let fd = unsafe { libc::shm_open(c.as_ptr(), flags, 0o600) };
        assert!(fd >= 0, "{}", std::io::Error::last_os_error());
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            // SAFETY: our descriptor, closed after.
            unsafe {
                assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
                libc::close(fd);
            }
        })
    }

    #[test]
    fn a_rank_takes_the_ring_size_its_creator_chose_and_waits_for_it() {
        let job = 0xfb00_0000 | std::process::id();
        // A creator that found room only for the smaller rings: the
        // others map them as it sized them, though they would prefer more.
        create_sized(job, 1, size(2, MIN_RING_CELLS), Duration::ZERO)
            .join()
            .unwrap();
        let a = Segment::attach(job, 1, 2).unwrap();
        let b = Segment::attach(job, 1, 2).unwrap();
        assert_eq!((a.cells(), b.cells()), (MIN_RING_CELLS, MIN_RING_CELLS));
        assert!(MIN_RING_CELLS < ring_cells(2));
        assert_eq!(a.ring_offset(1, 1) + ring_bytes(MIN_RING_CELLS), a.len);
        assert!(!exists(a.path()), "unlinked once both attached");
        // A rank that finds the object before its creator sized it waits
        // for the size (and sees a whole ring, not a zero-length one).
        let t = create_sized(job, 2, size(1, MAX_RING_CELLS), Duration::from_millis(50));
        let s = Segment::attach(job, 2, 1).unwrap();
        t.join().unwrap();
        assert_eq!(
            (s.cells(), s.len),
            (MAX_RING_CELLS, size(1, MAX_RING_CELLS))
        );
        assert_eq!(s.ring(0, 0).count(), MAX_RING_CELLS);
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
