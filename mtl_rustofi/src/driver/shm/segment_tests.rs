//! The segment's sizing, sharing and removal, on this machine's
//! `/dev/shm` (objects named after this process's id, removed again).

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
    // (64 MiB of cells, their tail lines and the header) do not fit, the smaller ones do.
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

/// Creates the job's object as another rank would have: a descriptor
/// of it, still empty.
fn create(job: u32, host: u32) -> i32 {
    let c = CString::new(name(job, host)).unwrap();
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    // SAFETY: a valid C string.
    let fd = unsafe { libc::shm_open(c.as_ptr(), flags, 0o600) };
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
    fd
}

/// Creates the job's object as another rank would have, sized to
/// `len` after `delay` (0: at once).
fn create_sized(job: u32, host: u32, len: usize, delay: Duration) -> std::thread::JoinHandle<()> {
    let fd = create(job, host);
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
fn a_creator_sizes_the_object_to_the_room_or_refuses_and_removes_it() {
    let job = 0xfa00_0000 | std::process::id();
    let nm = name(job, 1);
    let full = size(4, ring_cells(4)) as u64;
    let least = size(4, MIN_RING_CELLS) as u64;
    for (room, cells) in [
        (u64::MAX, 8192),
        (full, 8192),
        (full - 1, 4096),
        (least, 4096),
    ] {
        let fd = create(job, 1);
        let r = Segment::size_new(fd, &nm, 4, room).ok();
        assert_eq!(r, Some((size(4, cells), cells)), "room {room}");
        // The object has that length, and a rank that finds it reads
        // the ring size back.
        let found = Segment::size_found(fd, &nm, 4, Instant::now())
            .ok()
            .flatten();
        assert_eq!(found, Some((size(4, cells), cells)));
        unlink(job, 1);
        // SAFETY: our descriptor.
        unsafe { libc::close(fd) };
    }
    let fd = create(job, 1);
    let e = Segment::size_new(fd, &nm, 4, least - 1).err().unwrap();
    assert!(e.ours, "a creator removes what it made");
    assert!(e.why.contains("not enough room in /dev/shm"), "{}", e.why);
    assert!(
        e.why.contains(&format!("need at least {least} bytes")),
        "{}",
        e.why
    );
    unlink(job, 1);
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    // The room of the machine's /dev/shm is read (some, or no limit).
    let fd = create(job, 1);
    assert!(room(fd, &nm).unwrap() > 0);
    unlink(job, 1);
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
}

#[test]
fn a_rank_whose_creator_gave_up_makes_the_object_itself() {
    let job = 0xf900_0000 | std::process::id();
    // Another rank created the object and, finding no room, removes
    // it while this one waits for its size.
    let fd = create(job, 1);
    let gone = object_id(fd, "test").unwrap();
    let c = CString::new(name(job, 1)).unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: a valid C string and our descriptor.
        unsafe {
            assert_eq!(libc::shm_unlink(c.as_ptr()), 0);
            libc::close(fd);
        }
    });
    let s = Segment::attach(job, 1, 1).unwrap();
    t.join().unwrap();
    // This rank made a new object, sized as it prefers, and did not
    // wait out SIZE_WAIT.
    assert_eq!(s.cells(), ring_cells(1));
    assert_ne!(s.id(), gone);
    assert!(!exists(s.path()), "unlinked once its one rank attached");
}

#[test]
fn a_rank_that_refuses_a_leftover_removes_only_that_object() {
    let job = 0xf800_0000 | std::process::id();
    // A leftover never sized: refused once SIZE_WAIT has passed
    // (here, at once) and removed.
    let fd = create(job, 1);
    let nm = name(job, 1);
    let e = Segment::size_found(fd, &nm, 2, Instant::now())
        .err()
        .unwrap();
    assert!(e.ours && e.why.contains("not sized"), "{}", e.why);
    // Between that rank's look and its removal, the name was made
    // again by another: the new object keeps its name.
    unlink(job, 1);
    let fresh = create(job, 1);
    let c = CString::new(nm.clone()).unwrap();
    unlink_if_same(&c, fd);
    assert!(
        exists(&format!("/dev/shm{nm}")),
        "another rank's object was removed"
    );
    unlink_if_same(&c, fresh);
    assert!(
        !exists(&format!("/dev/shm{nm}")),
        "the object itself is removed"
    );
    // SAFETY: our descriptors.
    unsafe {
        libc::close(fd);
        libc::close(fresh);
    }
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
    assert_eq!(a.id(), b.id(), "one object");
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

#[test]
fn a_segment_not_every_rank_attached_to_is_removed_when_dropped() {
    let job = 0xf700_0000 | std::process::id();
    let a = Segment::attach(job, 1, 2).unwrap();
    let path = a.path().to_string();
    assert!(exists(&path), "named while a rank is missing");
    // Another object under the name by then (a rank that removed a
    // leftover and made it again) keeps its name.
    unlink(job, 1);
    let b = Segment::attach(job, 1, 3).unwrap();
    drop(a);
    assert!(exists(&path), "another object's name was removed");
    drop(b);
    assert!(
        !exists(&path),
        "left behind by a rank whose peers never came"
    );
    // One every rank attached to was removed as the last came, and its
    // drop removes nothing of the same name made since.
    let c = Segment::attach(job, 1, 1).unwrap();
    let d = Segment::attach(job, 1, 2).unwrap();
    drop(c);
    assert!(exists(&path));
    drop(d);
    assert!(!exists(&path));
}

/// A rank that counts itself into an object whose count is complete
/// already (a leftover's: the rank that completed it removed the name,
/// and a third rank made a new object of it meanwhile) removes nothing:
/// the new object keeps its name, for the ranks still to come.
#[test]
fn a_rank_past_the_count_leaves_a_newer_objects_name() {
    let job = 0xf500_0000 | std::process::id();
    let c = CString::new(name(job, 1)).unwrap();
    let old = Segment::attach(job, 1, 2).unwrap();
    let path = old.path().to_string();
    // Another rank completes the old object's count and removes its name.
    assert_eq!(old.count_in(&c), 2);
    assert!(
        !exists(&path),
        "the rank that completes the count removes the name"
    );
    // A third rank finds no name and makes a new object of it.
    let new = Segment::attach(job, 1, 2).unwrap();
    assert_ne!(new.id(), old.id());
    assert!(exists(&path));
    // The late rank that had mapped the old object counts itself in.
    assert_eq!(old.count_in(&c), 3);
    assert!(
        exists(&path),
        "a count past the ranks removed a newer object's name"
    );
    // The new object's own last rank still removes it.
    assert_eq!(new.count_in(&c), 2);
    assert!(!exists(&path));
}

/// An object of the job's name left by an earlier job with the same id
/// (one rank never attached, then all died) can pass every check of
/// `attach`: its rings still hold that job's packets and tail positions.
/// A rank empties the rings it consumes as it attaches, every byte of them
/// from the tail line to the last cell, and leaves its neighbours' bytes
/// on the pages they share untouched; on a fresh object that allocates
/// nothing.
#[test]
fn a_leftovers_packets_are_not_read_as_this_jobs() {
    use super::super::ring::{Consumer, Producer};
    let job = 0xf600_0000 | std::process::id();
    // The earlier job: local rank 0 of 3 attached; the rings to rank 1
    // full to their last cell, with a tail position in one.
    let old = Segment::attach(job, 1, 3).unwrap();
    let fill = |from: usize, to: usize| {
        let mut p = Producer::new(old.ring(from, to));
        let mut n = 0u32;
        while p.push(&[&n.to_le_bytes()]).is_ok() {
            n += 1;
        }
        n
    };
    for from in 0..3 {
        fill(from, 1);
        let (held, pages) = old.resident_pages(from, 1);
        assert_eq!(held, pages, "ring({from}, 1) holds memory throughout");
    }
    let mut c = Consumer::new(old.ring(2, 1));
    assert!(c.pop(|_| {}).unwrap(), "a tail position left behind");
    // Its neighbours: the ring before ring(0, 1) full to its last cell,
    // the one after it with packets in its first cells and a tail.
    let filled = fill(0, 0);
    let mut after = Producer::new(old.ring(0, 2));
    after.push(&[b"keep-1"]).unwrap();
    after.push(&[b"keep-2"]).unwrap();
    let mut after_c = Consumer::new(old.ring(0, 2));
    assert!(after_c.pop(|_| {}).unwrap());
    let after_tail = old.ring(0, 2).tail().load(Ordering::Relaxed);
    assert_ne!(after_tail, 0);

    // This job's local rank 1 finds the object: the same size, one rank
    // attached of three.
    let new = Segment::attach(job, 1, 3).unwrap();
    assert_eq!(new.id(), old.id(), "the leftover itself");
    assert_ne!(new.ring(2, 1).tail().load(Ordering::Relaxed), 0);
    new.empty_rings_to(1);
    for from in 0..3 {
        // Asked first: reading a page of a hole allocates it.
        assert_eq!(
            new.resident_pages(from, 1).0,
            0,
            "ring({from}, 1): its whole pages freed"
        );
        let image = new.ring_image(from, 1);
        let stale = image.iter().filter(|&&b| b != 0).count();
        assert_eq!(stale, 0, "ring({from}, 1): bytes left of {}", image.len());
        assert!(!Consumer::new(new.ring(from, 1)).pop(|_| {}).unwrap());
    }
    // The neighbours are as they were.
    let mut c0 = Consumer::new(new.ring(0, 0));
    for i in 0..filled {
        let mut got = Vec::new();
        assert!(c0.pop(|x| got.extend_from_slice(x)).unwrap(), "packet {i}");
        assert_eq!(got, i.to_le_bytes(), "packet {i}");
    }
    assert_eq!(new.ring(0, 2).tail().load(Ordering::Relaxed), after_tail);
    let mut got = Vec::new();
    assert!(after_c.pop(|x| got.extend_from_slice(x)).unwrap());
    assert_eq!(got, b"keep-2");
    drop(new);
    drop(old);
    assert!(!exists(&format!("/dev/shm{}", name(job, 1))));

    // A fresh object: emptying its rings allocates no page of them.
    let fresh = Segment::attach(job, 1, 3).unwrap();
    fresh.empty_rings_to(2);
    for from in 0..3 {
        assert_eq!(fresh.resident_span(from, 2).0, 0, "ring({from}, 2)");
    }
}
