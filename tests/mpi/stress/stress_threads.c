/*
 * stress_threads: tag matching under MPI_THREAD_MULTIPLE.
 *
 * Usage: stress_threads [total] [options]
 *
 *   total            messages in the whole run, all ranks together (200000)
 *   --seed N         shared seed of the plan (default 12345)
 *   --threads N      threads per rank (default 4)
 *   --wild PCT       share of receives posted with a wildcard (default 20)
 *   --wild-mode M    which wildcards: all (default), anytag (MPI_ANY_TAG with
 *                    a specific source), anysrc (MPI_ANY_SOURCE with a
 *                    specific tag), both (ANY_SOURCE + ANY_TAG), none
 *   --ssend PCT      share of sends made with MPI_Issend (default 5)
 *   --window N       in-flight sends and posted receives per stream (8)
 *   --max-size B     clamp every planned size to at most B bytes
 *   --min-size B     raise every planned size to at least B bytes
 *   --stall SEC      fail when a rank completes nothing for SEC s (30)
 *
 * Layout.  Every rank runs T threads (4).  Sender thread s of rank r sends to
 * receiver thread u of every other rank d on communicator comm[s][u] (T*T
 * duplicates of MPI_COMM_WORLD), so a stream (r, s) -> (d, u) is the only
 * traffic from rank r on comm[s][u] towards d, and it is sent by a single
 * thread: MPI's non-overtaking rule orders it, also for wildcard receives.
 *
 * Plan.  From the shared seed every rank computes how many messages each
 * stream carries (the total split evenly with a +-25% jitter that keeps the
 * sum) and, for message i of a stream, its size and tag:
 *   sizes: 90%  0 .. 256 B (1/16 of them below the 32-byte header, so 0 B
 *               and partial headers occur), else 32 .. 256 B uniform;
 *           9%  257 B .. 64 KiB log-uniform (3% of them exactly 8191, 8192,
 *               8193 or 65536 B: around the default eager limit);
 *           1%  64 KiB .. 4 MiB log-uniform, 1 in 10 of them exactly 4 MiB;
 *   tags:  75% 0 .. 7 (many equal tags in a stream), 25% 0 .. 32767.
 * The receiver therefore knows every message it must get, from whom, with
 * which tag and size.
 *
 * Payload.  A 32-byte header (sender rank, sender thread, destination rank,
 * destination thread, per-stream sequence number, size, tag, checksum of the
 * rest) followed by a pattern seeded by (stream, seq).  A message shorter
 * than 32 bytes carries the first bytes of its header.
 *
 * Receives.  Each receiver thread keeps up to --window receives posted per
 * incoming stream, in stream order.  80% name source and tag; the rest use a
 * wildcard, split evenly between
 *   (source, MPI_ANY_TAG)          posted in stream order like the others;
 *   (MPI_ANY_SOURCE, tag)          tag of the stream's next message;
 *   (MPI_ANY_SOURCE, MPI_ANY_TAG)
 * After an ANY_SOURCE receive is posted on a communicator, nothing more is
 * posted there until it completes.  With that discipline the MPI rules
 * (non-overtaking per sender and communicator; a message goes to the first
 * posted matching receive) determine exactly which message each receive
 * gets: a receive with a specific source gets the message it was posted for,
 * and an ANY_SOURCE receive gets, from the source it reports, the first
 * message of that stream that is neither received nor owned by an earlier
 * posted receive and matches its tag.  Any other outcome is a failure: lost,
 * duplicated, overtaken, misrouted or corrupted message.
 *
 * No deadlock by construction: windows are per stream (a stream never waits
 * for another stream's credits), every posted receive's message is sent
 * eventually, and a thread always posts what its windows allow before it
 * blocks in MPI_Waitsome on all its sends and receives.  A watchdog thread
 * reports the state and fails the run if a rank makes no progress for
 * --stall seconds (a lost message or a hang).
 *
 * At the end each rank probes every communicator for left-over messages
 * (duplicates), the ranks compare global totals, and rank 0 prints
 *   PASS stress_threads messages=N bytes=B seconds=S ...
 */
#include "../common.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

#define HDR 32
#define MAX_MSG (4u * MIB)
#define SEND_BYTES_CAP (4u * MIB)  /* per stream, at least one message */
#define RECV_BYTES_CAP (4u * MIB)  /* per stream, at least one receive */

typedef struct {
    uint32_t src_rank;
    uint16_t src_thread;
    uint16_t dst_thread;
    uint32_t dst_rank;
    uint32_t seq;
    uint32_t size;
    uint32_t tag;
    uint64_t csum;
} hdr_t;
_Static_assert(sizeof(hdr_t) == HDR, "header is 32 bytes");

typedef struct {
    uint32_t size;
    int32_t tag;
} plan_t;

enum { K_SPEC, K_ANYTAG, K_ANYSRC, K_BOTH, K_NKINDS };
static const char *kind_name[K_NKINDS] = {"specific", "ANY_TAG",
                                          "ANY_SOURCE", "ANY_SOURCE+ANY_TAG"};

/* ---- options ------------------------------------------------------------ */

static long opt_total = 200000;
static uint64_t opt_seed = 12345;
static int opt_threads = 4;
static int opt_wild = 20;
static int opt_kinds[K_NKINDS] = {0, 1, 1, 1};
static const char *opt_wild_mode = "all";
static int opt_ssend = 5;
static int opt_window = 8;
static long opt_max_size = -1, opt_min_size = 0;
static int opt_stall = 30;

/* ---- globals ------------------------------------------------------------ */

static int g_np, g_me, g_T;
static MPI_Comm *g_comm;      /* [s * T + u] */
static uint32_t *g_count;     /* messages per stream id */
static atomic_ulong g_progress;
static atomic_int g_workers_done;

static inline int sid_of(int r, int s, int d, int u)
{
    return ((r * g_T + s) * g_np + d) * g_T + u;
}

static inline uint64_t mix2(uint64_t a, uint64_t b)
{
    return splitmix64(a ^ splitmix64(b + 0x632be59bd9b4e019ULL));
}

static plan_t plan_msg(int sid, uint32_t i)
{
    uint64_t x = mix2(opt_seed ^ ((uint64_t)sid << 32), i);
    uint64_t y = splitmix64(x), z = splitmix64(y);
    double uu = (double)(y >> 11) * (1.0 / 9007199254740992.0);
    uint32_t c = (uint32_t)(x % 1000), size;
    if (c < 900) {
        if ((y & 15) == 0)
            size = (uint32_t)((y >> 8) % HDR);
        else
            size = HDR + (uint32_t)((y >> 8) % (257 - HDR));
    } else if (c < 990) {
        if ((z >> 40) % 100 < 3) {
            static const uint32_t edge[4] = {8191, 8192, 8193, 65536};
            size = edge[(z >> 50) & 3];
        } else {
            size = (uint32_t)(257.0 * pow(65536.0 / 257.0, uu));
        }
    } else {
        if ((z >> 40) % 10 == 0)
            size = MAX_MSG;
        else
            size = (uint32_t)(65537.0 * pow((double)MAX_MSG / 65537.0, uu));
    }
    if (size > MAX_MSG)
        size = MAX_MSG;
    if (opt_max_size >= 0 && size > (uint64_t)opt_max_size)
        size = (uint32_t)opt_max_size;
    if (size < (uint64_t)opt_min_size)
        size = (uint32_t)opt_min_size;
    plan_t p;
    p.size = size;
    p.tag = (z & 3) != 0 ? (int32_t)((z >> 2) & 7) : (int32_t)((z >> 8) % 32768);
    return p;
}

static inline int plan_ssend(int sid, uint32_t i)
{
    uint64_t x = mix2(opt_seed ^ 0x55aa55aa00000000ULL ^ (uint64_t)sid, i);
    return (int)(x % 100) < opt_ssend;
}

static inline uint64_t payload_seed(int sid, uint32_t i)
{
    return mix2(opt_seed * 31 + (uint64_t)sid, i);
}

static void make_counts(void)
{
    size_t nsid = (size_t)g_np * g_T * g_np * g_T;
    g_count = calloc(nsid, sizeof(uint32_t));
    int *list = xmalloc(nsid * sizeof(int));
    long S = 0;
    for (int r = 0; r < g_np; r++)
        for (int s = 0; s < g_T; s++)
            for (int d = 0; d < g_np; d++)
                for (int u = 0; u < g_T; u++)
                    if (d != r)
                        list[S++] = sid_of(r, s, d, u);
    long base = opt_total / S, rem = opt_total % S;
    for (long k = 0; k < S; k++)
        g_count[list[k]] = (uint32_t)(base + (k < rem));
    for (long k = 0; k + 1 < S; k += 2) {
        uint32_t j = (uint32_t)(mix2(opt_seed ^ 0xc0ffee, (uint64_t)k) %
                                ((uint64_t)base / 4 + 1));
        g_count[list[k]] += j;
        g_count[list[k + 1]] -= j;
    }
    free(list);
}

static void build_hdr(hdr_t *h, int r, int s, int d, int u, uint32_t i,
                      plan_t p, uint64_t csum)
{
    memset(h, 0, sizeof(*h));
    h->src_rank = (uint32_t)r;
    h->src_thread = (uint16_t)s;
    h->dst_rank = (uint32_t)d;
    h->dst_thread = (uint16_t)u;
    h->seq = i;
    h->size = p.size;
    h->tag = (uint32_t)p.tag;
    h->csum = csum;
}

/* ---- per-thread state ---------------------------------------------------- */

typedef struct {
    int sid, d, u;
    uint32_t n, next, inflight;
    uint64_t inflight_bytes;
} ostream_t;

typedef struct {
    int sid, r;
    uint32_t n, cursor, ncons, outstanding;
    uint64_t out_bytes;
    plan_t *plan;
    uint8_t *state; /* 0 untouched, 1 owned by a posted receive, 2 received */
} istream_t;

typedef struct {
    int s;
    MPI_Comm comm;
    istream_t *st; /* np - 1 streams, by source rank order */
    int paused;    /* slot of the outstanding ANY_SOURCE receive, or -1 */
} icomm_t;

enum { SL_FREE, SL_SEND, SL_RECV };

typedef struct {
    int type, kind;
    int stream;   /* ostream index (send) or istream index in its comm */
    int ci;       /* icomm index (recv) */
    uint32_t idx; /* seq (send, assigned recv) */
    int src_sel, tag_sel;
    uint8_t *buf;
    uint32_t bufsize;
    int ssend;
    double t_post;
} slot_t;

typedef struct {
    int t;
    pthread_t th;
    pthread_mutex_t mu;
    const char *volatile in_call;
    uint64_t rng;
    int nout;
    ostream_t *out;
    icomm_t *ic; /* T comms: comm[s][t] for s = 0..T-1 */
    int nslots, active;
    MPI_Request *req;
    slot_t *slot;
    int *idx;
    MPI_Status *sts;
    uint32_t sends_left; /* messages not yet completed */
    uint64_t recvs_left;
    /* counters */
    uint64_t sent_msgs, sent_bytes, recv_msgs, recv_bytes, ssends;
    uint64_t kinds[K_NKINDS];
    double t_done;
} worker_t;

static worker_t *g_w;

static inline uint64_t rnd(worker_t *w)
{
    w->rng += 0x9e3779b97f4a7c15ULL;
    return splitmix64(w->rng);
}

static int free_slot(worker_t *w)
{
    for (int k = 0; k < w->nslots; k++)
        if (w->slot[k].type == SL_FREE)
            return k;
    fail("thread %d: no free request slot (internal)", w->t);
}

/* ---- sending ------------------------------------------------------------ */

static void post_send(worker_t *w, int oi)
{
    ostream_t *o = &w->out[oi];
    uint32_t i = o->next++;
    plan_t p = plan_msg(o->sid, i);
    int k = free_slot(w);
    slot_t *sl = &w->slot[k];
    uint8_t *buf = xmalloc(p.size);
    hdr_t h;
    uint64_t csum = 0;
    if (p.size >= HDR) {
        fill_pattern(buf + HDR, p.size - HDR, payload_seed(o->sid, i));
        csum = checksum64(buf + HDR, p.size - HDR);
    } else {
        csum = checksum64(NULL, 0);
    }
    build_hdr(&h, g_me, w->t, o->d, o->u, i, p, csum);
    memcpy(buf, &h, p.size < HDR ? p.size : HDR);
    memset(sl, 0, sizeof(*sl));
    sl->type = SL_SEND;
    sl->stream = oi;
    sl->idx = i;
    sl->buf = buf;
    sl->bufsize = p.size;
    sl->ssend = plan_ssend(o->sid, i);
    sl->tag_sel = p.tag;
    sl->t_post = now_sec();
    MPI_Comm comm = g_comm[w->t * g_T + o->u];
    w->in_call = sl->ssend ? "MPI_Issend" : "MPI_Isend";
    if (sl->ssend)
        MPI_CHECK(MPI_Issend(buf, (int)p.size, MPI_BYTE, o->d, p.tag, comm,
                             &w->req[k]));
    else
        MPI_CHECK(MPI_Isend(buf, (int)p.size, MPI_BYTE, o->d, p.tag, comm,
                            &w->req[k]));
    w->in_call = NULL;
    o->inflight++;
    o->inflight_bytes += p.size;
    w->active++;
}

static void post_sends(worker_t *w)
{
    for (;;) {
        uint64_t tot = 0;
        for (int k = 0; k < w->nout; k++) {
            ostream_t *o = &w->out[k];
            if (o->next >= o->n || o->inflight >= (uint32_t)opt_window)
                continue;
            if (o->inflight > 0 &&
                o->inflight_bytes + plan_msg(o->sid, o->next).size >
                    SEND_BYTES_CAP)
                continue;
            tot += o->n - o->next;
        }
        if (tot == 0)
            return;
        uint64_t pick = rnd(w) % tot;
        for (int k = 0; k < w->nout; k++) {
            ostream_t *o = &w->out[k];
            if (o->next >= o->n || o->inflight >= (uint32_t)opt_window)
                continue;
            if (o->inflight > 0 &&
                o->inflight_bytes + plan_msg(o->sid, o->next).size >
                    SEND_BYTES_CAP)
                continue;
            if (pick < o->n - o->next) {
                post_send(w, k);
                break;
            }
            pick -= o->n - o->next;
        }
    }
}

static void send_done(worker_t *w, int k)
{
    slot_t *sl = &w->slot[k];
    ostream_t *o = &w->out[sl->stream];
    o->inflight--;
    o->inflight_bytes -= sl->bufsize;
    w->sent_msgs++;
    w->sent_bytes += sl->bufsize;
    w->ssends += sl->ssend;
    w->sends_left--;
    free(sl->buf);
    sl->type = SL_FREE;
}

/* ---- receiving ---------------------------------------------------------- */

static inline int src_index(int r) { return r < g_me ? r : r - 1; }

static void advance_cursor(istream_t *x)
{
    while (x->cursor < x->n && x->state[x->cursor] != 0)
        x->cursor++;
}

/* First message of stream x that is neither received nor owned by a posted
 * receive and whose tag matches tag_sel; UINT32_MAX if none. */
static uint32_t candidate(const istream_t *x, int tag_sel)
{
    for (uint32_t j = x->cursor; j < x->n; j++)
        if (x->state[j] == 0 &&
            (tag_sel == MPI_ANY_TAG || x->plan[j].tag == tag_sel))
            return j;
    return UINT32_MAX;
}

static void post_recv(worker_t *w, int ci, int xi, int kind)
{
    icomm_t *c = &w->ic[ci];
    istream_t *x = &c->st[xi];
    int k = free_slot(w);
    slot_t *sl = &w->slot[k];
    memset(sl, 0, sizeof(*sl));
    sl->type = SL_RECV;
    sl->kind = kind;
    sl->ci = ci;
    sl->stream = xi;
    sl->t_post = now_sec();
    uint32_t i = x->cursor;
    plan_t p = x->plan[i];
    if (kind == K_SPEC || kind == K_ANYTAG) {
        sl->idx = i;
        sl->src_sel = x->r;
        sl->tag_sel = kind == K_SPEC ? p.tag : MPI_ANY_TAG;
        sl->bufsize = p.size;
        x->state[i] = 1;
        x->outstanding++;
        x->out_bytes += p.size;
        advance_cursor(x);
    } else {
        sl->idx = UINT32_MAX;
        sl->src_sel = MPI_ANY_SOURCE;
        sl->tag_sel = kind == K_ANYSRC ? p.tag : MPI_ANY_TAG;
        uint32_t maxsz = 0;
        for (int q = 0; q < g_np - 1; q++) {
            uint32_t j = candidate(&c->st[q], sl->tag_sel);
            if (j != UINT32_MAX && c->st[q].plan[j].size > maxsz)
                maxsz = c->st[q].plan[j].size;
        }
        sl->bufsize = maxsz;
        c->paused = k;
    }
    sl->buf = xmalloc(sl->bufsize);
    w->kinds[kind]++;
    w->in_call = "MPI_Irecv";
    MPI_CHECK(MPI_Irecv(sl->buf, (int)sl->bufsize, MPI_BYTE, sl->src_sel,
                        sl->tag_sel, c->comm, &w->req[k]));
    w->in_call = NULL;
    w->active++;
}

static int pick_kind(worker_t *w)
{
    if ((int)(rnd(w) % 100) >= opt_wild)
        return K_SPEC;
    int n = 0, ks[K_NKINDS];
    for (int k = K_ANYTAG; k < K_NKINDS; k++)
        if (opt_kinds[k])
            ks[n++] = k;
    if (n == 0)
        return K_SPEC;
    return ks[rnd(w) % (uint64_t)n];
}

static void post_recvs(worker_t *w)
{
    for (int ci = 0; ci < g_T; ci++) {
        icomm_t *c = &w->ic[ci];
        if (c->paused >= 0)
            continue;
        int ns = g_np - 1, start = (int)(rnd(w) % (uint64_t)ns);
        for (int q = 0; q < ns && c->paused < 0; q++) {
            int xi = (start + q) % ns;
            istream_t *x = &c->st[xi];
            while (x->cursor < x->n && x->outstanding < (uint32_t)opt_window &&
                   (x->outstanding == 0 ||
                    x->out_bytes + x->plan[x->cursor].size <= RECV_BYTES_CAP)) {
                int kind = pick_kind(w);
                post_recv(w, ci, xi, kind);
                if (kind == K_ANYSRC || kind == K_BOTH)
                    break; /* comm paused */
            }
        }
    }
}

static void describe_expected(char *out, size_t n, const istream_t *x, int s,
                              int u, uint32_t i)
{
    if (i == UINT32_MAX) {
        snprintf(out, n, "(no candidate)");
        return;
    }
    snprintf(out, n, "seq %u (from rank %d thread %d to thread %d, tag %d, "
             "%u bytes)", i, x->r, s, u, x->plan[i].tag, x->plan[i].size);
}

static const char *seq_state_str(const istream_t *x, uint32_t j)
{
    if (j >= x->n)
        return "beyond the end of the stream";
    switch (x->state[j]) {
    case 0: return "not yet received";
    case 1: return "owned by another posted receive (wrong match)";
    default: return "ALREADY RECEIVED (duplicate)";
    }
}

/* Describes the header found in a received buffer of len bytes (the
 * message that actually matched), with what the receiver knows of it. */
static void describe_got(char *out, size_t n, worker_t *w, const icomm_t *c,
                         const uint8_t *buf, long len)
{
    if (len < HDR) {
        snprintf(out, n, "%ld bytes, too short for a header", len);
        return;
    }
    hdr_t g;
    memcpy(&g, buf, HDR);
    const char *st = "message of another stream: misrouted";
    if (g.src_thread == c->s && g.dst_rank == (uint32_t)g_me &&
        g.dst_thread == w->t && g.src_rank < (uint32_t)g_np &&
        g.src_rank != (uint32_t)g_me)
        st = seq_state_str(&c->st[src_index((int)g.src_rank)], g.seq);
    snprintf(out, n, "header says rank %u thread %u -> rank %u thread %u "
             "seq %u, %u bytes, tag %u: %s",
             g.src_rank, g.src_thread, g.dst_rank, g.dst_thread, g.seq,
             g.size, g.tag, st);
}

/* Checks a received message against message i of stream x; fails with a
 * description of the violation. */
static void verify(worker_t *w, slot_t *sl, const MPI_Status *st, int count,
                   istream_t *x, int s, uint32_t i)
{
    int u = w->t;
    plan_t p = x->plan[i];
    char exp[256];
    describe_expected(exp, sizeof(exp), x, s, u, i);
    const char *kn = kind_name[sl->kind];
    if (st->MPI_SOURCE != x->r || st->MPI_TAG != p.tag ||
        count != (int)p.size) {
        char got[256];
        describe_got(got, sizeof(got), w, &w->ic[sl->ci], sl->buf, count);
        fail("%s receive on comm[%d][%d] (src %d, tag %d, buf %u B) "
             "expected %s but status says source %d tag %d count %d; %s",
             kn, s, u, sl->src_sel, sl->tag_sel, sl->bufsize, exp,
             st->MPI_SOURCE, st->MPI_TAG, count, got);
    }
    hdr_t e, g;
    uint64_t csum = p.size >= HDR ? 0 : checksum64(NULL, 0);
    build_hdr(&e, x->r, s, g_me, u, i, p, csum);
    if (p.size < HDR) {
        if (memcmp(sl->buf, &e, p.size) != 0)
            fail("%s receive on comm[%d][%d]: %u-byte message %s: payload "
                 "(partial header) differs from the expected bytes",
                 kn, s, u, p.size, exp);
        return;
    }
    memcpy(&g, sl->buf, HDR);
    e.csum = g.csum;
    if (memcmp(&e, &g, HDR) != 0) {
        const char *why = "header corrupted or message misrouted";
        if (g.src_rank == e.src_rank && g.src_thread == e.src_thread &&
            g.dst_rank == e.dst_rank && g.dst_thread == e.dst_thread &&
            g.seq != i) {
            if (g.seq < x->n && x->state[g.seq] == 2)
                why = "DUPLICATE: that seq was already received";
            else if (g.seq > i)
                why = "ORDER VIOLATION: a later message overtook the expected one";
            else
                why = "ORDER VIOLATION: an earlier message arrived late";
        }
        fail("%s receive on comm[%d][%d] expected %s but the header says "
             "rank %u thread %u -> rank %u thread %u seq %u (%s), size %u, "
             "tag %u: %s",
             kn, s, u, exp, g.src_rank, g.src_thread, g.dst_rank,
             g.dst_thread, g.seq,
             g.src_rank == e.src_rank && g.src_thread == e.src_thread &&
                     g.dst_thread == e.dst_thread
                 ? seq_state_str(x, g.seq)
                 : "other stream",
             g.size, g.tag, why);
    }
    uint64_t got = checksum64(sl->buf + HDR, p.size - HDR);
    if (got != g.csum) {
        uint64_t ps = payload_seed(x->sid, i);
        size_t bad = check_pattern(sl->buf + HDR, p.size - HDR, ps), nbad = 0;
        for (size_t b = 0; b < p.size - HDR; b++)
            nbad += sl->buf[HDR + b] != pattern_byte(ps, b);
        fail("%s receive on comm[%d][%d]: CORRUPTED payload of %s: checksum "
             "0x%016llx, header says 0x%016llx; first bad byte at offset %zu "
             "of %u, %zu bad bytes",
             kn, s, u, exp, (unsigned long long)got,
             (unsigned long long)g.csum,
             bad == (size_t)-1 ? (size_t)-1 : bad + HDR, p.size, nbad);
    }
}

static void recv_done(worker_t *w, int k, const MPI_Status *st)
{
    slot_t *sl = &w->slot[k];
    icomm_t *c = &w->ic[sl->ci];
    int count = -1, s = c->s, u = w->t;
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &count));
    istream_t *x;
    uint32_t i;
    if (sl->kind == K_SPEC || sl->kind == K_ANYTAG) {
        x = &c->st[sl->stream];
        i = sl->idx;
        verify(w, sl, st, count, x, s, i);
        x->outstanding--;
        x->out_bytes -= x->plan[i].size;
    } else {
        int r = st->MPI_SOURCE;
        if (r < 0 || r >= g_np || r == g_me)
            fail("%s receive on comm[%d][%d] (tag %d): status source %d is "
                 "not a peer (tag %d, count %d)",
                 kind_name[sl->kind], s, u, sl->tag_sel, r, st->MPI_TAG, count);
        x = &c->st[src_index(r)];
        uint32_t cand = candidate(x, sl->tag_sel);
        char exp[256];
        describe_expected(exp, sizeof(exp), x, s, u, cand);
        if (count >= HDR) {
            hdr_t g;
            memcpy(&g, sl->buf, HDR);
            if (g.src_rank != (uint32_t)r || g.src_thread != s ||
                g.dst_rank != (uint32_t)g_me || g.dst_thread != u)
                fail("%s receive on comm[%d][%d] (tag %d): source %d but the "
                     "header says rank %u thread %u -> rank %u thread %u "
                     "seq %u: misrouted",
                     kind_name[sl->kind], s, u, sl->tag_sel, r, g.src_rank,
                     g.src_thread, g.dst_rank, g.dst_thread, g.seq);
            if (g.seq != cand) {
                const char *why;
                if (g.seq >= x->n)
                    why = "seq beyond the end of the stream";
                else if (x->state[g.seq] == 2)
                    why = "DUPLICATE: that seq was already received";
                else if (x->state[g.seq] == 1)
                    why = "POSTING ORDER: the message belongs to an earlier "
                          "posted receive";
                else if (cand != UINT32_MAX && g.seq > cand)
                    why = "ORDER VIOLATION: it overtook an earlier matching "
                          "message of the same sender";
                else
                    why = "unexpected message";
                fail("%s receive on comm[%d][%d] (tag %d) from rank %d got "
                     "seq %u (tag %u, %u B) but the first matching pending "
                     "message is %s: %s",
                     kind_name[sl->kind], s, u, sl->tag_sel, r, g.seq, g.tag,
                     g.size, exp, why);
            }
        } else if (cand == UINT32_MAX) {
            fail("%s receive on comm[%d][%d] (tag %d) got a %d-byte message "
                 "from rank %d tag %d, but no matching message is pending",
                 kind_name[sl->kind], s, u, sl->tag_sel, count, r,
                 st->MPI_TAG);
        }
        i = cand;
        verify(w, sl, st, count, x, s, i);
        c->paused = -1;
    }
    x->state[i] = 2;
    x->ncons++;
    advance_cursor(x);
    w->recv_msgs++;
    w->recv_bytes += (uint64_t)count;
    w->recvs_left--;
    free(sl->buf);
    sl->type = SL_FREE;
}

/* ---- worker ------------------------------------------------------------- */

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        post_sends(w);
        post_recvs(w);
        if (w->active == 0) {
            if (w->sends_left == 0 && w->recvs_left == 0)
                break;
            fail("thread %d: nothing in flight but %u sends and %llu "
                 "receives left (internal)",
                 w->t, w->sends_left, (unsigned long long)w->recvs_left);
        }
        pthread_mutex_unlock(&w->mu);
        int outcount = 0;
        w->in_call = "MPI_Waitsome";
        int rc = MPI_Waitsome(w->nslots, w->req, &outcount, w->idx, w->sts);
        w->in_call = NULL;
        pthread_mutex_lock(&w->mu);
        if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS)
            fail("thread %d: MPI_Waitsome returned %s", w->t, mpi_err_str(rc));
        if (outcount == MPI_UNDEFINED)
            fail("thread %d: MPI_Waitsome found no active request but %d "
                 "are in flight", w->t, w->active);
        for (int q = 0; q < outcount; q++) {
            int k = w->idx[q];
            slot_t *sl = &w->slot[k];
            if (rc == MPI_ERR_IN_STATUS && w->sts[q].MPI_ERROR != MPI_SUCCESS) {
                if (sl->type == SL_SEND)
                    fail("thread %d: %s seq %u to rank %d thread %d (%u B, "
                         "tag %d) failed: %s",
                         w->t, sl->ssend ? "Issend" : "Isend", sl->idx,
                         w->out[sl->stream].d, w->out[sl->stream].u,
                         sl->bufsize, sl->tag_sel,
                         mpi_err_str(w->sts[q].MPI_ERROR));
                icomm_t *c = &w->ic[sl->ci];
                char exp[256] = "", got[256] = "";
                if (sl->idx != UINT32_MAX)
                    describe_expected(exp, sizeof(exp), &c->st[sl->stream],
                                      c->s, w->t, sl->idx);
                int trunc = mpi_err_class(w->sts[q].MPI_ERROR) ==
                            MPI_ERR_TRUNCATE;
                if (trunc)
                    describe_got(got, sizeof(got), w, c, sl->buf,
                                 (long)sl->bufsize);
                fail("thread %d: %s receive on comm[%d][%d] (src %d, tag %d, "
                     "buffer %u B) for %s failed: %s (status source %d tag "
                     "%d)%s%s",
                     w->t, kind_name[sl->kind], c->s, w->t, sl->src_sel,
                     sl->tag_sel, sl->bufsize,
                     exp[0] ? exp : "the first matching pending message",
                     mpi_err_str(w->sts[q].MPI_ERROR), w->sts[q].MPI_SOURCE,
                     w->sts[q].MPI_TAG,
                     trunc ? ": a larger message than planned matched (wrong "
                             "match); "
                           : "",
                     got);
            }
            if (sl->type == SL_SEND)
                send_done(w, k);
            else if (sl->type == SL_RECV)
                recv_done(w, k, &w->sts[q]);
            else
                fail("thread %d: completion of free slot %d", w->t, k);
            w->req[k] = MPI_REQUEST_NULL;
            w->active--;
        }
        atomic_fetch_add_explicit(&g_progress, (unsigned long)outcount,
                                  memory_order_relaxed);
    }
    w->t_done = now_sec();
    pthread_mutex_unlock(&w->mu);
    atomic_fetch_add(&g_workers_done, 1);
    return NULL;
}

static void worker_init(worker_t *w, int t)
{
    memset(w, 0, sizeof(*w));
    w->t = t;
    pthread_mutex_init(&w->mu, NULL);
    /* receive kinds and send interleaving: deterministic per seed */
    w->rng = mix2(opt_seed ^ 0xabcdef, (uint64_t)(g_me * 1000 + t));
    w->nout = (g_np - 1) * g_T;
    w->out = calloc((size_t)w->nout, sizeof(ostream_t));
    int k = 0;
    for (int d = 0; d < g_np; d++) {
        if (d == g_me)
            continue;
        for (int u = 0; u < g_T; u++, k++) {
            ostream_t *o = &w->out[k];
            o->sid = sid_of(g_me, t, d, u);
            o->d = d;
            o->u = u;
            o->n = g_count[o->sid];
            w->sends_left += o->n;
        }
    }
    w->ic = calloc((size_t)g_T, sizeof(icomm_t));
    for (int s = 0; s < g_T; s++) {
        icomm_t *c = &w->ic[s];
        c->s = s;
        c->comm = g_comm[s * g_T + t];
        c->paused = -1;
        c->st = calloc((size_t)g_np - 1, sizeof(istream_t));
        for (int r = 0; r < g_np; r++) {
            if (r == g_me)
                continue;
            istream_t *x = &c->st[src_index(r)];
            x->r = r;
            x->sid = sid_of(r, s, g_me, t);
            x->n = g_count[x->sid];
            x->plan = xmalloc((size_t)x->n * sizeof(plan_t));
            x->state = calloc(x->n ? x->n : 1, 1);
            for (uint32_t i = 0; i < x->n; i++)
                x->plan[i] = plan_msg(x->sid, i);
            w->recvs_left += x->n;
        }
    }
    w->nslots = w->nout * opt_window + (g_np - 1) * g_T * opt_window + g_T;
    w->req = xmalloc((size_t)w->nslots * sizeof(MPI_Request));
    w->slot = calloc((size_t)w->nslots, sizeof(slot_t));
    w->idx = xmalloc((size_t)w->nslots * sizeof(int));
    w->sts = xmalloc((size_t)w->nslots * sizeof(MPI_Status));
    for (int q = 0; q < w->nslots; q++)
        w->req[q] = MPI_REQUEST_NULL;
}

/* ---- watchdog ----------------------------------------------------------- */

static atomic_int g_wd_stop;

static void dump_state(double idle)
{
    double now = now_sec();
    fprintf(stderr, "rank %d: no completion for %.0f s; state:\n", g_me, idle);
    for (int t = 0; t < g_T; t++) {
        worker_t *w = &g_w[t];
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 2;
        if (pthread_mutex_timedlock(&w->mu, &ts) != 0) {
            const char *call = w->in_call;
            fprintf(stderr, "  rank %d thread %d: busy inside %s\n", g_me, t,
                    call ? call : "(unknown)");
            continue;
        }
        fprintf(stderr, "  rank %d thread %d: %s, %u sends and %llu receives "
                "left, %d requests in flight\n",
                g_me, t, w->t_done > 0 ? "done" : "running", w->sends_left,
                (unsigned long long)w->recvs_left, w->active);
        for (int k = 0; k < w->nout; k++) {
            ostream_t *o = &w->out[k];
            if (o->next == o->n && o->inflight == 0)
                continue;
            fprintf(stderr, "    send stream -> rank %d thread %d: posted "
                    "%u/%u, %u in flight\n", o->d, o->u, o->next, o->n,
                    o->inflight);
        }
        for (int ci = 0; ci < g_T; ci++) {
            icomm_t *c = &w->ic[ci];
            for (int q = 0; q < g_np - 1; q++) {
                istream_t *x = &c->st[q];
                if (x->ncons == x->n)
                    continue;
                fprintf(stderr, "    recv stream <- rank %d thread %d "
                        "(comm[%d][%d]): received %u/%u, cursor %u, %u posted%s\n",
                        x->r, c->s, c->s, t, x->ncons, x->n, x->cursor,
                        x->outstanding,
                        c->paused >= 0 ? ", comm paused on ANY_SOURCE" : "");
            }
        }
        for (int k = 0; k < w->nslots; k++) {
            slot_t *sl = &w->slot[k];
            if (sl->type == SL_SEND) {
                ostream_t *o = &w->out[sl->stream];
                fprintf(stderr, "    pending %s seq %u -> rank %d thread %d "
                        "tag %d %u B (posted %.1f s ago)\n",
                        sl->ssend ? "Issend" : "Isend", sl->idx, o->d, o->u,
                        sl->tag_sel, sl->bufsize, now - sl->t_post);
            } else if (sl->type == SL_RECV) {
                icomm_t *c = &w->ic[sl->ci];
                char exp[256] = "any";
                if (sl->idx != UINT32_MAX)
                    describe_expected(exp, sizeof(exp), &c->st[sl->stream],
                                      c->s, t, sl->idx);
                fprintf(stderr, "    pending %s Irecv comm[%d][%d] src %d "
                        "tag %d buf %u B for %s (posted %.1f s ago)\n",
                        kind_name[sl->kind], c->s, t, sl->src_sel, sl->tag_sel,
                        sl->bufsize, exp, now - sl->t_post);
            }
        }
        pthread_mutex_unlock(&w->mu);
    }
    fflush(stderr);
}

static void *watchdog_main(void *arg)
{
    (void)arg;
    unsigned long last = atomic_load(&g_progress);
    double t_last = now_sec();
    while (!atomic_load(&g_wd_stop)) {
        sleep_ms(200);
        unsigned long p = atomic_load(&g_progress);
        double now = now_sec();
        if (p != last) {
            last = p;
            t_last = now;
            continue;
        }
        /* A rank whose threads are all done waits for the others: give the
         * stuck rank time to report first. */
        int limit = atomic_load(&g_workers_done) == g_T ? 2 * opt_stall + 5
                                                        : opt_stall;
        if (now - t_last >= limit) {
            dump_state(now - t_last);
            /* let the other ranks' watchdogs report too before the abort */
            sleep_ms(5000);
            fail("no progress for %d s on rank %d (%d of %d threads done): "
                 "hang, lost message or deadlock",
                 limit, g_me, atomic_load(&g_workers_done), g_T);
        }
    }
    return NULL;
}

/* ---- main --------------------------------------------------------------- */

static void usage_fail(const char *msg)
{
    fail("bad arguments: %s", msg);
}

static void parse_args(int argc, char **argv)
{
    for (int a = 1; a < argc; a++) {
        const char *s = argv[a];
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
#define NEEDV()                                                                \
    do {                                                                       \
        if (v == NULL)                                                         \
            usage_fail(s);                                                     \
        a++;                                                                   \
    } while (0)
        if (!strcmp(s, "--seed")) {
            NEEDV();
            opt_seed = strtoull(v, NULL, 0);
        } else if (!strcmp(s, "--threads")) {
            NEEDV();
            opt_threads = atoi(v);
        } else if (!strcmp(s, "--wild")) {
            NEEDV();
            opt_wild = atoi(v);
        } else if (!strcmp(s, "--wild-mode")) {
            NEEDV();
            opt_wild_mode = v;
            for (int k = K_ANYTAG; k < K_NKINDS; k++)
                opt_kinds[k] = 0;
            if (!strcmp(v, "all"))
                opt_kinds[K_ANYTAG] = opt_kinds[K_ANYSRC] = opt_kinds[K_BOTH] = 1;
            else if (!strcmp(v, "anytag"))
                opt_kinds[K_ANYTAG] = 1;
            else if (!strcmp(v, "anysrc"))
                opt_kinds[K_ANYSRC] = 1;
            else if (!strcmp(v, "both"))
                opt_kinds[K_BOTH] = 1;
            else if (strcmp(v, "none"))
                usage_fail("--wild-mode all|anytag|anysrc|both|none");
        } else if (!strcmp(s, "--ssend")) {
            NEEDV();
            opt_ssend = atoi(v);
        } else if (!strcmp(s, "--window")) {
            NEEDV();
            opt_window = atoi(v);
        } else if (!strcmp(s, "--max-size")) {
            NEEDV();
            opt_max_size = atol(v);
        } else if (!strcmp(s, "--min-size")) {
            NEEDV();
            opt_min_size = atol(v);
        } else if (!strcmp(s, "--stall")) {
            NEEDV();
            opt_stall = atoi(v);
        } else if (s[0] >= '0' && s[0] <= '9') {
            opt_total = atol(s);
        } else {
            usage_fail(s);
        }
#undef NEEDV
    }
    if (opt_total < 1 || opt_threads < 1 || opt_threads > 64 ||
        opt_window < 1 || opt_wild < 0 || opt_wild > 100 || opt_stall < 1 ||
        opt_max_size > (long)MAX_MSG || opt_min_size < 0 ||
        opt_min_size > (long)MAX_MSG)
        usage_fail("value out of range");
}

int main(int argc, char **argv)
{
    int provided = -1;
    test_name = "stress_threads";
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) !=
        MPI_SUCCESS) {
        fprintf(stderr, "FAIL: MPI_Init_thread failed\n");
        return 1;
    }
    test_setup("stress_threads");
    CHECK(provided >= MPI_THREAD_MULTIPLE,
          "MPI_Init_thread provided %d, need MPI_THREAD_MULTIPLE (%d)",
          provided, MPI_THREAD_MULTIPLE);
    require_np(2);
    parse_args(argc, argv);
    g_np = test_size;
    g_me = test_rank;
    g_T = opt_threads;
    {
        void *ub = NULL;
        int flag = 0;
        MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
        CHECK(flag && *(int *)ub >= 32767, "MPI_TAG_UB below 32767");
    }
    g_comm = xmalloc((size_t)g_T * g_T * sizeof(MPI_Comm));
    for (int k = 0; k < g_T * g_T; k++)
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g_comm[k]));
    make_counts();
    g_w = calloc((size_t)g_T, sizeof(worker_t));
    uint64_t plan_msgs = 0, plan_bytes = 0, my_in = 0;
    for (int t = 0; t < g_T; t++) {
        worker_init(&g_w[t], t);
        my_in += g_w[t].recvs_left;
    }
    /* Plan totals (same on every rank). */
    for (int r = 0; r < g_np; r++)
        for (int s = 0; s < g_T; s++)
            for (int d = 0; d < g_np; d++)
                for (int u = 0; u < g_T; u++) {
                    if (d == r)
                        continue;
                    plan_msgs += g_count[sid_of(r, s, d, u)];
                }
    for (int t = 0; t < g_T; t++)
        for (int s = 0; s < g_T; s++)
            for (int q = 0; q < g_np - 1; q++) {
                istream_t *x = &g_w[t].ic[s].st[q];
                for (uint32_t i = 0; i < x->n; i++)
                    plan_bytes += x->plan[i].size;
            }
    CHECK(plan_msgs == (uint64_t)opt_total, "plan has %llu messages, not %ld",
          (unsigned long long)plan_msgs, opt_total);
    if (g_me == 0)
        printf("INFO stress_threads: np=%d threads=%d messages=%ld seed=%llu "
               "wild=%d%% (%s) ssend=%d%% window=%d sizes: 90%% 0-256 B, "
               "9%% 257 B-64 KiB, 1%% 64 KiB-4 MiB%s\n",
               g_np, g_T, opt_total, (unsigned long long)opt_seed, opt_wild,
               opt_wild_mode, opt_ssend, opt_window,
               opt_max_size >= 0 || opt_min_size > 0 ? " (clamped)" : "");

    pthread_t wd;
    CHECK(pthread_create(&wd, NULL, watchdog_main, NULL) == 0,
          "pthread_create failed");
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = now_sec();
    for (int t = 0; t < g_T; t++)
        CHECK(pthread_create(&g_w[t].th, NULL, worker_main, &g_w[t]) == 0,
              "pthread_create failed");
    for (int t = 0; t < g_T; t++)
        pthread_join(g_w[t].th, NULL);
    double t_local = now_sec() - t0;

    /* Every planned message received exactly once (complete by
     * construction of the loop; checked explicitly). */
    uint64_t sm = 0, sb = 0, rm = 0, rb = 0, ss = 0, kinds[K_NKINDS] = {0};
    for (int t = 0; t < g_T; t++) {
        worker_t *w = &g_w[t];
        for (int s = 0; s < g_T; s++)
            for (int q = 0; q < g_np - 1; q++) {
                istream_t *x = &w->ic[s].st[q];
                CHECK(x->ncons == x->n,
                      "stream rank %d thread %d -> thread %d: received %u of "
                      "%u messages", x->r, s, t, x->ncons, x->n);
                for (uint32_t i = 0; i < x->n; i++)
                    CHECK(x->state[i] == 2, "stream rank %d thread %d -> "
                          "thread %d: message %u not received", x->r, s, t, i);
            }
        sm += w->sent_msgs;
        sb += w->sent_bytes;
        rm += w->recv_msgs;
        rb += w->recv_bytes;
        ss += w->ssends;
        for (int k = 0; k < K_NKINDS; k++)
            kinds[k] += w->kinds[k];
    }
    CHECK(rm == my_in, "received %llu messages, plan says %llu",
          (unsigned long long)rm, (unsigned long long)my_in);

    /* Left-over messages would be duplicates: probe every communicator. */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double tp = now_sec();
    while (now_sec() - tp < 0.3) {
        for (int k = 0; k < g_T * g_T; k++) {
            int flag = 0;
            MPI_Status st;
            MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, g_comm[k], &flag,
                                 &st));
            if (flag) {
                int count = -1;
                MPI_Get_count(&st, MPI_BYTE, &count);
                fail("EXTRA message on comm[%d][%d] after every planned "
                     "message was received: source %d tag %d %d bytes "
                     "(duplicate?)",
                     k / g_T, k % g_T, st.MPI_SOURCE, st.MPI_TAG, count);
            }
        }
        sleep_ms(10);
    }
    atomic_store(&g_wd_stop, 1);
    pthread_join(wd, NULL);

    uint64_t loc[6 + K_NKINDS] = {sm, sb, rm, rb, ss, plan_bytes};
    for (int k = 0; k < K_NKINDS; k++)
        loc[6 + k] = kinds[k];
    uint64_t tot[6 + K_NKINDS];
    MPI_CHECK(MPI_Allreduce(loc, tot, 6 + K_NKINDS, MPI_UINT64_T, MPI_SUM,
                            MPI_COMM_WORLD));
    double tmax = 0;
    MPI_CHECK(MPI_Allreduce(&t_local, &tmax, 1, MPI_DOUBLE, MPI_MAX,
                            MPI_COMM_WORLD));
    CHECK(tot[0] == (uint64_t)opt_total && tot[2] == (uint64_t)opt_total,
          "global totals: sent %llu, received %llu, planned %ld messages",
          (unsigned long long)tot[0], (unsigned long long)tot[2], opt_total);
    CHECK(tot[1] == tot[3] && tot[3] == tot[5],
          "global bytes: sent %llu, received %llu, planned %llu",
          (unsigned long long)tot[1], (unsigned long long)tot[3],
          (unsigned long long)tot[5]);

    for (int k = 0; k < g_T * g_T; k++)
        MPI_CHECK(MPI_Comm_free(&g_comm[k]));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    int rank = g_me;
    if (MPI_Finalize() != MPI_SUCCESS) {
        fprintf(stderr, "FAIL: MPI_Finalize failed [rank %d]\n", rank);
        return 1;
    }
    if (rank == 0) {
        printf("INFO stress_threads: receives specific=%llu ANY_TAG=%llu "
               "ANY_SOURCE=%llu ANY_SOURCE+ANY_TAG=%llu, Issend=%llu\n",
               (unsigned long long)tot[6], (unsigned long long)tot[7],
               (unsigned long long)tot[8], (unsigned long long)tot[9],
               (unsigned long long)tot[4]);
        printf("PASS stress_threads messages=%llu bytes=%llu seconds=%.2f\n",
               (unsigned long long)tot[2], (unsigned long long)tot[3], tmax);
        fflush(stdout);
    }
    return 0;
}
