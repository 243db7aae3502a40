//! Linux cross-memory attach: the read rendezvous' "RMA read" between
//! local ranks is one `process_vm_readv` from the sender's buffer (named
//! by its address and the sender's pid) straight into the receive buffer.
//!
//! It needs ptrace access to the peer. Like btl/vader, every rank allows
//! any process of its user to read it (`PR_SET_PTRACER_ANY`), which is
//! what Yama's `ptrace_scope` 1 (Debian's and Ubuntu's default) asks for;
//! scope 2 or 3, or a container whose seccomp profile refuses the call,
//! rule it out: [`probe`] finds that out at start, and the rail then uses
//! the message rendezvous through the rings instead.

use crate::usermem::Region;
use std::sync::atomic::{AtomicU64, Ordering};

/// A word in every rank's memory that peers read once to check that
/// cross-memory attach reaches it, and reaches that rank: its address and
/// its value travel in the modex. The value is drawn at random once per
/// process. With a constant, a peer that named another process passed the
/// check and then read that process's memory for its messages: a pid of
/// another PID namespace (containers that share `/dev/shm` but not their
/// process ids) names some other process here, and with address
/// randomisation off one of the same program, this process included, has
/// the word at the same address.
static PROBE: AtomicU64 = AtomicU64::new(0);

/// This process's probe word: its address and its value (drawn on first
/// use, never 0).
pub(crate) fn probe_word() -> (u64, u64) {
    let addr = &PROBE as *const AtomicU64 as u64;
    let v = PROBE.load(Ordering::Relaxed);
    if v != 0 {
        return (addr, v);
    }
    let fresh = random_word();
    match PROBE.compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => (addr, fresh),
        Err(drawn) => (addr, drawn),
    }
}

/// This process's PID namespace (the inode of `/proc/self/ns/pid`; 0
/// where `/proc` does not say), published with its pid: a peer's pid of
/// another namespace names another process here, or none.
pub(crate) fn own_pid_ns() -> u64 {
    static OWN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
    })
}

/// 64 random bits, never 0: the kernel's, or where `getrandom` is missing
/// (kernels before 3.17) the time, the process id and an address, mixed.
fn random_word() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into our variable.
    // (Non-blocking: early after boot the pool may not be ready, and the
    // fallback below is good enough to tell processes apart.)
    let n = unsafe {
        libc::getrandom(
            &mut v as *mut u64 as *mut libc::c_void,
            8,
            libc::GRND_NONBLOCK,
        )
    };
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u64;
        // splitmix64's finaliser spreads the few bits that differ.
        let mut z = t ^ pid.rotate_left(32) ^ (&v as *const u64 as u64);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        v = z ^ (z >> 31);
    }
    v.max(1)
}

/// Allows peers to read this process and checks that the call works;
/// `Err` says why it cannot be used.
pub(crate) fn probe() -> Result<(), String> {
    // SAFETY: prctl with these constants only changes who may ptrace us.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
        let scope = s.trim();
        if scope != "0" && scope != "1" {
            return Err(format!(
                "kernel.yama.ptrace_scope = {scope} forbids reading another process's memory"
            ));
        }
    }
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() } as u32;
    let (addr, value) = probe_word();
    check_peer(me, addr, value)
}

/// Reads a peer's probe word at `addr` in process `pid`, which must hold
/// `value`, as the peer published.
pub(crate) fn check_peer(pid: u32, addr: u64, value: u64) -> Result<(), String> {
    let mut v = 0u64;
    let local = Region {
        addr: &mut v as *mut u64 as usize,
        len: 8,
    };
    // SAFETY: `local` is our own 8-byte variable.
    match unsafe { read(pid, local, addr) } {
        Ok(()) if v == value => Ok(()),
        Ok(()) => Err(format!(
            "process {pid} does not hold the peer's probe word at 0x{addr:x}: it is another \
             process (the peer's process id is one of another PID namespace?)"
        )),
        Err(e) => Err(format!(
            "process_vm_readv from process {pid}: {}",
            std::io::Error::from_raw_os_error(e)
        )),
    }
}

/// Reads `local.len` bytes at `remote` in process `pid` into `local`;
/// `Err` is the errno.
///
/// # Safety
/// `local` must be writable memory of this process.
pub(crate) unsafe fn read(pid: u32, local: Region, remote: u64) -> Result<(), i32> {
    let mut done = 0;
    while done < local.len {
        let l = libc::iovec {
            iov_base: (local.addr + done) as *mut libc::c_void,
            iov_len: local.len - done,
        };
        let r = libc::iovec {
            iov_base: (remote as usize + done) as *mut libc::c_void,
            iov_len: local.len - done,
        };
        // SAFETY: one local iovec in writable memory (the contract); the
        // kernel checks the remote one against the peer's mappings.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &l, 1, &r, 1, 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
        if n == 0 {
            return Err(libc::EFAULT);
        }
        done += n as usize;
    }
    Ok(())
}

/// Most reads one [`read_many`] call makes (far below the kernel's
/// `IOV_MAX`, and enough to spread the call's cost over a window of
/// messages).
pub(crate) const MANY: usize = 16;

/// Reads several `(local, remote)` pairs from process `pid` with one
/// system call, in order, and returns how many bytes arrived: all of them,
/// or a prefix (the kernel stops at the first pair it cannot complete; an
/// error reads nothing). The caller finishes what is missing with [`read`],
/// which also names the error. The call costs about a microsecond however
/// much it moves, as much as copying 16 KiB: the window of mid-sized
/// rendezvous messages that arrive together shares it.
///
/// # Safety
/// Every `local` must be writable memory of this process; at most
/// [`MANY`] pairs.
pub(crate) unsafe fn read_many(pid: u32, parts: &[(Region, u64)]) -> usize {
    assert!(parts.len() <= MANY, "at most {MANY} reads in one call");
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut l = [empty; MANY];
    let mut r = [empty; MANY];
    for (i, (local, remote)) in parts.iter().enumerate() {
        l[i] = libc::iovec {
            iov_base: local.addr as *mut libc::c_void,
            iov_len: local.len,
        };
        r[i] = libc::iovec {
            iov_base: *remote as usize as *mut libc::c_void,
            iov_len: local.len,
        };
    }
    let n = parts.len() as libc::c_ulong;
    // SAFETY: the local iovecs lie in writable memory (the contract); the
    // kernel checks the remote ones against the peer's mappings.
    let got =
        unsafe { libc::process_vm_readv(pid as libc::pid_t, l.as_ptr(), n, r.as_ptr(), n, 0) };
    got.max(0) as usize
}

/// Whether process `pid` is gone.
pub(crate) fn gone(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_reports_a_bad_address() {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as u32;
        probe()
            .expect("cross-memory attach works on the test machines (root or ptrace_scope <= 1)");
        let src = vec![7u8; 100_000];
        let mut dst = vec![0u8; 100_000];
        let local = Region {
            addr: dst.as_mut_ptr() as usize,
            len: dst.len(),
        };
        // SAFETY: `dst` is ours and writable.
        unsafe { read(me, local, src.as_ptr() as u64) }.unwrap();
        assert_eq!(src, dst);
        let mut one = [0u8; 8];
        let local = Region {
            addr: one.as_mut_ptr() as usize,
            len: 8,
        };
        // SAFETY: as above.
        assert_eq!(unsafe { read(me, local, 8) }, Err(libc::EFAULT));
        let (addr, value) = probe_word();
        assert!(check_peer(me, 8, value).is_err());
        assert_eq!(check_peer(me, addr, value), Ok(()));
        assert_eq!(probe_word(), (addr, value), "drawn once");
        // The word where the peer said, but another value: another process
        // than the one that published it (as a pid of another PID
        // namespace names here), refused rather than read from.
        let e = check_peer(me, addr, value ^ 1).unwrap_err();
        assert!(e.contains("another process"), "{e}");
        assert!(!gone(me));
    }

    #[test]
    fn reads_many_at_once_and_stops_at_a_bad_address() {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as u32;
        probe().expect("cross-memory attach works on the test machines");
        let src: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i + 1; 5000 + i as usize]).collect();
        let mut dst: Vec<Vec<u8>> = src.iter().map(|s| vec![0u8; s.len()]).collect();
        let mut parts: Vec<(Region, u64)> = dst
            .iter_mut()
            .zip(&src)
            .map(|(d, s)| {
                (
                    Region {
                        addr: d.as_mut_ptr() as usize,
                        len: d.len(),
                    },
                    s.as_ptr() as u64,
                )
            })
            .collect();
        let total: usize = src.iter().map(Vec::len).sum();
        // SAFETY: every local region is one of `dst`'s vectors.
        assert_eq!(unsafe { read_many(me, &parts) }, total);
        assert_eq!(dst, src);
        // A bad remote address third: the first two arrive, nothing after.
        for d in &mut dst {
            d.fill(0);
        }
        parts[2].1 = 8;
        // SAFETY: as above.
        let got = unsafe { read_many(me, &parts) };
        assert_eq!(got, src[0].len() + src[1].len());
        assert_eq!(dst[..2], src[..2]);
        assert!(dst[2..].iter().all(|d| d.iter().all(|&b| b == 0)));
    }
}
