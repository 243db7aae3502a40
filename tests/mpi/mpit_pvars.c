/*
 * mpit_pvars: the rustofi MTL's MPI_T performance variables are found with
 * MPI_T_pvar_get_info (name mtl_rustofi_*, unsigned long long, bound to no
 * object, continuous, the documented class) and read, while the job runs,
 * the traffic this program makes:
 *
 * 1. Eager, unexpected: once rank 1 has taken its first reading, rank 0
 *    sends N_EAGER messages of EAGER_LEN bytes; rank 1 probes until the last has arrived, then reads the unexpected
 *    level (+N_EAGER messages, +N_EAGER*EAGER_LEN bytes, high-water mark at
 *    least that) before receiving them (level back, recv counters +N_EAGER).
 *    Rank 0's sent_msgs, sent_bytes and eager rise by exactly that.
 * 2. Rendezvous, posted: rank 1 posts N_POSTED receives, reads the posted
 *    level (+N_POSTED, high-water mark at least that), then lets rank 0
 *    send one rendezvous message of RNDV_LEN bytes and N_POSTED-1 eager
 *    ones; after they complete the level is back and rank 0's rndv
 *    counter rose by one.
 * 3. The same rendezvous buffer again: where the first transfer registered
 *    it (rank 0's mr_reg rose, by at most one, with mr_hits), the second is
 *    served by the registration cache (mr_hits +1, mr_reg +0).
 *    Rank 1's rails (network and shm together) received at least every
 *    byte of the three messages.
 * Every delta is exact except the high-water marks and the rails' bytes
 * (at least).
 */
#include "common.h"

#define N_EAGER 10
#define EAGER_LEN 100
#define N_POSTED 3
#define RNDV_LEN (4 * MIB) /* above every eager limit (at most 1 MiB) */

enum {
    SENT_MSGS, SENT_BYTES, RECV_MSGS, RECV_BYTES, EAGER, RNDV, UNEXPECTED,
    UNEXPECTED_NOW, UNEXPECTED_PEAK, UNEXPECTED_BYTES_NOW, UNEXPECTED_BYTES_PEAK,
    POSTED_NOW, POSTED_PEAK, ERRORS, COALESCED, MR_REG, MR_HITS, NET_TX_BYTES, NET_RX_BYTES,
    SHM_TX_BYTES, SHM_RX_BYTES, NVARS
};

static const struct {
    const char *name;
    int var_class;
} vars[NVARS] = {
    [SENT_MSGS] = {"mtl_rustofi_sent_msgs", MPI_T_PVAR_CLASS_COUNTER},
    [SENT_BYTES] = {"mtl_rustofi_sent_bytes", MPI_T_PVAR_CLASS_COUNTER},
    [RECV_MSGS] = {"mtl_rustofi_recv_msgs", MPI_T_PVAR_CLASS_COUNTER},
    [RECV_BYTES] = {"mtl_rustofi_recv_bytes", MPI_T_PVAR_CLASS_COUNTER},
    [EAGER] = {"mtl_rustofi_eager", MPI_T_PVAR_CLASS_COUNTER},
    [RNDV] = {"mtl_rustofi_rndv", MPI_T_PVAR_CLASS_COUNTER},
    [UNEXPECTED] = {"mtl_rustofi_unexpected", MPI_T_PVAR_CLASS_COUNTER},
    [UNEXPECTED_NOW] = {"mtl_rustofi_unexpected_now", MPI_T_PVAR_CLASS_LEVEL},
    [UNEXPECTED_PEAK] = {"mtl_rustofi_unexpected_peak", MPI_T_PVAR_CLASS_HIGHWATERMARK},
    [UNEXPECTED_BYTES_NOW] = {"mtl_rustofi_unexpected_bytes_now", MPI_T_PVAR_CLASS_LEVEL},
    [UNEXPECTED_BYTES_PEAK] = {"mtl_rustofi_unexpected_bytes_peak",
                               MPI_T_PVAR_CLASS_HIGHWATERMARK},
    [POSTED_NOW] = {"mtl_rustofi_posted_now", MPI_T_PVAR_CLASS_LEVEL},
    [POSTED_PEAK] = {"mtl_rustofi_posted_peak", MPI_T_PVAR_CLASS_HIGHWATERMARK},
    [ERRORS] = {"mtl_rustofi_errors", MPI_T_PVAR_CLASS_COUNTER},
    [COALESCED] = {"mtl_rustofi_coalesced", MPI_T_PVAR_CLASS_COUNTER},
    [MR_REG] = {"mtl_rustofi_mr_reg", MPI_T_PVAR_CLASS_COUNTER},
    [MR_HITS] = {"mtl_rustofi_mr_hits", MPI_T_PVAR_CLASS_COUNTER},
    [NET_TX_BYTES] = {"mtl_rustofi_net_tx_bytes", MPI_T_PVAR_CLASS_COUNTER},
    [NET_RX_BYTES] = {"mtl_rustofi_net_rx_bytes", MPI_T_PVAR_CLASS_COUNTER},
    [SHM_TX_BYTES] = {"mtl_rustofi_shm_tx_bytes", MPI_T_PVAR_CLASS_COUNTER},
    [SHM_RX_BYTES] = {"mtl_rustofi_shm_rx_bytes", MPI_T_PVAR_CLASS_COUNTER},
};

static MPI_T_pvar_session session;
static MPI_T_pvar_handle handles[NVARS];

typedef unsigned long long snap_t[NVARS];

static void find_vars(void)
{
    int num = 0, found = 0;
    CHECK(MPI_T_pvar_get_num(&num) == MPI_SUCCESS, "MPI_T_pvar_get_num failed");
    CHECK(MPI_T_pvar_session_create(&session) == MPI_SUCCESS, "pvar session");
    for (int i = 0; i < num; i++) {
        char name[256], desc[1024];
        int name_len = sizeof(name), desc_len = sizeof(desc);
        int verbosity, var_class, bind, readonly, continuous, atomic;
        MPI_Datatype dt;
        MPI_T_enum en;
        if (MPI_T_pvar_get_info(i, name, &name_len, &verbosity, &var_class, &dt, &en, desc,
                                &desc_len, &bind, &readonly, &continuous, &atomic)
            != MPI_SUCCESS)
            continue; /* an index of a variable that went away */
        for (int v = 0; v < NVARS; v++) {
            if (strcmp(name, vars[v].name) != 0)
                continue;
            CHECK(var_class == vars[v].var_class, "%s: class %d, expected %d", name,
                  var_class, vars[v].var_class);
            CHECK(dt == MPI_UNSIGNED_LONG_LONG, "%s: datatype is not unsigned long long", name);
            CHECK(bind == MPI_T_BIND_NO_OBJECT, "%s: bound to an object (%d)", name, bind);
            CHECK(continuous && readonly, "%s: not continuous and read-only", name);
            CHECK(desc_len > 1, "%s: no description", name);
            int count = 0;
            CHECK(MPI_T_pvar_handle_alloc(session, i, NULL, &handles[v], &count) == MPI_SUCCESS
                      && count == 1,
                  "%s: handle_alloc failed or count %d", name, count);
            found++;
        }
    }
    CHECK(found == NVARS, "found %d of the %d mtl_rustofi_* variables", found, NVARS);
}

static void snap(snap_t s)
{
    for (int v = 0; v < NVARS; v++)
        CHECK(MPI_T_pvar_read(session, handles[v], &s[v]) == MPI_SUCCESS, "read %s",
              vars[v].name);
}

/* after[v] - before[v] == want (levels may also fall: signed). */
static void expect(const snap_t before, const snap_t after, int v, long long want)
{
    long long got = (long long) (after[v] - before[v]);
    CHECK(got == want, "%s changed by %lld, expected %lld (before %llu, after %llu)",
          vars[v].name, got, want, before[v], after[v]);
}

static void expect_at_least(const snap_t s, int v, unsigned long long min)
{
    CHECK(s[v] >= min, "%s = %llu, expected at least %llu", vars[v].name, s[v], min);
}

int main(int argc, char **argv)
{
    int provided;
    CHECK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS, "MPI_T_init_thread");
    test_init(&argc, &argv, "mpit_pvars");
    require_np(2);
    find_vars();
    snap_t a, b, c;
    char *big = xmalloc(RNDV_LEN);
    char small[N_EAGER][EAGER_LEN];

    /* 1. eager messages that arrive unexpected */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (test_rank == 0) {
        MPI_Request r[N_EAGER];
        /* rank 1 has taken its first reading */
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, 1, 98, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        snap(a);
        for (int i = 0; i < N_EAGER; i++) {
            fill_pattern(small[i], EAGER_LEN, i);
            MPI_CHECK(MPI_Isend(small[i], EAGER_LEN, MPI_BYTE, 1, i, MPI_COMM_WORLD, &r[i]));
        }
        MPI_CHECK(MPI_Waitall(N_EAGER, r, MPI_STATUSES_IGNORE));
        snap(b);
        expect(a, b, SENT_MSGS, N_EAGER);
        expect(a, b, SENT_BYTES, N_EAGER * EAGER_LEN);
        expect(a, b, EAGER, N_EAGER);
        expect(a, b, RNDV, 0);
        /* nothing more reaches rank 1 until it has taken its readings */
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, 1, 97, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    } else if (test_rank == 1) {
        int flag = 0;
        snap(a);
        MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, 0, 98, MPI_COMM_WORLD));
        while (!flag) /* the last one in, so all are (per-peer order) */
            MPI_CHECK(MPI_Iprobe(0, N_EAGER - 1, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
        snap(b);
        expect(a, b, UNEXPECTED, N_EAGER);
        expect(a, b, UNEXPECTED_NOW, N_EAGER);
        expect(a, b, UNEXPECTED_BYTES_NOW, N_EAGER * EAGER_LEN);
        expect_at_least(b, UNEXPECTED_PEAK, N_EAGER);
        expect_at_least(b, UNEXPECTED_BYTES_PEAK, N_EAGER * EAGER_LEN);
        for (int i = 0; i < N_EAGER; i++) {
            MPI_CHECK(MPI_Recv(small[i], EAGER_LEN, MPI_BYTE, 0, i, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
            CHECK(check_pattern(small[i], EAGER_LEN, i) == (size_t) -1, "payload %d", i);
        }
        snap(c);
        expect(a, c, UNEXPECTED_NOW, 0);
        expect(a, c, UNEXPECTED_BYTES_NOW, 0);
        expect(a, c, RECV_MSGS, N_EAGER);
        expect(a, c, RECV_BYTES, N_EAGER * EAGER_LEN);
        expect(a, c, POSTED_NOW, 0);
        MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, 0, 97, MPI_COMM_WORLD));
    }

    /* 2. posted receives, one rendezvous */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (test_rank == 0) {
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        fill_pattern(big, RNDV_LEN, 7);
        snap(a);
        MPI_CHECK(MPI_Send(small[0], EAGER_LEN, MPI_BYTE, 1, 100, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Send(big, RNDV_LEN, MPI_BYTE, 1, 101, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Send(small[1], EAGER_LEN, MPI_BYTE, 1, 102, MPI_COMM_WORLD));
        snap(b);
        expect(a, b, RNDV, 1);
        expect(a, b, EAGER, N_POSTED - 1);
        expect(a, b, SENT_MSGS, N_POSTED);
        expect(a, b, SENT_BYTES, RNDV_LEN + (N_POSTED - 1) * EAGER_LEN);
        expect(a, b, ERRORS, 0);
        unsigned long long reg = b[MR_REG] - a[MR_REG], hits = b[MR_HITS] - a[MR_HITS];
        CHECK(reg + hits <= 1, "one rendezvous: mr_reg +%llu, mr_hits +%llu", reg, hits);
        /* 3. the same buffer again */
        snap(a);
        MPI_CHECK(MPI_Send(big, RNDV_LEN, MPI_BYTE, 1, 103, MPI_COMM_WORLD));
        snap(b);
        if (reg + hits == 1) {
            expect(a, b, MR_REG, 0);
            expect(a, b, MR_HITS, 1);
        }
        printf("PVARS registrations: first rendezvous mr_reg +%llu mr_hits +%llu\n", reg, hits);
    } else if (test_rank == 1) {
        MPI_Request r[N_POSTED];
        snap(a);
        MPI_CHECK(MPI_Irecv(small[0], EAGER_LEN, MPI_BYTE, 0, 100, MPI_COMM_WORLD, &r[0]));
        MPI_CHECK(MPI_Irecv(big, RNDV_LEN, MPI_BYTE, 0, 101, MPI_COMM_WORLD, &r[1]));
        MPI_CHECK(MPI_Irecv(small[1], EAGER_LEN, MPI_BYTE, 0, 102, MPI_COMM_WORLD, &r[2]));
        snap(b);
        expect(a, b, POSTED_NOW, N_POSTED);
        expect_at_least(b, POSTED_PEAK, N_POSTED);
        MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, 0, 99, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Waitall(N_POSTED, r, MPI_STATUSES_IGNORE));
        CHECK(check_pattern(big, RNDV_LEN, 7) == (size_t) -1, "rendezvous payload");
        snap(c);
        expect(a, c, POSTED_NOW, 0);
        expect(a, c, RECV_MSGS, N_POSTED);
        expect(a, c, RECV_BYTES, RNDV_LEN + (N_POSTED - 1) * EAGER_LEN);
        expect(a, c, ERRORS, 0);
        /* Every byte came in through one of the rails (headers on top). */
        unsigned long long rails_rx = (c[NET_RX_BYTES] - a[NET_RX_BYTES])
                                      + (c[SHM_RX_BYTES] - a[SHM_RX_BYTES]);
        CHECK(rails_rx >= (unsigned long long) (RNDV_LEN + (N_POSTED - 1) * EAGER_LEN),
              "rails received %llu bytes for %d", rails_rx, RNDV_LEN + (N_POSTED - 1) * EAGER_LEN);
        MPI_CHECK(MPI_Recv(big, RNDV_LEN, MPI_BYTE, 0, 103, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(check_pattern(big, RNDV_LEN, 7) == (size_t) -1, "second rendezvous payload");
    }
    if (test_rank <= 1) {
        snap(c);
        printf("PVARS rank=%d sent_msgs=%llu recv_msgs=%llu eager=%llu rndv=%llu "
               "unexpected=%llu unexpected_peak=%llu posted_peak=%llu\n",
               test_rank, c[SENT_MSGS], c[RECV_MSGS], c[EAGER], c[RNDV], c[UNEXPECTED],
               c[UNEXPECTED_PEAK], c[POSTED_PEAK]);
    }
    free(big);
    for (int v = 0; v < NVARS; v++)
        MPI_T_pvar_handle_free(session, &handles[v]);
    MPI_T_pvar_session_free(&session);
    /* Before MPI_Finalize: Open MPI 4.1.4's MPI_T_finalize crashes when
     * called after it (with every PML). */
    MPI_T_finalize();
    return test_finish();
}
