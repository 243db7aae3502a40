//! A single-producer, single-consumer ring of 32-byte cells in shared
//! memory: one per ordered pair of local ranks, carrying whole packets.
//! Two cells share a cache line, so that the commonest packet, a short
//! eager message of up to 8 bytes (`super::short`), takes half a
//! line: a window of them moves half as many lines between the cores.
//!
//! A packet takes `cells(len)` consecutive cells: an 8-byte header word at
//! the start of its first cell, then its bytes. The header word is
//! `(position as u32) << 32 | len`, where `position` counts the cells ever
//! written to the ring; it is stored last, with release ordering, so a
//! consumer that reads the word its own position expects (acquire) sees
//! the whole packet. A packet never wraps: when it would not fit before
//! the end, the producer writes a skip word (`len` = [`SKIP`]) and starts
//! again at cell 0. The consumer, once done with a packet, zeroes the
//! first word of each of its cells and then publishes how far it has read
//! (`tail`, release); the producer reads `tail` (acquire) only when its
//! last view of it shows too little room. So a cell the producer has not
//! written in this lap always starts with 0, never with user bytes that
//! could pass for a header, and neither side takes a lock or makes a
//! system call. The argument in full is in `mtl_rustofi/CONCURRENCY.md`.
//!
//! The memory is reached through [`Cells`]: raw shared memory in the
//! component, loom's tracked cells in the model checks at the end of this
//! file, which run this code.

use crate::sync::{AtomicU64, Ordering};

/// Bytes per cell (half a cache line).
pub(crate) const CELL: usize = 32;
/// Bytes of a cache line: the consumer's `tail` has one of its own, apart
/// from the cells the producer writes.
pub(crate) const LINE: usize = 64;
const _: () = assert!(LINE.is_multiple_of(CELL));
/// Cells to a line (a ring's cells are a whole number of lines).
const CELLS_PER_LINE: u64 = (LINE / CELL) as u64;
/// Bytes of the header word.
pub(crate) const WORD: usize = 8;
/// `len` of a skip word: the rest of the ring up to its end is unused.
const SKIP: u32 = u32::MAX;

/// Cells a packet of `len` bytes takes.
#[inline]
pub(crate) const fn cells(len: usize) -> usize {
    (WORD + len).div_ceil(CELL)
}

/// The memory of one ring: `count` cells (a power of two, so that a
/// position maps to its cell with a mask, not a division) and the
/// consumer's `tail`.
///
/// # Safety
/// `word(i)` must return the atomic first word of cell `i` for every
/// `i < count()`, `write`/`read` must reach the bytes of cells
/// `[first, first + cells(len))` after the first cell's word, in order,
/// and `write_cell` the bytes of its cell after the word.
pub(crate) unsafe trait Cells {
    fn count(&self) -> usize;
    fn word(&self, cell: usize) -> &AtomicU64;
    fn tail(&self) -> &AtomicU64;
    /// Copies `parts`, one after the other, into the packet at `cell`.
    ///
    /// # Safety
    /// The cells must be the producer's (free, per the ring protocol).
    unsafe fn write(&self, cell: usize, parts: &[&[u8]]);
    /// Hands the bytes of the cell at `cell` after its header word to
    /// `fill`, which writes a packet that fits there.
    ///
    /// # Safety
    /// The cell must be the producer's (free, per the ring protocol).
    unsafe fn write_cell(&self, cell: usize, fill: impl FnOnce(&mut [u8; CELL - WORD]));
    /// Hands the `len` bytes of the packet at `cell` to `f`.
    ///
    /// # Safety
    /// The cells must hold a published packet not yet released.
    unsafe fn read<R>(&self, cell: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> R;
    /// A hint that the producer writes the cell at `cell` soon: fetch its
    /// line for writing now, so that the transfer from the consumer's
    /// cache overlaps the work before that write. No effect on the ring's
    /// contents.
    fn prefetch_for_write(&self, cell: usize);
}

/// The cell of position `pos` in a ring of `count` cells.
#[inline]
fn cell_of(pos: u64, count: usize) -> usize {
    debug_assert!(count.is_power_of_two());
    (pos & (count as u64 - 1)) as usize
}

/// The `tail` a consumer publishes once it has refused its ring (a
/// malformed word): a position no producer reaches, so that the
/// producer's next look at `tail` ends its sends instead of leaving them
/// to wait for room for ever, and one whose cell's word practically never
/// carries its stamp (stamps keep a position's low 32 bits: only a packet
/// written after the close at a position whose low 32 bits are all ones
/// would), so that the ring no longer looks ready to anyone.
const CLOSED: u64 = u64::MAX;

/// Why the ring took no packet.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The ring is full: try again after the consumer has made room.
    Full,
    /// The consumer met a malformed word in this ring and reads it no
    /// more ([`CLOSED`]).
    Closed,
    /// The consumer's published position is one it cannot have reached:
    /// behind where it was last seen, or past what was written
    /// ([`Producer::published_tail`] tells it). The ring's memory was
    /// overwritten by something other than its two sides; trusting it
    /// would write over packets not yet read.
    BadTail,
}

/// The ring holds a header word no producer following this protocol
/// writes: its length cannot be a packet of this ring, or it names
/// another position than the reader's.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Malformed {
    pub(crate) len: u32,
    pub(crate) cell: usize,
    /// The position the word names and the reader's (their low 32 bits),
    /// where the two differ.
    pub(crate) stamp: Option<(u32, u32)>,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some((found, expected)) = self.stamp {
            write!(
                f,
                "the ring's cell {} holds a header word of position {found} where the reader \
                 is at position {expected} (low 32 bits)",
                self.cell
            )
        } else if self.len == SKIP {
            write!(
                f,
                "the ring's cell {} holds a skip to the ring's end where no packet needs one",
                self.cell
            )
        } else {
            write!(f, "the ring's cell {} claims {} bytes", self.cell, self.len)
        }
    }
}

/// Largest packet a ring of `count` cells carries: half of it, so that a
/// packet after a skip always fits once the consumer has caught up.
pub(crate) const fn max_packet(count: usize) -> usize {
    count / 2 * CELL - WORD
}

/// The producer's side: its position and its last view of `tail`.
pub(crate) struct Producer<C> {
    mem: C,
    head: u64,
    tail_seen: u64,
}

impl<C: Cells> Producer<C> {
    pub(crate) fn new(mem: C) -> Self {
        assert!(
            mem.count().is_power_of_two(),
            "a ring's cells are a power of two"
        );
        Producer {
            mem,
            head: 0,
            tail_seen: 0,
        }
    }

    /// Cells written to the ring so far (skips included).
    #[inline]
    pub(crate) fn written(&self) -> u64 {
        self.head
    }

    /// Appends one packet made of `parts` (at most [`max_packet`] bytes in
    /// all, the caller's limit). Never overwrites unread cells: a full
    /// ring refuses the packet.
    #[inline]
    pub(crate) fn push(&mut self, parts: &[&[u8]]) -> Result<(), Refused> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let count = self.mem.count();
        debug_assert!(len > 0 && len <= max_packet(count));
        let n = cells(len);
        let at = cell_of(self.head, count);
        let pad = if n > count - at { count - at } else { 0 };
        let need = (pad + n) as u64;
        if count as u64 - (self.head - self.tail_seen) < need {
            self.room_after_reload(need)?;
        }
        if pad > 0 {
            self.mem
                .word(at)
                .store(stamp(self.head, SKIP), Ordering::Release);
            self.head += pad as u64;
        }
        let at = cell_of(self.head, count);
        // SAFETY: cells [at, at + n) lie between head and tail + count,
        // which the consumer has released (acquire load of tail above, or
        // an earlier one covering them).
        unsafe { self.mem.write(at, parts) };
        self.mem
            .word(at)
            .store(stamp(self.head, len as u32), Ordering::Release);
        self.head += n as u64;
        Ok(())
    }

    /// Appends one packet of `len` bytes (at most `CELL - WORD`: it fits
    /// one cell, which never needs a skip word before it), written into
    /// the cell by `fill`; the same as [`Producer::push`] of those bytes,
    /// without the walk over parts and the check for the ring's end.
    // Always inlined: it is the body of the commonest send, and the
    // prefetch's inline assembly makes the compiler's own estimate call
    // it out of line (a call, and the fill's closure spilled for it).
    #[inline(always)]
    pub(crate) fn push_cell(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [u8; CELL - WORD]),
    ) -> Result<(), Refused> {
        let count = self.mem.count();
        debug_assert!(len > 0 && len <= CELL - WORD && len <= max_packet(count));
        // The position is read once, before `fill` writes: the compiler
        // cannot tell those writes from this ring's fields, and read
        // `head` twice again after them (the header word's slot, taken
        // before `fill` too, cost more than it saved: a register held).
        let head = self.head;
        if head - self.tail_seen >= count as u64 {
            self.room_after_reload(1)?;
        }
        let at = cell_of(head, count);
        // SAFETY: the cell at `head` lies below tail + count, so the
        // consumer has released it (acquire load of tail above, or an
        // earlier one covering it).
        unsafe { self.mem.write_cell(at, fill) };
        self.mem
            .word(at)
            .store(stamp(head, len as u32), Ordering::Release);
        self.head = head + 1;
        Ok(())
    }

    /// Whether `need` cells are free by a new view of the consumer's
    /// published position (acquire: the cells it released are ours
    /// again). Only a value from `tail_seen` to `head` is one the consumer
    /// can have published, or [`CLOSED`]; any other is refused, and
    /// `tail_seen` keeps its last true value, so that no later call trusts
    /// it either. (Positions count cells in 64 bits: they never wrap.)
    /// Out of line: a send reaches it once in a ring's worth of cells.
    #[cold]
    #[inline(never)]
    fn room_after_reload(&mut self, need: u64) -> Result<(), Refused> {
        let tail = self.mem.tail().load(Ordering::Acquire);
        if tail == CLOSED {
            return Err(Refused::Closed);
        }
        if tail < self.tail_seen || tail > self.head {
            return Err(Refused::BadTail);
        }
        self.tail_seen = tail;
        if (self.mem.count() as u64) - (self.head - tail) < need {
            return Err(Refused::Full);
        }
        Ok(())
    }

    /// The consumer's published position as it stands (for a message).
    pub(crate) fn published_tail(&self) -> u64 {
        self.mem.tail().load(Ordering::Relaxed)
    }

    /// Asks for the lines of `n` cells after the lines the next packet of
    /// `n` cells would take, as far as they lie before the ring's end: a
    /// hint for a producer in a run of sends, so that taking those lines
    /// from the consumer's cache (which cleared them) overlaps the sends
    /// before. Not the next packet's lines, nor the line its last cell
    /// shares: a consumer that has caught up reads its first cell in a
    /// loop, and a line taken from under it only comes back before the
    /// write.
    #[inline(always)]
    pub(crate) fn prefetch_ahead(&self, n: usize) {
        let count = self.mem.count();
        let start = (self.head + PREFETCH_GAP * n as u64).next_multiple_of(CELLS_PER_LINE);
        let at = cell_of(start, count);
        for c in (at..(at + n).min(count)).step_by(CELLS_PER_LINE as usize) {
            self.mem.prefetch_for_write(c);
        }
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn mem(&self) -> &C {
        &self.mem
    }
}

/// Where [`Producer::prefetch_ahead`]'s hint starts, in packets of the
/// size just written past `head` (then rounded up to a line): 1 skips the
/// next packet's lines, which a consumer that has caught up is reading in
/// a loop (0, the next packet's, measured 1–5 % slower in a window of
/// sends with 64-byte cells).
const PREFETCH_GAP: u64 = 1;

/// The header word of a packet (or skip) at position `pos`.
#[inline]
fn stamp(pos: u64, len: u32) -> u64 {
    (pos as u32 as u64) << 32 | len as u64
}

/// The consumer's side: its position.
pub(crate) struct Consumer<C> {
    mem: C,
    tail: u64,
    /// [`max_packet`] of the ring.
    max_len: usize,
    /// Set once a malformed word was met: nothing more is read.
    broken: bool,
}

impl<C: Cells> Consumer<C> {
    pub(crate) fn new(mem: C) -> Self {
        let count = mem.count();
        assert!(count.is_power_of_two(), "a ring's cells are a power of two");
        let max_len = max_packet(count);
        // So that a length over `max_len` also tells a skip word.
        assert!(
            max_len < SKIP as usize,
            "a ring's packets are shorter than SKIP"
        );
        Consumer {
            mem,
            tail: 0,
            max_len,
            broken: false,
        }
    }

    /// Hands the next packet, if one is there, to `f` and releases its
    /// cells afterwards. Returns whether a packet was read.
    #[inline]
    pub(crate) fn pop(&mut self, f: impl FnOnce(&[u8])) -> Result<bool, Malformed> {
        let count = self.mem.count();
        let mut at = cell_of(self.tail, count);
        let mut w = self.mem.word(at).load(Ordering::Acquire);
        // An empty ring, the common answer, is told by this one load: the
        // cell at the reader's position holds 0 until the producer
        // publishes a packet there (see `Consumer::stamped`). A broken
        // ring is checked for after it (its malformed word stays at
        // `tail`).
        if w == 0 || self.broken {
            return Ok(false);
        }
        if !self.stamped(w) {
            return Err(self.refuse_stamp(w, at));
        }
        if w as u32 == SKIP {
            // A producer writes a skip only where the packet after it does
            // not fit before the ring's end, so fewer than a largest
            // packet's cells before it; a skip nearer the start is not one
            // it wrote (and would put this side a lap ahead of it).
            if count - at >= cells(self.max_len) {
                return Err(self.refuse(SKIP, at));
            }
            self.mem.word(at).store(0, Ordering::Relaxed);
            self.tail += (count - at) as u64;
            at = 0;
            w = self.mem.word(0).load(Ordering::Acquire);
            if w == 0 {
                // The skip's room is the producer's again.
                self.mem.tail().store(self.tail, Ordering::Release);
                return Ok(false);
            }
            if !self.stamped(w) {
                return Err(self.refuse_stamp(w, 0));
            }
        }
        // A second skip word, or any other length no packet of this ring
        // has (a skip's `len` is over `max_len`; no packet is empty), is
        // malformed.
        let len = w as u32;
        let n = cells(len as usize);
        if (len as usize).wrapping_sub(1) >= self.max_len || n > count - at {
            return Err(self.refuse(len, at));
        }
        // SAFETY: the word at `at` carries our position, stored with
        // release after the packet's bytes: the packet is published, and
        // it is ours until we store `tail` past it.
        unsafe { self.mem.read(at, len as usize, f) };
        // The first cell apart: most packets take one.
        self.mem.word(at).store(0, Ordering::Relaxed);
        for c in at + 1..at + n {
            self.mem.word(c).store(0, Ordering::Relaxed);
        }
        self.tail += n as u64;
        self.mem.tail().store(self.tail, Ordering::Release);
        Ok(true)
    }

    /// Stops reading at the malformed word `len` at `cell`. Inlined: a
    /// call here, even a cold one, cost the read of every packet
    /// registers.
    #[inline(always)]
    fn refuse(&mut self, len: u32, cell: usize) -> Malformed {
        self.broken = true;
        Malformed {
            len,
            cell,
            stamp: None,
        }
    }

    /// Stops reading at the word `w` at `cell`, which names another
    /// position than ours. Inlined as [`Consumer::refuse`] is.
    #[inline(always)]
    fn refuse_stamp(&mut self, w: u64, cell: usize) -> Malformed {
        self.broken = true;
        Malformed {
            len: w as u32,
            cell,
            stamp: Some(((w >> 32) as u32, self.tail as u32)),
        }
    }

    /// Gives the ring up after [`Consumer::pop`] refused a malformed word
    /// (it reads nothing more from then on): publishes [`CLOSED`], so
    /// that the producer's sends fail instead of waiting for room, and a
    /// look without the token ([`looks_ready`]) no longer finds the word
    /// ready at every poll. Apart from `pop`, so that the read of every
    /// packet carries none of it.
    #[cold]
    pub(crate) fn close(&mut self) {
        debug_assert!(self.broken, "only a refused ring is closed");
        self.mem.tail().store(CLOSED, Ordering::Release);
    }

    /// Cells read so far: moves whenever a packet or a skip word is
    /// read.
    #[inline]
    pub(crate) fn position(&self) -> u64 {
        self.tail
    }

    /// Whether the nonzero word `w` at our position names our position.
    /// Nothing else is ever there: the producer writes a cell's first
    /// word only as the header word of the packet (or skip) that starts
    /// at that cell's position, and a cell at or after our position that
    /// it has not written in this lap starts with 0 (we zero the first
    /// word of every cell we release; a fresh or emptied ring is all
    /// zeros); the payload of a packet written meanwhile lies after our
    /// position, within a lap. So a nonzero word of another position is
    /// memory overwritten by something other than the two sides, refused
    /// rather than waited on for ever (a word of our position with length
    /// 0, which no packet has, is refused by its length).
    #[inline]
    fn stamped(&self, w: u64) -> bool {
        (w >> 32) as u32 == self.tail as u32
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn mem(&self) -> &C {
        &self.mem
    }
}

/// Whether a packet (or a skip) waits at the consumer's published
/// position of `mem`. A hint for a thread that does not own the consumer:
/// the owner may be popping at the same time, so the answer can be stale
/// either way, and nothing is read or released. With a stale position (a
/// lap or more behind, after the caller was held up between its two
/// loads) the word it loads may lie inside a packet the producer is
/// copying at that moment, a plain copy beside this atomic load: an
/// aligned 8-byte load is not torn on the targets built for, and any value
/// it returns is only a wrong hint (a stamp from a packet's bytes matching
/// the stale position makes one poll read the rings for nothing).
#[inline]
pub(crate) fn looks_ready<C: Cells>(mem: &C) -> bool {
    let tail = mem.tail().load(Ordering::Acquire);
    let w = mem.word(cell_of(tail, mem.count())).load(Ordering::Acquire);
    (w >> 32) as u32 == tail as u32 && w as u32 != 0
}

/// A ring in memory this process has mapped (the segment's).
#[derive(Clone, Copy)]
pub(crate) struct Raw {
    /// The ring's tail word, on a line of its own.
    tail: *const AtomicU64,
    /// The first cell.
    base: *mut u8,
    count: usize,
    /// The CPU has PREFETCHW ([`has_prefetchw`]).
    prefetchw: bool,
}

/// Whether the CPU executes PREFETCHW (CPUID 8000_0001h, ECX bit 8): AMD's
/// since 3DNow!, Intel's since Broadwell. Asked once; where it is missing
/// the write hint is not given at all.
fn has_prefetchw() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| {
            __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

impl Raw {
    /// # Safety
    /// `tail` must point at an 8-byte aligned word and `base` at `count`
    /// 32-byte aligned cells, all mapped for as long as the value is used
    /// and reached by other processes only through this protocol.
    pub(crate) unsafe fn new(tail: *mut u8, base: *mut u8, count: usize) -> Raw {
        Raw {
            tail: tail as *const AtomicU64,
            base,
            count,
            prefetchw: has_prefetchw(),
        }
    }
}

// SAFETY: `word` and `read`/`write` address the cells in `base`, whose
// first 8 bytes are the header word; the payload follows contiguously.
unsafe impl Cells for Raw {
    #[inline]
    fn count(&self) -> usize {
        self.count
    }

    #[inline]
    fn word(&self, cell: usize) -> &AtomicU64 {
        debug_assert!(cell < self.count);
        // SAFETY: per `Raw::new`, the cell is mapped and 8-byte aligned;
        // AtomicU64 has the layout of u64.
        unsafe { &*(self.base.add(cell * CELL) as *const AtomicU64) }
    }

    #[inline]
    fn tail(&self) -> &AtomicU64 {
        // SAFETY: per `Raw::new`.
        unsafe { &*self.tail }
    }

    #[inline]
    unsafe fn write(&self, cell: usize, parts: &[&[u8]]) {
        // SAFETY: the caller owns the packet's cells, which lie within the
        // mapping (a packet never wraps).
        let mut dst = unsafe { self.base.add(cell * CELL + WORD) };
        for p in parts {
            // SAFETY: as above; `p` is a separate, readable buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(p.as_ptr(), dst, p.len());
                dst = dst.add(p.len());
            }
        }
    }

    #[inline]
    unsafe fn write_cell(&self, cell: usize, fill: impl FnOnce(&mut [u8; CELL - WORD])) {
        // SAFETY: the caller owns the cell, which lies within the mapping;
        // the consumer reads none of its bytes until the producer's
        // release store of its header word, after `fill` returns, so the
        // reference is the only access meanwhile.
        fill(unsafe { &mut *(self.base.add(cell * CELL + WORD) as *mut [u8; CELL - WORD]) })
    }

    #[inline]
    unsafe fn read<R>(&self, cell: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        // SAFETY: the caller holds the published packet, within the
        // mapping; the producer does not touch it until released.
        f(unsafe { std::slice::from_raw_parts(self.base.add(cell * CELL + WORD), len) })
    }

    #[inline(always)]
    fn prefetch_for_write(&self, cell: usize) {
        #[cfg(target_arch = "x86_64")]
        if self.prefetchw {
            debug_assert!(cell < self.count);
            // PREFETCHW by hand: the intrinsic's write hint needs a target
            // feature the build does not assume (without it the hint is a
            // read prefetch).
            // `nomem`, though it is given a pointer: a prefetch reads and
            // writes nothing the program can see, so the compiler need
            // not order any memory access around it.
            // SAFETY: the CPU has the instruction (`Raw::prefetchw`); a
            // prefetch is a hint that never faults and changes no memory,
            // no register and no flag; the address is that of a mapped
            // cell anyway.
            #[allow(clippy::pointers_in_nomem_asm_block)]
            unsafe {
                std::arch::asm!(
                    "prefetchw [{0}]",
                    in(reg) self.base.add(cell * CELL),
                    options(nomem, nostack, preserves_flags)
                )
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = cell;
    }
}

#[cfg(test)]
pub(crate) mod heap {
    //! A ring on the heap, for tests (loom's types under `--cfg loom`).
    use super::*;
    use crate::sync::UnsafeCell;
    use std::sync::Arc;

    pub(crate) struct Heap {
        words: Vec<AtomicU64>,
        data: Vec<UnsafeCell<[u8; CELL]>>,
        tail: AtomicU64,
        /// The cells `prefetch_for_write` was asked for, in order.
        #[cfg(not(loom))]
        pub(crate) prefetched: std::sync::Mutex<Vec<usize>>,
    }

    // SAFETY: the ring protocol hands each cell to one side at a time.
    unsafe impl Sync for Heap {}
    // SAFETY: as above.
    unsafe impl Send for Heap {}

    /// Both ends of a heap ring of `count` cells.
    pub(crate) fn ring(count: usize) -> (Producer<Arc<Heap>>, Consumer<Arc<Heap>>) {
        let h = Arc::new(Heap {
            words: (0..count).map(|_| AtomicU64::new(0)).collect(),
            data: (0..count).map(|_| UnsafeCell::new([0; CELL])).collect(),
            tail: AtomicU64::new(0),
            #[cfg(not(loom))]
            prefetched: Default::default(),
        });
        (Producer::new(h.clone()), Consumer::new(h))
    }

    impl Heap {
        /// Overwrites a header word, as a faulty peer could.
        #[cfg(not(loom))]
        pub(crate) fn poke(&self, cell: usize, w: u64) {
            self.words[cell].store(w, Ordering::Release);
        }
    }

    // SAFETY: words are separate atomics here; payload bytes live in the
    // cells' data arrays from offset 8 on, continuing into the next cells.
    unsafe impl Cells for Arc<Heap> {
        fn count(&self) -> usize {
            self.words.len()
        }
        fn word(&self, cell: usize) -> &AtomicU64 {
            &self.words[cell]
        }
        fn tail(&self) -> &AtomicU64 {
            &self.tail
        }
        unsafe fn write(&self, cell: usize, parts: &[&[u8]]) {
            let bytes = parts.iter().flat_map(|p| p.iter());
            for (off, b) in (cell * CELL + WORD..).zip(bytes) {
                self.data[off / CELL].with_mut(|d| {
                    // SAFETY: the cell is the producer's (the ring protocol,
                    // which loom checks through this access).
                    unsafe { (*d)[off % CELL] = *b }
                });
            }
        }
        unsafe fn write_cell(&self, cell: usize, fill: impl FnOnce(&mut [u8; CELL - WORD])) {
            self.data[cell].with_mut(|d| {
                // SAFETY: the cell is the producer's (as in `write`).
                let d = unsafe { &mut *d };
                fill((&mut d[WORD..]).try_into().expect("a cell's bytes"))
            });
        }
        unsafe fn read<R>(&self, cell: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
            let start = cell * CELL + WORD;
            let bytes: Vec<u8> = (start..start + len)
                .map(|off| {
                    self.data[off / CELL].with_mut(|d| {
                        // SAFETY: the cell is the consumer's (as above).
                        unsafe { (*d)[off % CELL] }
                    })
                })
                .collect();
            f(&bytes)
        }
        fn prefetch_for_write(&self, cell: usize) {
            assert!(
                cell < self.words.len(),
                "prefetch of cell {cell}, past the ring"
            );
            #[cfg(not(loom))]
            self.prefetched.lock().unwrap().push(cell);
        }
    }
}

/// Whether a push of a test that streams packets through a ring should be
/// tried again: only a full ring; any other refusal (a position the
/// reader never published, a ring it closed) is a failure of the test.
#[cfg(test)]
fn must_retry(r: Result<(), Refused>) -> bool {
    match r {
        Ok(()) => false,
        Err(Refused::Full) => true,
        Err(e) => panic!("a ring whose reader only reads refused a packet: {e:?}"),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::heap::ring;
    use super::*;
    use super::{CELL, WORD};

    fn pop_vec<C: Cells>(c: &mut Consumer<C>) -> Option<Vec<u8>> {
        let mut got = None;
        c.pop(|b| got = Some(b.to_vec())).unwrap();
        got
    }

    #[test]
    fn packets_arrive_whole_and_in_order_across_many_laps() {
        let (mut p, mut c) = ring(16);
        for i in 0..1000u32 {
            let len = 1 + (i as usize * 37) % max_packet(16);
            let body: Vec<u8> = (0..len).map(|k| (k as u32 ^ i) as u8).collect();
            p.push(&[&body[..len / 2], &body[len / 2..]]).unwrap();
            assert_eq!(pop_vec(&mut c).as_deref(), Some(&body[..]), "packet {i}");
            assert_eq!(pop_vec(&mut c), None);
        }
    }

    #[test]
    fn a_run_prefetches_the_lines_after_the_next_packet_and_stays_in_the_ring() {
        let (mut p, mut c) = ring(16);
        for i in 0..400usize {
            // Lengths of one to four cells, so that the hint's range meets
            // the ring's end at every offset.
            let len = 1 + (i * 29) % (4 * CELL - WORD);
            let n = cells(len);
            p.push(&[&vec![i as u8; len]]).unwrap();
            p.mem().prefetched.lock().unwrap().clear();
            p.prefetch_ahead(n);
            // From the first line after the next packet's, a cell a line.
            let at = ((p.written() + n as u64).next_multiple_of(2) % 16) as usize;
            let want: Vec<usize> = (at..(at + n).min(16)).step_by(2).collect();
            assert_eq!(*p.mem().prefetched.lock().unwrap(), want, "packet {i}");
            assert_eq!(pop_vec(&mut c), Some(vec![i as u8; len]), "packet {i}");
        }
    }

    #[test]
    fn a_full_ring_refuses_and_never_overwrites() {
        // A packet of this length takes two cells.
        const LEN: usize = 2 * CELL - WORD - 6;
        let (mut p, mut c) = ring(16);
        let mut sent = 0u8;
        while p.push(&[&[sent; LEN]]).is_ok() {
            sent += 1;
        }
        assert_eq!(sent, 8, "16 cells hold eight 2-cell packets");
        assert_eq!(p.push(&[&[9; 1]]), Err(Refused::Full), "still full");
        // Every packet is still intact, in order; then there is room again.
        for i in 0..sent {
            assert_eq!(pop_vec(&mut c), Some(vec![i; LEN]));
        }
        assert_eq!(pop_vec(&mut c), None);
        p.push(&[&[42; 5]]).unwrap();
        assert_eq!(pop_vec(&mut c), Some(vec![42; 5]));
    }

    #[test]
    fn an_impossible_length_is_refused_and_reading_stops() {
        let (mut p, mut c) = ring(16);
        p.push(&[&[1; 10]]).unwrap();
        assert_eq!(pop_vec(&mut c), Some(vec![1; 10]));
        // A header at the consumer's position claiming more than a ring
        // of 16 cells can carry.
        c.mem().poke(1, 1 << 32 | 4096);
        assert_eq!(
            c.pop(|_| panic!("must not be read")),
            Err(Malformed {
                len: 4096,
                cell: 1,
                stamp: None
            })
        );
        assert_eq!(c.pop(|_| panic!("must not be read")), Ok(false));
        // Given up, it no longer looks ready to a look without the token,
        // and the producer's sends fail once it looks for room.
        c.close();
        assert!(!looks_ready(c.mem()), "the refused ring still looks ready");
        let mut last = Ok(());
        for i in 0..16 {
            last = p.push_cell(1, |b| b[0] = i);
            if last.is_err() {
                break;
            }
        }
        assert_eq!(last, Err(Refused::Closed), "sends into a refused ring end");
        let _ = p.mem();
    }

    #[test]
    fn a_word_of_another_position_or_of_no_length_is_refused() {
        // At the reader's position: a word stamped for another position
        // (a lap behind, or a foreign one), and one of this position with
        // length 0. Neither is an empty cell (0) nor a packet: waited on,
        // either would stop the ring for good.
        let lap_behind = stamp(3u64.wrapping_sub(16), 10);
        for (word, stamp_seen) in [
            (7 << 32 | 10, Some((7, 3))),
            (lap_behind, Some(((3u64.wrapping_sub(16)) as u32, 3))),
            (stamp(3, 0), None),
        ] {
            let (mut p, mut c) = ring(16);
            for i in 0..3u8 {
                p.push_cell(1, |b| b[0] = i).unwrap();
                assert_eq!(pop_vec(&mut c), Some(vec![i]));
            }
            c.mem().poke(3, word);
            let m = c.pop(|_| panic!("must not be read")).unwrap_err();
            assert_eq!(m.cell, 3);
            assert_eq!(m.stamp, stamp_seen, "{word:#x}");
            let text = m.to_string();
            match stamp_seen {
                Some(_) => assert!(text.contains("position"), "{text}"),
                None => assert!(text.contains("claims 0 bytes"), "{text}"),
            }
            // Reading stops there, and the look without the token does
            // not take the word for a packet either.
            assert_eq!(c.pop(|_| panic!("must not be read")), Ok(false));
            assert_eq!(c.position(), 3);
            assert!(!looks_ready(c.mem()), "{word:#x} looks like a packet");
        }
        // After a skip, the word at the ring's start is checked alike.
        let (mut p, mut c) = ring(16);
        for i in 0..12u8 {
            p.push_cell(1, |b| b[0] = i).unwrap();
            assert_eq!(pop_vec(&mut c), Some(vec![i]));
        }
        c.mem().poke(12, stamp(12, SKIP));
        c.mem().poke(0, 5 << 32 | 4);
        let m = c.pop(|_| panic!("must not be read")).unwrap_err();
        assert_eq!((m.cell, m.stamp), (0, Some((5, 16))));
        // A cleared word is an empty cell, at any position.
        let (_p, mut c) = ring(16);
        assert_eq!(c.pop(|_| panic!("empty")), Ok(false));
    }

    #[test]
    fn a_skip_where_no_packet_needs_one_is_refused() {
        // 16 cells: the largest packet takes 8, so a skip is written only
        // in the last 7 cells (one at cell 9 leaves 7, too few for it).
        for (at, taken) in [(0, false), (8, false), (9, true), (15, true)] {
            let (mut p, mut c) = ring(16);
            for i in 0..at {
                p.push_cell(1, |b| b[0] = i as u8).unwrap();
                assert_eq!(pop_vec(&mut c), Some(vec![i as u8]));
            }
            c.mem().poke(at, stamp(at as u64, SKIP));
            if taken {
                assert_eq!(c.pop(|_| panic!("nothing after the skip")), Ok(false));
                assert_eq!(c.position(), 16, "a skip at cell {at} is followed");
            } else {
                let m = c.pop(|_| panic!("must not be read")).unwrap_err();
                assert_eq!(
                    m,
                    Malformed {
                        len: SKIP,
                        cell: at,
                        stamp: None
                    }
                );
                assert!(m.to_string().contains("skip"), "{m}");
                assert_eq!(c.position(), at as u64, "a refused skip moves nothing");
                assert_eq!(c.pop(|_| panic!("must not be read")), Ok(false));
            }
        }
    }

    #[test]
    fn a_read_position_no_reader_publishes_is_refused_and_nothing_is_overwritten() {
        // One ahead of what was written, and one set back after a lap,
        // for both ways of writing a packet.
        for one_cell in [false, true] {
            for back in [false, true] {
                let (mut p, mut c) = ring(16);
                let send = |p: &mut Producer<_>, v: u8| {
                    if one_cell {
                        p.push_cell(20, |b| b[..20].fill(v))
                    } else {
                        p.push(&[&[v; 20]])
                    }
                };
                if back {
                    for i in 0..16 {
                        send(&mut p, i).unwrap();
                        assert_eq!(pop_vec(&mut c), Some(vec![i; 20]));
                    }
                }
                let mut sent = 0u8;
                while send(&mut p, 100 + sent).is_ok() {
                    sent += 1;
                }
                assert_eq!(sent, 16);
                let bad = if back { 0 } else { 0xdead_beef_0000_0000 };
                p.mem().tail().store(bad, Ordering::Release);
                let head = p.written();
                assert_eq!(send(&mut p, 99), Err(Refused::BadTail));
                assert_eq!(p.published_tail(), bad);
                assert_eq!(p.written(), head, "nothing written");
                // Whatever the reader published, the unread packets stand.
                p.mem().tail().store(c.position(), Ordering::Release);
                for i in 0..sent {
                    assert_eq!(pop_vec(&mut c), Some(vec![100 + i; 20]));
                }
            }
        }
    }

    #[test]
    fn a_skip_at_the_end_is_followed() {
        let (mut p, mut c) = ring(16);
        // 7 + 7 cells, then one of 4 does not fit in the last 2.
        let a = vec![1u8; 7 * CELL - 8];
        p.push(&[&a]).unwrap();
        p.push(&[&a]).unwrap();
        assert_eq!(p.push(&[&[3; 200]]), Err(Refused::Full));
        assert_eq!(pop_vec(&mut c), Some(a.clone()));
        p.push(&[&[3; 200]]).unwrap();
        assert_eq!(pop_vec(&mut c), Some(a));
        assert_eq!(pop_vec(&mut c), Some(vec![3; 200]));
        assert_eq!(pop_vec(&mut c), None);
    }

    #[test]
    fn one_cell_packets_mix_with_others_and_a_full_ring_refuses_them() {
        let (mut p, mut c) = ring(16);
        let cell = |v: u8, n: usize| move |b: &mut [u8; CELL - WORD]| b[..n].fill(v);
        let mut want = Vec::new();
        for i in 0..200u8 {
            // One cell, then a packet of 3 cells that meets the ring's
            // end now and then and goes after a skip word.
            let n = 1 + i as usize % (CELL - WORD);
            p.push_cell(n, cell(i, n)).unwrap();
            p.push(&[&[!i; 150]]).unwrap();
            want.push(vec![i; n]);
            want.push(vec![!i; 150]);
            while let Some(got) = pop_vec(&mut c) {
                assert_eq!(got, want.remove(0));
            }
        }
        // Full: 16 one-cell packets, then a refusal that writes nothing.
        for i in 0..16u8 {
            p.push_cell(CELL - WORD, cell(i, CELL - WORD)).unwrap();
        }
        assert_eq!(
            p.push_cell(1, |_| panic!("a full ring is not written")),
            Err(Refused::Full)
        );
        for i in 0..16u8 {
            assert_eq!(pop_vec(&mut c), Some(vec![i; CELL - WORD]));
        }
        assert_eq!(pop_vec(&mut c), None);
        p.push_cell(3, cell(7, 3)).unwrap();
        assert_eq!(pop_vec(&mut c), Some(vec![7; 3]));
    }

    #[test]
    fn threads_stream_through_a_small_ring() {
        let (mut p, mut c) = ring(32);
        let n = 20_000u32;
        let t = std::thread::spawn(move || {
            for i in 0..n {
                let len = 4 + (i as usize % 300);
                let mut b = vec![(i % 251) as u8; len];
                b[..4].copy_from_slice(&i.to_le_bytes());
                while must_retry(p.push(&[&b])) {
                    std::hint::spin_loop();
                }
            }
        });
        let mut next = 0u32;
        while next < n {
            let mut got = None;
            if c.pop(|b| got = Some(b.to_vec())).unwrap() {
                let b = got.unwrap();
                assert_eq!(u32::from_le_bytes(b[..4].try_into().unwrap()), next);
                assert_eq!(b.len(), 4 + next as usize % 300);
                assert!(b[4..].iter().all(|&x| x == (next % 251) as u8));
                next += 1;
            }
        }
        t.join().unwrap();
    }
}

#[cfg(loom)]
mod loom_tests {
    //! Model checks of the ring (`RUSTFLAGS="--cfg loom" cargo test --lib
    //! ring::loom`): every interleaving of a producer and a consumer.
    use super::heap::ring;
    use super::{must_retry, CELL, WORD};

    /// Three packets through a ring of 4 cells (1, 2 and 2 cells: the
    /// third does not fit before the end, so a skip word precedes it and
    /// it reuses the first lap's cells):
    /// each arrives once, whole and in order; a full ring refuses rather
    /// than overwrites.
    #[test]
    fn packets_cross_whole_and_in_order() {
        loom::model(|| {
            let (mut p, mut c) = ring(4);
            // One cell, two, two.
            let sizes = [10usize, 2 * CELL - WORD - 20, CELL - 4];
            let t = loom::thread::spawn(move || {
                for (i, &len) in sizes.iter().enumerate() {
                    while must_retry(p.push(&[&vec![i as u8 + 1; len]])) {
                        loom::thread::yield_now();
                    }
                }
            });
            let mut got = Vec::new();
            while got.len() < sizes.len() {
                let mut pkt = None;
                if c.pop(|b| pkt = Some(b.to_vec())).unwrap() {
                    got.push(pkt.unwrap());
                } else {
                    loom::thread::yield_now();
                }
            }
            t.join().unwrap();
            for (i, (g, &len)) in got.iter().zip(&sizes).enumerate() {
                assert_eq!(g, &vec![i as u8 + 1; len]);
            }
        });
    }

    /// One-cell packets ([`super::Producer::push_cell`]) after two of two
    /// cells through a ring of 4: the third reuses the first lap's first
    /// cell once the consumer has released it, and arrives whole.
    #[test]
    fn one_cell_packets_reuse_released_cells() {
        loom::model(|| {
            let (mut p, mut c) = ring(4);
            // Two cells, two, one.
            let sizes = [2 * CELL - WORD - 20, 2 * CELL - WORD - 20, CELL - WORD - 2];
            let t = loom::thread::spawn(move || {
                for (i, &len) in sizes.iter().enumerate() {
                    let v = i as u8 + 1;
                    while must_retry(if len <= CELL - WORD {
                        p.push_cell(len, |b| b[..len].fill(v))
                    } else {
                        p.push(&[&vec![v; len]])
                    }) {
                        loom::thread::yield_now();
                    }
                }
            });
            let mut got = Vec::new();
            while got.len() < sizes.len() {
                let mut pkt = None;
                if c.pop(|b| pkt = Some(b.to_vec())).unwrap() {
                    got.push(pkt.unwrap());
                } else {
                    loom::thread::yield_now();
                }
            }
            t.join().unwrap();
            for (i, (g, &len)) in got.iter().zip(&sizes).enumerate() {
                assert_eq!(g, &vec![i as u8 + 1; len]);
            }
        });
    }
}
