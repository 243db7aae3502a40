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
//! others read the ring size off the object's length, so all agree; and
//! each publishes the object's device and inode with its address, so that
//! ranks that mapped different objects of one name (removed and made
//! again between their opens, or each in a `/dev/shm` of its own) never
//! take each other for peers. A fresh object reads as zeros, which is
//! every ring's empty state, so nobody initialises anything; each rank
//! still empties the rings it reads as it attaches, which costs nothing on
//! a fresh object and keeps a leftover's packets from being read
//! ([`Segment::empty_rings_to`]). Each rank
//! maps it and counts itself in the header. The rank that completes the
//! count unlinks the name: from then on the memory lives only in the
//! mappings, and nothing is left in `/dev/shm` however the ranks end.
//! Where some rank never attaches (it found no room, or has a `/dev/shm`
//! of its own), each that did removes the name as it lets the segment
//! go, if it still names this object; a rank that dies before the count
//! is complete leaves the name behind until the runtime's cleanup (the
//! path is registered with it, as for the libfabric rail).
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

/// Which object of the file system a segment is: its device and inode.
/// Ranks of one job that share a host name can still map different
/// objects of the job's name: the name removed and made again between
/// their opens, or a `/dev/shm` of their own each (containers that share
/// the host's name and network but not its IPC namespace). The device
/// tells two fresh tmpfs mounts apart, whose first inodes are alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentId {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

/// A mapped segment.
pub(crate) struct Segment {
    base: *mut u8,
    len: usize,
    ranks: usize,
    /// Cells per ring, as the rank that created the object chose them
    /// ([`ring_cells_within`]).
    cells: usize,
    /// Which object this is: every rank that maps this segment sees the
    /// same, so that ranks in different objects of one name never take
    /// each other for peers.
    id: SegmentId,
    path: String,
    /// The object's descriptor, kept to empty rings with (the name may be
    /// gone by then); closed on drop.
    fd: i32,
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

/// How long a rank may take to have the object: a rank that found it
/// waits this long for its creator to size it (a few system calls away),
/// and one whose object was removed under it tries again until then.
const SIZE_WAIT: Duration = Duration::from_secs(10);

/// Bytes the file system of `fd` can still allocate (`u64::MAX` where it
/// sets no limit: a tmpfs mounted with `size=0` reports no blocks).
fn room(fd: i32, name: &str) -> Result<u64, String> {
    // SAFETY: all zeros is a valid `statvfs` (integers only).
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

/// Why a rank cannot have the segment, and whether it removes the name
/// (`ours`: an object it created, or a leftover it found).
struct Refusal {
    why: String,
    ours: bool,
}

/// A mapping of the job's object.
struct Mapped {
    base: *mut u8,
    len: usize,
    cells: usize,
    id: SegmentId,
    fd: i32,
}

/// The `fstat` of `fd`.
fn stat_fd(fd: i32, name: &str) -> Result<libc::stat, String> {
    // SAFETY: all zeros is a valid `stat` (integers only).
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and struct.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(os_error("fstat", name));
    }
    Ok(st)
}

/// Which object `fd` is open on.
fn object_id(fd: i32, name: &str) -> Result<SegmentId, String> {
    let st = stat_fd(fd, name)?;
    Ok(SegmentId {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// Removes the name `c` if it still names the object open as `fd` (not
/// one another rank has made since).
fn unlink_if_same(c: &CStr, fd: i32) {
    if let Ok(id) = object_id(fd, "") {
        unlink_if_named(c, id);
    }
}

/// Removes the name `c` if it still names object `id`.
fn unlink_if_named(c: &CStr, id: SegmentId) {
    let path = CString::new(format!("/dev/shm{}", c.to_string_lossy())).expect("no NUL");
    // SAFETY: all zeros is a valid `stat` (integers only).
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and struct.
    let named = unsafe { libc::stat(path.as_ptr(), &mut st) } == 0
        && st.st_dev == id.dev
        && st.st_ino == id.ino;
    if named {
        // SAFETY: a valid C string.
        unsafe { libc::shm_unlink(c.as_ptr()) };
    }
}

impl Segment {
    /// Creates or opens the job's segment for `ranks` local ranks and
    /// counts this rank in; the last of them unlinks it.
    pub(crate) fn attach(jobid: u32, host: u32, ranks: usize) -> Result<Segment, String> {
        let name = name(jobid, host);
        let c = CString::new(name.clone()).expect("no NUL in the name");
        let m = Self::open_sized(&c, &name, ranks)?;
        let seg = Segment {
            base: m.base,
            len: m.len,
            ranks,
            cells: m.cells,
            id: m.id,
            path: format!("/dev/shm{name}"),
            fd: m.fd,
        };
        let n = seg.count_in(&c);
        if n as usize > ranks {
            return Err(format!(
                "{name} already had {} ranks attached of {ranks}: a leftover of an earlier job \
                 with the same id (removed now; start the job again)",
                n - 1
            ));
        }
        Ok(seg)
    }

    /// Counts this rank among those attached; the one that completes the
    /// count removes the name `c`. Returns the count with this rank.
    fn count_in(&self, c: &CStr) -> u64 {
        let n = self.attached().fetch_add(1, Ordering::AcqRel) + 1;
        if n as usize >= self.ranks {
            // Every local rank has mapped it. Only if the name still names
            // this object when looked at (a stat, then the unlink): past
            // the count (a leftover's), another rank may have removed it
            // already and a third made a new object of the name, which
            // must not lose it.
            unlink_if_named(c, self.id);
        }
        n
    }

    /// Opens the object, creating and sizing it if this rank comes first,
    /// and maps it.
    fn open_sized(c: &CStr, name: &str, ranks: usize) -> Result<Mapped, String> {
        let deadline = Instant::now() + SIZE_WAIT;
        loop {
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
                    // Removed between the two opens (by a creator that
                    // gave up): this rank tries to create it in turn.
                    let gone = std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT);
                    if gone && Instant::now() < deadline {
                        continue;
                    }
                    return Err(os_error("shm_open", name));
                }
            }
            let r = if created {
                room(fd, name)
                    .map_err(|why| Refusal { why, ours: true })
                    .and_then(|room| Self::size_new(fd, name, ranks, room))
                    .map(Some)
            } else {
                Self::size_found(fd, name, ranks, deadline)
            };
            let r = match r {
                Ok(Some((len, cells))) => object_id(fd, name).and_then(|id| {
                    Ok(Some(Mapped {
                        base: Self::map(fd, len, name)?,
                        len,
                        cells,
                        id,
                        fd,
                    }))
                }),
                Ok(None) => Ok(None),
                Err(Refusal { why, ours }) => {
                    // Only an object this rank made or judged a leftover
                    // is removed, and only while the name is still its.
                    if ours {
                        unlink_if_same(c, fd);
                    }
                    Err(why)
                }
            };
            if let Ok(Some(m)) = r {
                // The descriptor goes with the mapping.
                return Ok(m);
            }
            // SAFETY: our descriptor; nothing is mapped.
            unsafe { libc::close(fd) };
            match r {
                Ok(Some(_)) => unreachable!("returned above"),
                // Its creator gave up and removed it: try again.
                Ok(None) if Instant::now() < deadline => {}
                Ok(None) => {
                    return Err(format!("{name} kept being removed as this rank opened it"))
                }
                Err(why) => return Err(why),
            }
        }
    }

    /// Sizes the object this rank created, on a file system with `room`
    /// bytes left: as large as [`ring_cells`] asks if it fits, else
    /// smaller. The length and the cells per ring.
    fn size_new(fd: i32, name: &str, ranks: usize, room: u64) -> Result<(usize, usize), Refusal> {
        let cells = ring_cells_within(ranks, room).ok_or_else(|| Refusal {
            why: no_room(name, ranks, room),
            ours: true,
        })?;
        let len = size(ranks, cells);
        // SAFETY: a valid descriptor of an object of ours.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            return Err(Refusal {
                why: os_error("ftruncate", name),
                ours: true,
            });
        }
        Ok((len, cells))
    }

    /// The length and cells per ring of an object another rank created,
    /// once that rank has sized it; `None` if that rank gave up and
    /// removed it meanwhile.
    fn size_found(
        fd: i32,
        name: &str,
        ranks: usize,
        deadline: Instant,
    ) -> Result<Option<(usize, usize)>, Refusal> {
        loop {
            let st = stat_fd(fd, name).map_err(|why| Refusal { why, ours: false })?;
            let have = st.st_size as usize;
            if have != 0 {
                return match cells_of(ranks, have) {
                    Some(cells) => Ok(Some((have, cells))),
                    None => Err(Refusal {
                        why: format!(
                            "{name} has {have} bytes, no segment of {ranks} ranks: a leftover \
                             of an earlier job with the same id (removed now; start the job \
                             again)"
                        ),
                        ours: true,
                    }),
                };
            }
            if st.st_nlink == 0 {
                return Ok(None);
            }
            if Instant::now() > deadline {
                return Err(Refusal {
                    why: format!(
                        "{name} was not sized within {} s: a leftover of an earlier job with the \
                         same id, or its creator died (removed now; start the job again)",
                        SIZE_WAIT.as_secs()
                    ),
                    ours: true,
                });
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

    /// What tells this segment from another object of the same name.
    pub(crate) fn id(&self) -> SegmentId {
        self.id
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
        let page = page_size();
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

impl Segment {
    /// Empties every ring to local rank `to`, the rings this rank consumes:
    /// their tail words and cells read as zeros again, a ring's empty
    /// state. Called by `to` as it attaches, before it publishes its
    /// address.
    ///
    /// Why: the object found under the job's name may be a leftover of an
    /// earlier job with the same id (Open MPI's job ids repeat), one in
    /// which some local rank never attached (it used the network rail) and
    /// whose ranks all died without cleanup. Its size and attach count can
    /// fit this job, and its rings then hold that job's packets and tail
    /// positions, which this job would read as its own messages. No rank
    /// writes into a ring to `to` before it has read `to`'s address from
    /// the modex, so nothing of this job's is lost.
    ///
    /// A hole is punched over each ring (`fallocate`): tmpfs frees the
    /// whole pages and zeroes this ring's bytes of the pages it shares with
    /// its neighbours where the object has them, swapped out or not, and
    /// allocates nothing where it has none, so on a fresh object this costs
    /// no memory. Where the file system cannot punch holes, the ring's
    /// bytes are written zeros instead (its pages are then allocated, as
    /// its first use would).
    pub(crate) fn empty_rings_to(&self, to: usize) {
        let len = ring_bytes(self.cells);
        for from in 0..self.ranks {
            let off = self.ring_offset(from, to);
            // SAFETY: our descriptor; the range is this ring's, within the
            // object, and no other process uses the ring yet (see above).
            let r = unsafe {
                libc::fallocate(
                    self.fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off as libc::off_t,
                    len as libc::off_t,
                )
            };
            if r != 0 {
                // SAFETY: the ring's bytes, inside our mapping, used by no
                // other process yet.
                unsafe { std::ptr::write_bytes(self.base.add(off), 0, len) };
            }
        }
    }
}

/// The system's page size.
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

#[cfg(all(test, not(loom)))]
impl Segment {
    /// Of the whole pages of the cells of the ring from `from` to `to`,
    /// how many hold memory (`mincore`: allocated in the shared object, by
    /// whichever rank), and how many there are.
    pub(crate) fn resident_pages(&self, from: usize, to: usize) -> (usize, usize) {
        let page = page_size();
        let off = self.ring_offset(from, to) + LINE;
        let start = off.div_ceil(page) * page;
        let end = (off + self.cells * CELL) / page * page;
        self.resident_within(start, end)
    }

    /// As [`Segment::resident_pages`], over every page the ring touches,
    /// its tail line and the pages it shares with its neighbours included.
    pub(crate) fn resident_span(&self, from: usize, to: usize) -> (usize, usize) {
        let page = page_size();
        let off = self.ring_offset(from, to);
        let start = off / page * page;
        let end = (off + ring_bytes(self.cells)).div_ceil(page) * page;
        self.resident_within(start, end)
    }

    /// The bytes of the ring from `from` to `to`, tail line and cells.
    pub(crate) fn ring_image(&self, from: usize, to: usize) -> Vec<u8> {
        let off = self.ring_offset(from, to);
        let mut v = vec![0u8; ring_bytes(self.cells)];
        // SAFETY: the ring lies within the mapping; the tests that call
        // this have no writer running.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(off), v.as_mut_ptr(), v.len()) };
        v
    }

    /// Pages from `start` to `end` (page-aligned offsets in the mapping)
    /// that hold memory, and how many there are.
    fn resident_within(&self, start: usize, end: usize) -> (usize, usize) {
        let page = page_size();
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
        // A segment some local rank never attached to (it had no room, a
        // /dev/shm of its own, or died first) still has its name: removed
        // now if it is still this object's, since the runtime's cleanup
        // does not see a /dev/shm of this rank's own. Every rank that
        // shares it attached during MPI_Init, before the modex fence, so
        // none comes after this.
        if (self.attached().load(Ordering::Acquire) as usize) < self.ranks {
            if let Ok(name) = CString::new(&self.path["/dev/shm".len()..]) {
                unlink_if_named(&name, self.id);
            }
        }
        // SAFETY: our mapping, no longer used (the rail's rings are gone),
        // and our descriptor.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
            libc::close(self.fd);
        }
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
#[path = "segment_tests.rs"]
mod tests;
