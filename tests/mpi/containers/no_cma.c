/*
 * no_cma: runs a program with cross-memory attach forbidden, as a
 * container's seccomp profile forbids it: process_vm_readv and
 * process_vm_writev fail with EPERM, every other call is allowed.
 *
 * Usage: no_cma PROGRAM [ARGS...]
 *
 * Run for some ranks of a job only (mpirun's "-np 1 no_cma prog : -np 1
 * prog"), it makes ranks of one host differ in whether they can read each
 * other's memory. Exits 97 with a message if the filter cannot be set.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#    define THIS_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#    define THIS_ARCH AUDIT_ARCH_AARCH64
#else
#    error "no_cma: unknown architecture"
#endif

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: no_cma PROGRAM [ARGS...]\n");
        return 2;
    }
    struct sock_filter filter[] = {
        /* A call of another architecture's table is let through: the
         * numbers below are this one's. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, THIS_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = {
        .len = sizeof(filter) / sizeof(filter[0]),
        .filter = filter,
    };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        fprintf(stderr, "no_cma: cannot set the seccomp filter: %s\n", strerror(errno));
        return 97;
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "no_cma: cannot run %s: %s\n", argv[1], strerror(errno));
    return 97;
}
