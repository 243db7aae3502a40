/* Cost of one memory registration and its release (fi_mr_reg + fi_close)
 * per buffer size on a libfabric provider, and of pinning the same pages
 * (mlock + munlock, what a provider registering with the NIC, such as EFA
 * through ibv_reg_mr, does at the least).
 *
 * Usage: mr_reg_cost PROVIDER [max_bytes]
 * Prints: provider size reg_us pin_us (medians of 5 rounds).
 * Build: cc -O2 -o mr_reg_cost mr_reg_cost.c -lfabric */
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROVIDER [max_bytes]\n", argv[0]);
        return 2;
    }
    size_t max = argc > 2 ? strtoull(argv[2], NULL, 0) : 64UL << 20;
    struct fi_info *hints = fi_allocinfo(), *info = NULL;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_RMA;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup(argv[1]);
    int rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info);
    if (rc) {
        fprintf(stderr, "fi_getinfo(%s): %s\n", argv[1], fi_strerror(-rc));
        return 1;
    }
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    if ((rc = fi_fabric(info->fabric_attr, &fabric, NULL))
        || (rc = fi_domain(fabric, info, &domain, NULL))) {
        fprintf(stderr, "open: %s\n", fi_strerror(-rc));
        return 1;
    }
    unsigned char *buf = mmap(NULL, max, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        return 1;
    }
    memset(buf, 1, max);
    uint64_t key = 1;
    printf("# provider size reg_us pin_us\n");
    for (size_t size = 4096; size <= max; size *= 4) {
        long iters = size <= (1 << 20) ? 2000 : 50;
        double reg[5], pin[5];
        for (int round = 0; round < 5; round++) {
            double t0 = now();
            for (long i = 0; i < iters; i++) {
                struct fid_mr *mr;
                rc = fi_mr_reg(domain, buf, size, FI_REMOTE_READ, 0, key++, 0, &mr, NULL);
                if (rc) {
                    fprintf(stderr, "fi_mr_reg: %s\n", fi_strerror(-rc));
                    return 1;
                }
                fi_close(&mr->fid);
            }
            reg[round] = (now() - t0) / iters * 1e6;
            t0 = now();
            for (long i = 0; i < iters; i++) {
                if (mlock(buf, size) || munlock(buf, size)) {
                    perror("mlock");
                    return 1;
                }
            }
            pin[round] = (now() - t0) / iters * 1e6;
        }
        qsort(reg, 5, sizeof(double), cmp);
        qsort(pin, 5, sizeof(double), cmp);
        printf("%s %zu %.2f %.2f\n", argv[1], size, reg[2], pin[2]);
        fflush(stdout);
    }
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
    return 0;
}
