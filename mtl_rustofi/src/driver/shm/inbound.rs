//! The rings a rank reads, and which of them a poll reads.
//!
//! Looking at a ring costs a cache line and some instructions, and a rank
//! has one ring from every local rank, itself included: a poll that looked
//! at all of them cost about 16 instructions per local rank, found packets
//! or not (an empty poll among 64 ranks about 1,060), while most peers send
//! nothing most of the time. So with many local ranks a poll
//! reads the *hot* rings, those that delivered a packet lately, and one
//! poll in `sweep_every` reads them all (a sweep). A ring that delivers a
//! packet in a sweep becomes hot at once. Every [`COOL_POLLS`] polls (at
//! the first sweep after them), the hot rings that delivered nothing since
//! the last such cooling turn cold: a ring goes cold after one to two
//! such periods of silence. Every ring starts hot (but the one from the
//! rank itself, below). The polls counted there
//! include the quick looks of idle polls, which take no token and read no
//! ring of their own accord: a rank that waits long makes mostly those,
//! and its rings must cool all the same.
//!
//! A packet in a cold ring is therefore read within `sweep_every` polls,
//! and never missed: nothing but the reader's own schedule decides what
//! is read, the sender does nothing different, and the schedule reads
//! every ring at least once per `sweep_every` polls (no cross-process
//! state is involved, so there is no wake-up to lose). The quick look of
//! an idle poll, made without the progress token ([`RingWatch`]), keeps
//! the same schedule: it looks at the hot rings, whose set the token
//! holder publishes as a bitmap (a hint: read stale, it costs at most the
//! sweep's delay), and every `sweep_every`-th look at all of them; one
//! that finds a packet in a cold ring asks the next poll to sweep. The
//! poll clears that request before it reads the rings, so a request made
//! meanwhile is not lost.
//!
//! The ring from the rank itself is in no schedule. Only the progress
//! token's holder of this process writes it (a send to self), and it so
//! knows when that ring holds packets: the send sets
//! [`RingWatch::own_fed`], a poll reads that ring only while the flag is
//! set, and a quick look takes the set flag for a ready ring (it never
//! reads that ring). With two local ranks it was one of the two rings
//! every poll read, and it seldom holds anything.
//!
//! `sweep_every` grows with the local ranks ([`sweep_every`]): 1 (every
//! poll reads every ring, as with no schedule at all) up to three ranks,
//! at most 16. The sweep's share of a poll then stays near two rings'
//! cost up to 32 local ranks, and the wait of a cold ring's first packet
//! at 16 polls or fewer.

use super::ring::{self, Consumer, Raw};
use super::segment::Segment;
use super::short;
use crate::proto::ids::{RailId, RxSlot};
use crate::proto::{Core, Out};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Packets read from one peer's ring per poll, so that one busy sender
/// cannot starve the others (the rest wait for the next poll).
const POLL_BUDGET: usize = 64;

/// Polls (the token holder's and the quick looks together) after which a
/// hot ring that delivered nothing meanwhile turns cold; checked at
/// sweeps.
pub(super) const COOL_POLLS: u32 = 1024;

/// Polls per sweep for `local` ranks: a power of two (a mask tells a
/// sweep's turn), about half the ranks, 1 to 16.
pub(super) fn sweep_every(local: usize) -> u32 {
    ((local / 2).max(1).next_power_of_two() as u32).min(16)
}

/// A ring from one peer.
struct InRing {
    /// The peer's local rank.
    from: usize,
    /// Its process name: the sender of the ring's short packets.
    name: u64,
    c: Consumer<Raw>,
    /// The consumer's position when the ring was last checked (a hot one
    /// at each cooling, a cold one after each sweep): a ring that moved
    /// past it has delivered since (kept so, rather than marked at each
    /// read, to leave the read as it is).
    seen: u64,
}

impl InRing {
    /// Whether the ring delivered since `seen`; moves `seen` to now.
    fn fed(&mut self) -> bool {
        let now = self.c.position();
        let fed = now != self.seen;
        self.seen = now;
        fed
    }
}

/// The rings from inserted peers and the schedule that reads them.
pub(super) struct Inbound {
    /// The hot rings first (`..n_hot`), then the cold ones: a poll on the
    /// schedule reads a prefix, a sweep all.
    rings: Vec<InRing>,
    n_hot: usize,
    /// The poll under way is a sweep.
    sweeping: bool,
    /// `sweep_every - 1`: 0 means no schedule (every poll reads every
    /// ring, all of them stay hot).
    sweep_mask: u32,
    polls: u32,
    /// [`Inbound::clock`] at the last cooling.
    cooled_at: u32,
    /// This rank's local rank.
    me: usize,
    /// The ring from this rank itself, read while [`RingWatch::own_fed`]
    /// says it was written; not among `rings`, nor in the schedule.
    own: Option<InRing>,
    watch: Arc<RingWatch>,
}

impl Inbound {
    /// No rings yet, for local rank `me` among `local` local ranks.
    pub(super) fn new(local: usize, me: usize, seg: Arc<Segment>) -> Inbound {
        let every = sweep_every(local);
        Inbound {
            rings: Vec::new(),
            n_hot: 0,
            sweeping: false,
            sweep_mask: every - 1,
            polls: 0,
            cooled_at: 0,
            me,
            own: None,
            watch: Arc::new(RingWatch {
                rings: (0..local).map(|_| OnceLock::new()).collect(),
                hot: (0..local.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
                sweep_mask: every - 1,
                looks: AtomicU32::new(0),
                sweep_asked: AtomicBool::new(false),
                own_fed: AtomicBool::new(false),
                _seg: seg,
            }),
        }
    }

    /// Reads the ring `ring` from local rank `from` (process `name`) from
    /// now on; it starts hot. The ring from this rank itself is kept
    /// apart, read only once written ([`RingWatch::own_fed`]).
    pub(super) fn insert(&mut self, from: usize, name: u64, ring: Raw) {
        if from == self.me {
            self.own = Some(InRing {
                from,
                name,
                c: Consumer::new(ring),
                seen: 0,
            });
            return;
        }
        self.rings.push(InRing {
            from,
            name,
            c: Consumer::new(ring),
            seen: 0,
        });
        let last = self.rings.len() - 1;
        self.rings.swap(self.n_hot, last);
        self.n_hot += 1;
        let _ = self.watch.rings[from].set(ring);
        self.watch.set_hot(from, true);
    }

    /// The rings for threads without the progress token.
    pub(super) fn watch(&self) -> &Arc<RingWatch> {
        &self.watch
    }

    /// Hands the packets waiting in the rings this poll reads to the core:
    /// every ring with few local ranks; else the hot ones, or all in a
    /// sweep. Returns the number of packets.
    #[inline]
    pub(super) fn poll(&mut self, rail: RailId, core: &mut Core, out: &mut Out) -> usize {
        let end = if self.sweep_mask == 0 {
            self.rings.len()
        } else {
            self.schedule()
        };
        // One loop for every case, so that the ring's read (the arrival
        // of every packet) is inlined once.
        let mut total = 0;
        for r in &mut self.rings[..end] {
            total += read_ring::<false>(r, rail, core, out);
        }
        if self.sweeping {
            self.after_sweep();
        }
        if self.watch.own_fed.load(Ordering::Relaxed) {
            total += self.read_own(rail, core, out);
        }
        total
    }

    /// Reads the ring from this rank itself, which a send to self wrote
    /// (`own_fed`). Cleared first: a packet the ones read here make this
    /// rank send to itself sets it again. Left set if the budget ended the
    /// read, for the next poll.
    #[cold]
    #[inline(never)]
    fn read_own(&mut self, rail: RailId, core: &mut Core, out: &mut Out) -> usize {
        self.watch.own_fed.store(false, Ordering::Relaxed);
        let Some(r) = self.own.as_mut() else {
            return 0;
        };
        let n = read_ring::<true>(r, rail, core, out);
        if n >= POLL_BUDGET {
            self.watch.own_fed.store(true, Ordering::Relaxed);
        }
        n
    }

    /// Says that this rank wrote into its ring to itself (token held).
    #[inline(always)]
    pub(super) fn note_own_fed(&self) {
        self.watch.own_fed.store(true, Ordering::Relaxed);
    }

    /// Counts a poll on the schedule and says how many rings it reads: the
    /// hot ones, or all in a sweep (one poll in `sweep_every`, or one a
    /// look asked for).
    #[inline(never)]
    fn schedule(&mut self) -> usize {
        self.polls = self.polls.wrapping_add(1);
        // A request is cleared before the rings are read: one a look makes
        // after this is for a packet this sweep may not see, and stands.
        let asked = self.watch.sweep_asked.load(Ordering::Relaxed);
        if asked {
            self.watch.sweep_asked.store(false, Ordering::Relaxed);
        }
        self.sweeping = asked || self.polls & self.sweep_mask == 0;
        if self.sweeping {
            self.rings.len()
        } else {
            self.n_hot
        }
    }

    /// After a sweep: once [`COOL_POLLS`] polls have passed since the last
    /// cooling, the hot rings that delivered nothing since then turn cold;
    /// then the cold rings that delivered in this sweep turn hot (in this
    /// order, so that a ring that just turned hot has a whole period to
    /// deliver again).
    #[inline(never)]
    fn after_sweep(&mut self) {
        self.sweeping = false;
        let clock = self.clock();
        // Above half the range: the count of looks, a hint that racing
        // threads may set back, went back; wait for it.
        if (COOL_POLLS..1 << 31).contains(&clock.wrapping_sub(self.cooled_at)) {
            self.cooled_at = clock;
            self.cool();
        }
        for i in self.n_hot..self.rings.len() {
            if self.rings[i].fed() {
                // Into the hot prefix; the ring it changes place with is a
                // cold one already looked at.
                self.rings.swap(i, self.n_hot);
                self.watch.set_hot(self.rings[self.n_hot].from, true);
                self.n_hot += 1;
            }
        }
    }

    /// Polls so far: the token holder's and the quick looks (wrapping).
    fn clock(&self) -> u32 {
        self.polls
            .wrapping_add(self.watch.looks.load(Ordering::Relaxed))
    }

    /// Turns cold the hot rings that delivered nothing since the last
    /// cooling.
    fn cool(&mut self) {
        let mut i = 0;
        while i < self.n_hot {
            if self.rings[i].fed() {
                i += 1;
            } else {
                self.n_hot -= 1;
                self.rings.swap(i, self.n_hot);
                self.watch.set_hot(self.rings[self.n_hot].from, false);
            }
        }
    }

    /// The local ranks of the hot rings, in the order they are read.
    #[cfg(all(test, not(loom)))]
    pub(super) fn hot_ranks(&self) -> Vec<usize> {
        self.rings[..self.n_hot].iter().map(|r| r.from).collect()
    }

    /// The consumer of the ring from local rank `from`.
    #[cfg(all(test, not(loom)))]
    pub(super) fn consumer(&mut self, from: usize) -> &mut Consumer<Raw> {
        &mut self
            .rings
            .iter_mut()
            .chain(self.own.as_mut())
            .find(|r| r.from == from)
            .expect("a ring from that rank")
            .c
    }
}

/// Hands the packets waiting in one ring to the core, up to the budget.
/// Returns the number read (a malformed word counts as one; the ring is
/// read no more). `OWN`: the ring from this rank itself, read out of line
/// ([`Inbound::read_own`]); a constant, so that each of the two reads has
/// a ring read of its own to inline, not one shared out of line.
#[inline(always)]
fn read_ring<const OWN: bool>(
    r: &mut InRing,
    rail: RailId,
    core: &mut Core,
    out: &mut Out,
) -> usize {
    // `OWN` only makes the two reads two functions to inline: the body is
    // the same.
    let name = r.name;
    let mut n = 0;
    for _ in 0..POLL_BUDGET {
        match r.c.pop(|pkt| short::deliver(core, rail, pkt, name, out)) {
            Ok(true) => n += 1,
            Ok(false) => break,
            Err(m) => {
                let why = format!(
                    "dropped a malformed packet from local rank {}: {m}; nothing more is read \
                     from that ring",
                    r.from
                );
                core.on_rx_error(rail, RxSlot(0), false, &why, &[], out);
                r.c.close();
                return n + 1;
            }
        }
    }
    n
}

/// The receiving rings of a rank, readable by any thread: one slot per
/// local rank, filled when that peer is inserted (never the rank's own:
/// [`RingWatch::own_fed`] stands for it), and which of them are hot. It holds the segment, so its rings stay mapped as long as it
/// lives.
pub(crate) struct RingWatch {
    rings: Box<[OnceLock<Raw>]>,
    /// Bit `r % 64` of word `r / 64`: the ring from local rank `r` is hot.
    /// Written by the progress token's holder only.
    hot: Box<[AtomicU64]>,
    /// As [`Inbound::sweep_mask`].
    sweep_mask: u32,
    /// Looks made (a hint: plain load and store, racing threads may lose
    /// counts, which only moves the next look at every ring).
    looks: AtomicU32,
    /// A look at every ring found a packet in a cold one: the next poll
    /// sweeps (and clears this first).
    sweep_asked: AtomicBool,
    /// The ring from this rank itself may hold packets: set by the
    /// progress token's holder as it sends to self, cleared by the holder
    /// that reads that ring (set again if the read used up its budget), so
    /// never clear while the ring holds packets; read by the looks as a
    /// hint, as they read the other rings' words.
    own_fed: AtomicBool,
    _seg: Arc<Segment>,
}

// SAFETY: a `Raw` names memory of the segment, which the watch keeps
// mapped; the watch only reads it, and only through atomic loads of
// aligned words (`ring::looks_ready`): it writes nothing, so the ring's
// two sides see nothing of it. Its reads are hints (see `looks_ready`
// for the one that may meet a producer's copy).
unsafe impl Sync for RingWatch {}
// SAFETY: as above; nothing in it is tied to a thread.
unsafe impl Send for RingWatch {}

impl RingWatch {
    /// Whether the looks keep a schedule (four or more local ranks): then
    /// [`RingWatch::any_ready`] is to be asked with `SCHEDULED` true.
    pub(crate) fn scheduled(&self) -> bool {
        self.sweep_mask != 0
    }

    /// Whether some ring this look reads seems to hold a packet (a hint:
    /// see [`ring::looks_ready`]): every ring, or with `SCHEDULED` (as
    /// [`RingWatch::scheduled`] says) the hot ones, and every ring in one
    /// look of `sweep_every`. A constant, so that the callers' code for
    /// few ranks carries none of the schedule's.
    #[inline]
    pub(crate) fn any_ready<const SCHEDULED: bool>(&self) -> bool {
        if self.own_fed.load(Ordering::Relaxed) {
            return true;
        }
        if !SCHEDULED {
            return self
                .rings
                .iter()
                .any(|r| r.get().is_some_and(ring::looks_ready));
        }
        debug_assert!(self.scheduled());
        let n = self.looks.load(Ordering::Relaxed).wrapping_add(1);
        self.looks.store(n, Ordering::Relaxed);
        if n & self.sweep_mask == 0 {
            return self.any_ready_at_all();
        }
        self.any_hot_ready()
    }

    #[inline]
    fn any_hot_ready(&self) -> bool {
        for (w, word) in self.hot.iter().enumerate() {
            let mut bits = word.load(Ordering::Relaxed);
            while bits != 0 {
                let r = w * 64 + bits.trailing_zeros() as usize;
                if self.rings[r].get().is_some_and(ring::looks_ready) {
                    return true;
                }
                bits &= bits - 1;
            }
        }
        false
    }

    /// Every ring; a packet found in a cold one asks the next poll to
    /// sweep (looked for past packets in hot rings, which do not).
    #[cold]
    fn any_ready_at_all(&self) -> bool {
        let mut ready = false;
        for (r, ring) in self.rings.iter().enumerate() {
            if ring.get().is_some_and(ring::looks_ready) {
                ready = true;
                if !self.is_hot(r) {
                    self.sweep_asked.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
        ready
    }

    pub(super) fn is_hot(&self, r: usize) -> bool {
        self.hot[r / 64].load(Ordering::Relaxed) & 1 << (r % 64) != 0
    }

    fn set_hot(&self, r: usize, hot: bool) {
        let bit = 1u64 << (r % 64);
        if hot {
            self.hot[r / 64].fetch_or(bit, Ordering::Relaxed);
        } else {
            self.hot[r / 64].fetch_and(!bit, Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
#[path = "inbound_tests.rs"]
mod tests;
