/*
 * order_wildcard: non-overtaking order with wildcard and specific receives.
 *
 * Every rank other than 0 sends NMSG messages to rank 0 (all with Isend, then
 * Waitall), with tags and sizes varying with the sequence number; a few
 * messages are above the default eager limit (9000+ bytes) and a few above
 * 64 KiB (70000+ bytes).  Each payload carries (sender, seq, tag, size) and a
 * pattern.
 *
 * Rank 0 receives them with a rotating mix of (ANY_SOURCE, ANY_TAG),
 * (ANY_SOURCE, tag), (src, ANY_TAG) and (src, tag) receives, where the
 * specific tag is sometimes the tag of a message a few positions ahead of the
 * oldest unreceived one, and finally with batches of pre-posted
 * (ANY_SOURCE, ANY_TAG) Irecvs.  For every received message it checks that no
 * older unreceived message from the same sender would also have matched the
 * receive (MPI non-overtaking rule), plus source/tag/count/contents.
 */
#include "common.h"

#define NMSG 1000
#define TAIL_BATCHED 200 /* last messages are received in batches */
#define BATCH 8
#define MAXSZ (70000 + NMSG)

static int msg_tag(int sender, int seq) { return (seq * 7 + sender * 3) % 11; }

static int msg_size(int seq)
{
    if (seq % 97 == 50)
        return 70000 + seq; /* rendezvous even with eager_limit 65536 */
    if (seq % 31 == 7)
        return 9000 + seq; /* above the default eager limit */
    return 16 + (seq % 23) * 37;
}

static uint64_t msg_seed(int sender, int seq)
{
    return (uint64_t)sender * 1000003ULL + (uint64_t)seq;
}

static void build_msg(uint8_t *buf, int sender, int seq)
{
    int hdr[4] = {sender, seq, msg_tag(sender, seq), msg_size(seq)};
    int size = msg_size(seq);
    memcpy(buf, hdr, sizeof(hdr));
    fill_pattern(buf + 16, (size_t)size - 16, msg_seed(sender, seq));
}

/* Receiver state */
static int nsenders;
static char **received; /* received[s][seq] */
static int *remaining;  /* per sender */
static int *next_unrecv; /* per sender: lowest seq not yet received */

static void verify(const uint8_t *buf, const MPI_Status *st, int want_src,
                   int want_tag, const char *how)
{
    int hdr[4], count;
    int src = st->MPI_SOURCE;
    CHECK(src >= 1 && src <= nsenders, "%s: bad MPI_SOURCE %d", how, src);
    if (want_src != MPI_ANY_SOURCE)
        CHECK(src == want_src, "%s: MPI_SOURCE %d, receive asked for %d", how,
              src, want_src);
    if (want_tag != MPI_ANY_TAG)
        CHECK(st->MPI_TAG == want_tag, "%s: MPI_TAG %d, receive asked for %d",
              how, st->MPI_TAG, want_tag);
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &count));
    CHECK(count >= 16, "%s: message from %d too short (%d bytes)", how, src,
          count);
    memcpy(hdr, buf, sizeof(hdr));
    int sender = hdr[0], seq = hdr[1];
    CHECK(sender == src, "%s: payload says sender %d, status says %d", how,
          sender, src);
    CHECK(seq >= 0 && seq < NMSG, "%s: bad sequence number %d from %d", how,
          seq, src);
    CHECK(!received[src][seq], "%s: message seq %d from %d received twice",
          how, seq, src);
    CHECK(hdr[2] == msg_tag(src, seq) && st->MPI_TAG == hdr[2],
          "%s: seq %d from %d: tag in status %d, payload %d, expected %d", how,
          seq, src, st->MPI_TAG, hdr[2], msg_tag(src, seq));
    CHECK(count == msg_size(seq) && hdr[3] == count,
          "%s: seq %d from %d: count %d, expected %d", how, seq, src, count,
          msg_size(seq));
    EXPECT_PATTERN(buf + 16, (size_t)count - 16, msg_seed(src, seq),
                   "%s: seq %d from %d", how, seq, src);
    /* Non-overtaking: no older unreceived message from src matches. */
    for (int k = next_unrecv[src]; k < seq; k++) {
        if (received[src][k])
            continue;
        if (want_tag == MPI_ANY_TAG || msg_tag(src, k) == want_tag)
            fail("%s (src=%d tag=%d): got seq %d from %d but older seq %d "
                 "(tag %d) also matches: message overtaken",
                 how, want_src, want_tag, seq, src, k, msg_tag(src, k));
    }
    received[src][seq] = 1;
    remaining[src]--;
    while (next_unrecv[src] < NMSG && received[src][next_unrecv[src]])
        next_unrecv[src]++;
}

static void receiver(void)
{
    int total = NMSG * nsenders;
    uint8_t *buf = xmalloc(MAXSZ);
    uint8_t **bbuf = xmalloc(sizeof(uint8_t *) * BATCH);
    received = xmalloc(sizeof(char *) * (nsenders + 1));
    remaining = xmalloc(sizeof(int) * (nsenders + 1));
    next_unrecv = xmalloc(sizeof(int) * (nsenders + 1));
    for (int s = 1; s <= nsenders; s++) {
        received[s] = calloc(NMSG, 1);
        CHECK(received[s] != NULL, "calloc failed");
        remaining[s] = NMSG;
        next_unrecv[s] = 0;
    }
    for (int b = 0; b < BATCH; b++)
        bbuf[b] = xmalloc(MAXSZ);

    int i;
    for (i = 0; i < total - TAIL_BATCHED; i++) {
        int mode = i % 5;
        int s = 1 + (i % nsenders);
        while (remaining[s] == 0)
            s = 1 + (s % nsenders);
        /* Pick the k-th unreceived message of s (k = 0..3) for its tag. */
        int k = (i / 5) % 4, seq = -1, found = 0;
        for (int q = next_unrecv[s]; q < NMSG; q++) {
            if (received[s][q])
                continue;
            seq = q;
            if (found++ == k)
                break;
        }
        int t = msg_tag(s, seq);
        int src = (mode == 2 || mode == 3) ? s : MPI_ANY_SOURCE;
        int tag = (mode == 1 || mode == 3) ? t : MPI_ANY_TAG;
        MPI_Status st;
        char how[64];
        snprintf(how, sizeof(how), "recv #%d mode %d", i, mode);
        if (mode == 4) {
            MPI_Request r;
            MPI_CHECK(MPI_Irecv(buf, MAXSZ, MPI_BYTE, src, tag,
                                MPI_COMM_WORLD, &r));
            MPI_CHECK(MPI_Wait(&r, &st));
        } else {
            MPI_CHECK(MPI_Recv(buf, MAXSZ, MPI_BYTE, src, tag, MPI_COMM_WORLD,
                               &st));
        }
        verify(buf, &st, src, tag, how);
    }
    /* Tail: batches of pre-posted (ANY_SOURCE, ANY_TAG) receives.  Earlier
     * posted receives match first, so processing the statuses in request
     * order must satisfy the same rule. */
    for (; i < total; i += BATCH) {
        MPI_Request reqs[BATCH];
        MPI_Status sts[BATCH];
        for (int b = 0; b < BATCH; b++)
            MPI_CHECK(MPI_Irecv(bbuf[b], MAXSZ, MPI_BYTE, MPI_ANY_SOURCE,
                                MPI_ANY_TAG, MPI_COMM_WORLD, &reqs[b]));
        MPI_CHECK(MPI_Waitall(BATCH, reqs, sts));
        for (int b = 0; b < BATCH; b++) {
            char how[64];
            snprintf(how, sizeof(how), "batched recv #%d", i + b);
            verify(bbuf[b], &sts[b], MPI_ANY_SOURCE, MPI_ANY_TAG, how);
        }
    }
    for (int s = 1; s <= nsenders; s++)
        CHECK(remaining[s] == 0, "%d messages from %d never received",
              remaining[s], s);

    /* Describe the traffic for the runner's counter checks. */
    long long bytes = 0;
    int gt1024 = 0, eq1024 = 0, gt8192 = 0, gt65536 = 0;
    for (int q = 0; q < NMSG; q++) {
        bytes += msg_size(q);
        gt1024 += msg_size(q) > 1024;
        eq1024 += msg_size(q) == 1024;
        gt8192 += msg_size(q) > 8192;
        gt65536 += msg_size(q) > 65536;
    }
    printf("STATS order_wildcard msgs=%d bytes=%lld gt1024=%d eq1024=%d "
           "gt8192=%d gt65536=%d eq8192=0 eq65536=0 zero=0\n",
           total, bytes * nsenders, gt1024 * nsenders, eq1024 * nsenders,
           gt8192 * nsenders, gt65536 * nsenders);
    for (int b = 0; b < BATCH; b++)
        free(bbuf[b]);
    free(bbuf);
    free(buf);
}

static void sender(int me)
{
    uint8_t **bufs = xmalloc(sizeof(uint8_t *) * NMSG);
    MPI_Request *reqs = xmalloc(sizeof(MPI_Request) * NMSG);
    for (int q = 0; q < NMSG; q++) {
        bufs[q] = xmalloc(msg_size(q));
        build_msg(bufs[q], me, q);
    }
    for (int q = 0; q < NMSG; q++)
        MPI_CHECK(MPI_Isend(bufs[q], msg_size(q), MPI_BYTE, 0,
                            msg_tag(me, q), MPI_COMM_WORLD, &reqs[q]));
    MPI_CHECK(MPI_Waitall(NMSG, reqs, MPI_STATUSES_IGNORE));
    for (int q = 0; q < NMSG; q++)
        free(bufs[q]);
    free(bufs);
    free(reqs);
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv, "order_wildcard");
    require_np(2);
    nsenders = test_size - 1;
    if (test_rank == 0)
        receiver();
    else
        sender(test_rank);
    return test_finish();
}
