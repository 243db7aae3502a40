//! Matching-engine benchmark: cost per match and bookkeeping bytes per entry
//! as the queues grow, for `mtl_rustofi::matching::Matcher` alone (no MPI, no
//! libfabric).
//!
//! ```sh
//! cargo run --release --example match_bench            # full run
//! cargo run --release --example match_bench -- --quick # fewer repeats
//! ```
//!
//! Prints a Markdown report on stdout:
//!
//! * (a) posted queue: post D specific receives (same context and source,
//!   distinct tags), then let D messages arrive in reverse posting order;
//!   time per arrival;
//! * (b) unexpected queue: D messages arrive first, then D specific receives
//!   are posted in reverse arrival order; time per post;
//! * (c) wildcard mix: D posted receives of which 1 in 16 is `MPI_ANY_TAG` or
//!   `MPI_ANY_SOURCE` (alternately), 16 sources, messages arrive in random
//!   order; time per arrival;
//! * (d) heap bytes and allocations per queued entry, counted by a global
//!   allocator wrapper, for D = 65536 entries and a payload of `()` (so only
//!   the engine's own bookkeeping is counted).
//!
//! Each timing is the median of several repeats; every repeat runs as many
//! rounds of the scenario as needed to cover at least `MIN_OPS` timed
//! operations. Below D = `BATCH`, a round holds `BATCH / D` independent
//! depth-D queues (one per context) timed together, so that reading the clock
//! (whose cost is also subtracted) stays small against the operations timed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use mtl_rustofi::matching::{Envelope, Matcher, Selector, ANY};

// ---------------------------------------------------------------------------
// Counting allocator (this example only).

/// Forwards to `System` and keeps the live byte and allocation counts.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static LIVE_ALLOCS: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the counters are plain atomics and never affect the returned
// memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Relaxed);
            LIVE_ALLOCS.fetch_add(1, Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Relaxed);
            LIVE_ALLOCS.fetch_add(1, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as isize, Relaxed);
        LIVE_ALLOCS.fetch_sub(1, Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Snapshot of the allocator counters.
#[derive(Clone, Copy)]
struct Heap {
    bytes: isize,
    allocs: isize,
}

fn heap() -> Heap {
    Heap {
        bytes: LIVE_BYTES.load(Relaxed),
        allocs: LIVE_ALLOCS.load(Relaxed),
    }
}

// ---------------------------------------------------------------------------
// Helpers.

const CTX: u32 = 7;
const SRC: i32 = 1;
const DEPTHS: [usize; 5] = [1, 16, 256, 4096, 65536];
/// Every repeat times at least this many operations (small D: many rounds).
const MIN_OPS: usize = 1 << 18;

/// xorshift64* generator (deterministic, no crates).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Median cost of one `Instant::now()` + `elapsed()` pair, in ns, over
/// `batches` batches of 1000 pairs.
fn timer_overhead_ns(batches: usize) -> f64 {
    let mut samples = Vec::with_capacity(batches);
    for _ in 0..batches {
        let n = 1000;
        let outer = Instant::now();
        let mut acc = Duration::ZERO;
        for _ in 0..n {
            let t = Instant::now();
            acc += black_box(t).elapsed();
        }
        black_box(acc);
        samples.push(outer.elapsed().as_nanos() as f64 / n as f64);
    }
    median(samples)
}

thread_local! {
    /// Clock costs measured by `time_rounds`, for the report.
    static CLOCK_SAMPLES: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn rounds_for(d: usize) -> usize {
    MIN_OPS.div_ceil(d * copies_for(d)).max(2)
}

/// Runs `rounds` rounds; `round` returns the time of its timed phase and the
/// number of timed operations. Returns ns per operation with the clock cost
/// (measured just before, so it sees the same machine load) subtracted;
/// `subtract_clock == false` is for untimed warm-up rounds.
fn time_rounds(
    rounds: usize,
    subtract_clock: bool,
    mut round: impl FnMut() -> (Duration, usize),
) -> f64 {
    let clock_ns = if subtract_clock {
        timer_overhead_ns(21)
    } else {
        0.0
    };
    CLOCK_SAMPLES.with(|c| c.borrow_mut().push(clock_ns));
    let mut total = Duration::ZERO;
    let mut ops = 0;
    for _ in 0..rounds {
        let (t, n) = round();
        total += t;
        ops += n;
    }
    ((total.as_nanos() as f64 - clock_ns * rounds as f64) / ops as f64).max(0.0)
}

fn spec(tag: i32) -> Selector {
    spec_in(CTX, tag)
}

fn env(src: i32, tag: i32) -> Envelope {
    Envelope { ctx: CTX, src, tag }
}

// ---------------------------------------------------------------------------
// Scenarios. Each returns ns per timed operation for one repeat.

/// Independent copies of a depth-`d` queue timed together, each in its own
/// context, so that one clock read pair covers at least `BATCH` operations
/// (a single arrival is shorter than reading the clock). Depths >= `BATCH`
/// use one copy.
const BATCH: usize = 64;

fn copies_for(d: usize) -> usize {
    BATCH.div_ceil(d)
}

fn spec_in(ctx: u32, tag: i32) -> Selector {
    Selector::from_mpi(ctx, SRC, tag)
}

fn env_in(ctx: u32, tag: i32) -> Envelope {
    Envelope { ctx, src: SRC, tag }
}

/// (a) D posted receives, arrivals in reverse posting order.
fn posted_reverse(m: &mut Matcher<u64, u64>, d: usize, clock: bool) -> f64 {
    let copies = copies_for(d) as u32;
    time_rounds(rounds_for(d), clock, || {
        for c in 0..copies {
            for t in 0..d as i32 {
                assert!(m.post(spec_in(CTX + c, t), t as u64).is_err());
            }
        }
        let start = Instant::now();
        for c in 0..copies {
            for t in (0..d as i32).rev() {
                let hit = m.arrive(env_in(CTX + c, t), t as u64);
                debug_assert_eq!(hit, Some((t as u64, t as u64)));
                black_box(hit);
            }
        }
        let el = start.elapsed();
        assert_eq!(m.posted_len(), 0);
        (el, d * copies as usize)
    })
}

/// (b) D unexpected messages, receives posted in reverse arrival order.
fn unexpected_reverse(m: &mut Matcher<u64, u64>, d: usize, clock: bool) -> f64 {
    let copies = copies_for(d) as u32;
    time_rounds(rounds_for(d), clock, || {
        for c in 0..copies {
            for t in 0..d as i32 {
                assert!(m.arrive(env_in(CTX + c, t), t as u64).is_none());
            }
        }
        let start = Instant::now();
        for c in 0..copies {
            for t in (0..d as i32).rev() {
                let hit = m.post(spec_in(CTX + c, t), t as u64);
                debug_assert!(matches!(hit, Ok((_, e, u)) if e.tag == t && u == t as u64));
                black_box(hit.is_ok());
            }
        }
        let el = start.elapsed();
        assert_eq!(m.unexpected_len(), 0);
        (el, d * copies as usize)
    })
}

/// Number of distinct sources in the wildcard mix.
const MIX_SOURCES: usize = 16;

/// Receive selectors and the arrival stream for the wildcard mix.
///
/// Receive `i` is, for `i % 16 == 8`, alternately `(ANY_SOURCE, tag i)` and
/// `(source i % 16, ANY_TAG)`; otherwise `(source i % 16, tag i)`. The
/// arrival stream has one message per receive, `(source i % 16, tag i)` (an
/// `ANY_SOURCE` receive's message from a random source), in random order. An
/// `ANY_TAG` receive may take a message meant for a later specific receive;
/// that receive then stays posted and the `ANY_TAG` receive's own message
/// goes to the unexpected queue.
struct Mix {
    sels: Vec<Selector>,
    arrivals: Vec<Envelope>,
    wildcards: usize,
}

fn mix(d: usize, seed: u64) -> Mix {
    let mut rng = Rng::new(seed);
    let mut sels = Vec::with_capacity(d);
    let mut arrivals = Vec::with_capacity(d);
    let mut wildcards = 0;
    for i in 0..d {
        let src = (i % MIX_SOURCES) as i32;
        let tag = i as i32;
        if i % 16 == 8 {
            if wildcards % 2 == 0 {
                sels.push(Selector::from_mpi(CTX, ANY, tag));
                arrivals.push(env(rng.below(MIX_SOURCES) as i32, tag));
            } else {
                sels.push(Selector::from_mpi(CTX, src, ANY));
                arrivals.push(env(src, tag));
            }
            wildcards += 1;
        } else {
            sels.push(Selector::from_mpi(CTX, src, tag));
            arrivals.push(env(src, tag));
        }
    }
    rng.shuffle(&mut arrivals);
    Mix {
        sels,
        arrivals,
        wildcards,
    }
}

/// (c) wildcard mix: time per arrival. Returns (ns, fraction of arrivals that
/// found a posted receive).
fn wildcard_mix(m: &mut Matcher<u64, u64>, mx: &Mix, clock: bool) -> (f64, f64) {
    let d = mx.sels.len();
    let copies = copies_for(d) as u32;
    let mut matched = 0usize;
    let mut arrived = 0usize;
    let ns = time_rounds(rounds_for(d), clock, || {
        for c in 0..copies {
            for (i, s) in mx.sels.iter().enumerate() {
                let s = Selector { ctx: CTX + c, ..*s };
                assert!(m.post(s, i as u64).is_err());
            }
        }
        let start = Instant::now();
        let mut hits = 0;
        for c in 0..copies {
            for (i, e) in mx.arrivals.iter().enumerate() {
                let e = Envelope { ctx: CTX + c, ..*e };
                hits += m.arrive(e, i as u64).is_some() as usize;
            }
        }
        let el = start.elapsed();
        matched += hits;
        arrived += d * copies as usize;
        black_box(m.drain_all());
        (el, d * copies as usize)
    });
    (ns, matched as f64 / arrived as f64)
}

// ---------------------------------------------------------------------------
// (d) bookkeeping bytes.

struct MemRow {
    what: &'static str,
    bytes: f64,
    allocs: f64,
    bytes_u64: f64,
    /// Payload `()` at `DENSE_D` entries (hash tables 7/8 full).
    bytes_dense: f64,
}

/// 7/8 of 65536: the largest count whose hash tables still fit 65536 buckets
/// (D = 65536 itself needs 131072 buckets, half of them empty).
const DENSE_D: usize = 57344;

/// Live heap bytes and allocations per entry after `fill` queued `d` entries
/// into a fresh matcher, for payload `()` and for payload `u64`.
fn mem_row(
    what: &'static str,
    d: usize,
    fill_unit: impl Fn(&mut Matcher<(), ()>, usize),
    fill_u64: impl Fn(&mut Matcher<u64, u64>, usize),
) -> MemRow {
    let unit = |d: usize| {
        let mut m: Matcher<(), ()> = Matcher::new();
        let before = heap();
        fill_unit(&mut m, d);
        let after = heap();
        black_box(&m);
        (
            (after.bytes - before.bytes) as f64 / d as f64,
            (after.allocs - before.allocs) as f64 / d as f64,
        )
    };
    let (bytes, allocs) = unit(d);
    let (bytes_dense, _) = unit(DENSE_D);
    let bytes_u64 = {
        let mut m: Matcher<u64, u64> = Matcher::new();
        let before = heap();
        fill_u64(&mut m, d);
        let after = heap();
        black_box(&m);
        (after.bytes - before.bytes) as f64 / d as f64
    };
    MemRow {
        what,
        bytes,
        allocs,
        bytes_u64,
        bytes_dense,
    }
}

fn memory_rows(d: usize) -> Vec<MemRow> {
    vec![
        mem_row(
            "posted receive, distinct tags (one bin each)",
            d,
            |m, d| (0..d as i32).for_each(|t| assert!(m.post(spec(t), ()).is_err())),
            |m, d| (0..d as i32).for_each(|t| assert!(m.post(spec(t), 0).is_err())),
        ),
        mem_row(
            "posted receive, same tag (one shared bin)",
            d,
            |m, d| (0..d).for_each(|_| assert!(m.post(spec(0), ()).is_err())),
            |m, d| (0..d).for_each(|_| assert!(m.post(spec(0), 0).is_err())),
        ),
        mem_row(
            "posted receive, ANY_SOURCE",
            d,
            |m, d| {
                (0..d as i32)
                    .for_each(|t| assert!(m.post(Selector::from_mpi(CTX, ANY, t), ()).is_err()))
            },
            |m, d| {
                (0..d as i32)
                    .for_each(|t| assert!(m.post(Selector::from_mpi(CTX, ANY, t), 0).is_err()))
            },
        ),
        mem_row(
            "unexpected message, distinct tags (one bin each)",
            d,
            |m, d| (0..d as i32).for_each(|t| assert!(m.arrive(env(SRC, t), ()).is_none())),
            |m, d| (0..d as i32).for_each(|t| assert!(m.arrive(env(SRC, t), 0).is_none())),
        ),
        mem_row(
            "unexpected message, same tag (one shared bin)",
            d,
            |m, d| (0..d).for_each(|_| assert!(m.arrive(env(SRC, 0), ()).is_none())),
            |m, d| (0..d).for_each(|_| assert!(m.arrive(env(SRC, 0), 0).is_none())),
        ),
    ]
}

// ---------------------------------------------------------------------------

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let repeats = if quick { 3 } else { 5 };

    let mut rows_a = Vec::new();
    let mut rows_b = Vec::new();
    let mut rows_c = Vec::new();
    for &d in &DEPTHS {
        // One matcher per scenario and depth, reused across rounds and
        // repeats: its hash tables keep their capacity, as in a running
        // engine. The first (untimed) round sizes them.
        let mut m: Matcher<u64, u64> = Matcher::new();
        posted_reverse(&mut m, d, false);
        let a: Vec<f64> = (0..repeats)
            .map(|_| posted_reverse(&mut m, d, true))
            .collect();
        rows_a.push((d, median(a.clone()), a));

        let mut m: Matcher<u64, u64> = Matcher::new();
        unexpected_reverse(&mut m, d, false);
        let b: Vec<f64> = (0..repeats)
            .map(|_| unexpected_reverse(&mut m, d, true))
            .collect();
        rows_b.push((d, median(b.clone()), b));

        let mx = mix(d, 42 + d as u64);
        let mut m: Matcher<u64, u64> = Matcher::new();
        wildcard_mix(&mut m, &mx, false);
        let mut frac = 0.0;
        let c: Vec<f64> = (0..repeats)
            .map(|_| {
                let (ns, f) = wildcard_mix(&mut m, &mx, true);
                frac = f;
                ns
            })
            .collect();
        rows_c.push((d, median(c.clone()), c, mx.wildcards, frac));
    }

    let mem_d = 65536;
    let mem = memory_rows(mem_d);
    let clock_ns = CLOCK_SAMPLES.with(|c| {
        let v: Vec<f64> = c.borrow().iter().cloned().filter(|&x| x > 0.0).collect();
        median(v)
    });

    let spread = |v: &[f64]| {
        let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = v.iter().cloned().fold(0.0, f64::max);
        format!("{lo:.1} – {hi:.1}")
    };

    println!("## Matching engine alone (`cargo run --release --example match_bench`)");
    println!();
    println!(
        "Median of {repeats} repeats; each repeat times at least {MIN_OPS} operations \
         (many rounds at small D). For D < {BATCH}, each round holds {BATCH}/D independent \
         copies of the depth-D queue in distinct contexts and times them together, so one \
         clock read pair ({clock_ns:.1} ns, measured before each repeat and subtracted) \
         covers at least {BATCH} operations. Same source ({SRC}), distinct tags unless noted."
    );
    println!();
    println!("| D | (a) posted: ns/arrival | (b) unexpected: ns/post | (c) wildcard mix: ns/arrival | (c) wildcards per queue | (c) arrivals matched |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for i in 0..DEPTHS.len() {
        let (d, a, _) = &rows_a[i];
        let (_, b, _) = &rows_b[i];
        let (_, c, _, w, f) = &rows_c[i];
        println!(
            "| {d} | {a:.1} | {b:.1} | {c:.1} | {w} | {:.1} % |",
            f * 100.0
        );
    }
    println!();
    println!("Spread (min – max over repeats), ns:");
    println!();
    println!("| D | (a) | (b) | (c) |");
    println!("|---:|---:|---:|---:|");
    for i in 0..DEPTHS.len() {
        println!(
            "| {} | {} | {} | {} |",
            rows_a[i].0,
            spread(&rows_a[i].2),
            spread(&rows_b[i].2),
            spread(&rows_c[i].2)
        );
    }
    println!();
    println!(
        "(a) posts D receives with tags 0..D, then D messages arrive with tags D-1..0. \
         (b) D messages arrive, then receives are posted with tags D-1..0. \
         (c) 1 in 16 receives is a wildcard (alternately ANY_SOURCE with its own tag, \
         and ANY_TAG from one of {MIX_SOURCES} sources); messages, one per receive, \
         arrive in random order; an ANY_TAG receive can take a message meant for a later \
         specific receive, whose own message then goes to the unexpected queue \
         (hence < 100 % matched)."
    );
    println!();
    println!("### (d) Bookkeeping per queued entry (D = {mem_d})");
    println!();
    println!(
        "Live heap bytes requested from the allocator (counting `#[global_allocator]` \
         wrapper over `System`) after queuing D entries into an empty matcher, divided \
         by D. Payload `()` counts only the engine's own bookkeeping; the `u64` column \
         shows the same with an 8-byte payload. Includes hash-table slack \
         (hashbrown: power-of-two bucket count, at most 7/8 full; D = {mem_d} needs \
         131072 buckets, so about half are empty; the last column is D = {DENSE_D}, \
         tables 7/8 full); excludes malloc's per-chunk headers."
    );
    println!();
    println!(
        "| entry | bytes/entry (payload `()`) | allocations/entry | bytes/entry (payload `u64`) | bytes/entry at D = {DENSE_D} (payload `()`) |"
    );
    println!("|---|---:|---:|---:|---:|");
    for r in &mem {
        println!(
            "| {} | {:.1} | {:.2} | {:.1} | {:.1} |",
            r.what, r.bytes, r.allocs, r.bytes_u64, r.bytes_dense
        );
    }
}
