#!/usr/bin/env python3
"""Analysis for bench/profile: callgrind files -> summary.md.

    profile_report.py OUT

OUT holds runs.tsv (label, config, size, iters, idle, status, seconds),
meta.txt (key=value lines) and raw/cg.<rank>.<label>{.1,.2,.3,} (callgrind
output of ranks 0 and 1 in four parts: start-up and warm-up, the measured
round trips, the idle phase, teardown). For every configuration and size
with an N and a 2N run, the per-round-trip cost is (2N run - N run) / N of
the round-trip parts, per rank (the two ranks are averaged unless a column
says r0 / r1); the same difference of the whole runs is given beside it.
The idle phases of a configuration's runs price an empty call: inclusive Ir
of a function there over its calls there. "Net of polls" takes off the
opal_progress calls times the idle phase's profile per call (restricted to
the functions the round trips run), and the completion-queue reads made
outside opal_progress times the Ir of an empty read.

The callgrind format is read directly (name compression, calls= lines with
the inclusive cost of the call on the next line); a function is keyed by
its object and name, whatever source files its code came from.
"""
import os
import re
import sys
from collections import defaultdict

CONFIG_DESC = {
    "rustofi": "pml cm + mtl rustofi, libfabric tcp (mtl_rustofi_shm off)",
    "rustofi-shm": "pml cm + mtl rustofi, tcp with its own shared-memory rail (shm on)",
    "rustofi-fishm": "pml cm + mtl rustofi, tcp with libfabric's shm provider (shm libfabric)",
    "ofi": "pml cm + mtl ofi, libfabric tcp",
    "ob1-tcp": "pml ob1 + btl tcp,self",
    "ob1-vader": "pml ob1 + btl vader,self",
}
ORDER = ["rustofi", "rustofi-shm", "rustofi-fishm", "ofi", "ob1-tcp", "ob1-vader"]
GROUPS = ["program+libmpi", "pml", "mtl/btl", "opal", "libfabric", "libc", "other"]
NAMED = [
    "PMPI_Send", "PMPI_Recv", "opal_progress",
    "rustofi_send", "rustofi_mtl_irecv", "rustofi_isend", "rustofi_irecv",
    # rustofi_progress_cb: the shim's wrapper of rustofi_progress in older
    # builds, whose profiles this still reads.
    "rustofi_progress_cb", "rustofi_progress",
    "ompi_mtl_ofi_progress_no_inline",
    "mca_pml_ob1_send", "mca_pml_ob1_recv", "mca_pml_ob1_progress",
]
ALIASES = {"MPI_Send": "PMPI_Send", "MPI_Recv": "PMPI_Recv"}


class Prof:
    """Costs of one callgrind file (or a sum / difference of several)."""

    def __init__(self):
        self.total = 0
        self.self_ = defaultdict(int)     # (ob, fn) -> Ir spent in the function itself
        self.callcost = defaultdict(int)  # (ob, fn) -> Ir of the calls it makes (inclusive)
        self.calls = defaultdict(int)     # (ob, fn) -> times called
        self.arcs = defaultdict(lambda: [0, 0])  # (caller, callee) -> [calls, inclusive Ir]
        # (ob, fn) -> Ir of its own instructions that come from the C shim's
        # files: a function of one library holds code of both where the
        # build inlines across them (scripts/build, RUSTOFI_LTO)
        self.shim_self = defaultdict(int)

    def incl(self, key):
        return self.self_[key] + self.callcost[key]

    def combine(self, other, sign):
        r = Prof()
        r.total = self.total + sign * other.total
        for name in ("self_", "callcost", "calls", "shim_self"):
            a, b, c = getattr(self, name), getattr(other, name), getattr(r, name)
            for k in set(a) | set(b):
                c[k] = a.get(k, 0) + sign * b.get(k, 0)
        for k in set(self.arcs) | set(other.arcs):
            a, b = self.arcs.get(k, (0, 0)), other.arcs.get(k, (0, 0))
            r.arcs[k] = [a[0] + sign * b[0], a[1] + sign * b[1]]
        return r

    def __add__(self, other):
        return self.combine(other, 1)

    def __sub__(self, other):
        return self.combine(other, -1)


def parse(path):
    p = Prof()
    names = {"ob": {}, "fl": {}, "fn": {}}
    kind_of = {"ob": "ob", "cob": "ob", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl",
               "cfl": "fl", "fn": "fn", "cfn": "fn"}
    npos = 1
    ob = fl = fn = None
    src = None  # the source file of the next cost lines (fl, or fi= / fe= inside a function)
    cob = cfn = None
    pending = None  # (callee, count): the next cost line is that call's inclusive cost
    summary = None

    def name(kind, text):
        text = text.strip()
        m = re.match(r"\((\d+)\)\s*(.*)$", text)
        if not m:
            return text
        i, s = m.group(1), m.group(2)
        if s:
            names[kind][i] = s
            return s
        return names[kind].get(i, "?" + i)

    with open(path, errors="replace") as f:
        for line in f:
            c = line[:1]
            if c.isdigit() or c in "+-*":
                parts = line.split()
                ir = 0
                if len(parts) > npos:
                    ir = int(parts[npos])
                key = (ob, fn)
                if pending is not None:
                    callee, n = pending
                    p.callcost[key] += ir
                    p.calls[callee] += n
                    arc = p.arcs[(key, callee)]
                    arc[0] += n
                    arc[1] += ir
                    pending = None
                else:
                    p.self_[key] += ir
                    if is_shim_file(src):
                        p.shim_self[key] += ir
                continue
            m = re.match(r"(\w+)=(.*)", line)
            if m:
                tag, rest = m.group(1), m.group(2)
                if tag == "calls":
                    # the callee's object is given (cob=) only when it is not the caller's
                    pending = (((cob if cob is not None else ob), cfn), int(rest.split()[0]))
                    cob = None
                elif tag in kind_of:
                    v = name(kind_of[tag], rest)
                    if tag == "ob":
                        ob = v
                    elif tag == "fl":
                        fl = src = v
                    elif tag in ("fi", "fe"):
                        src = v
                    elif tag == "fn":
                        fn = v
                        src = fl
                        cob = None
                    elif tag == "cob":
                        cob = v
                    elif tag == "cfn":
                        cfn = v
                continue
            if line.startswith("positions:"):
                npos = len(line.split()) - 1
            elif line.startswith(("totals:", "summary:")):
                summary = int(line.split()[1])
    p.total = summary if summary is not None else sum(p.self_.values())
    return p


def is_shim_file(f):
    """Code of the C shim: its own files (shim/rustofi_*.c and .h) and the
    inline functions of Open MPI's headers it compiles in. Everything else
    in the component is the engine's: the Rust sources (ours, the standard
    library's, the crates'), the generated libfabric wrappers and
    libfabric's inline header functions."""
    f = f or ""
    b = os.path.basename(f)
    return (b.startswith("rustofi_") and b.endswith((".c", ".h"))) or \
        ("/openmpi" in f and f.endswith(".h"))


def obshort(ob):
    b = os.path.basename(ob or "?")
    return re.sub(r"\.so(\.\d+)*$", ".so", b)


def group(ob):
    b = obshort(ob)
    if b.startswith("profile_pingpong") or b.startswith("libmpi.so"):
        return "program+libmpi"
    if b.startswith("mca_pml_"):
        return "pml"
    if b.startswith(("mca_mtl_", "mca_btl_")):
        return "mtl/btl"
    if b.startswith(("libopen-pal", "libevent")):
        return "opal"
    if b.startswith("libfabric"):
        return "libfabric"
    if b.startswith("libc.so"):
        return "libc"
    return "other"


def label(key, width=64):
    ob, fn = key
    if fn and re.fullmatch(r"0x[0-9a-fA-F]+", fn):
        s = "%s+0x%x" % (obshort(ob), int(fn, 16))
    else:
        s = "%s [%s]" % (fn, obshort(ob))
    s = s.replace("|", "\\|")
    return s if len(s) <= width else s[: width - 1] + "…"


def num(x):
    if x is None:
        return "–"
    if abs(x) >= 100:
        return "{:,.0f}".format(x)
    if abs(x) >= 10:
        return "%.1f" % x
    return "%.2f" % x


def keys_named(prof, fname):
    fname = ALIASES.get(fname, fname)
    return [k for k in set(prof.self_) | set(prof.calls)
            if ALIASES.get(k[1], k[1]) == fname]


def sum_incl(prof, fname):
    return sum(prof.incl(k) for k in keys_named(prof, fname))


def sum_calls(prof, fname):
    return sum(prof.calls[k] for k in keys_named(prof, fname))


MIN_IDLE_CALLS = 100  # a function counts as polled in the idle phase from this many calls


def empty_cost(idle, keys):
    """Inclusive Ir per call of these functions in the idle phase, if they are polled there."""
    n = sum(idle.calls.get(k, 0) for k in keys)
    if n < MIN_IDLE_CALLS:
        return None
    return sum(idle.incl(k) for k in keys) / n


class Run:
    """One mpirun: per rank, the parts of its callgrind output."""

    def __init__(self, out, label):
        self.loop, self.idle, self.whole = [], [], []
        for r in (0, 1):
            base = os.path.join(out, "raw", "cg.%d.%s" % (r, label))
            parts = [parse(base + ".1"), parse(base + ".2"), parse(base + ".3"), parse(base)]
            self.loop.append(parts[1])
            self.idle.append(parts[2])
            self.whole.append(sum(pp.total for pp in parts))
        self.loop_sum = self.loop[0] + self.loop[1]
        self.idle_sum = self.idle[0] + self.idle[1]


def polls(prof):
    return sum_calls(prof, "opal_progress")


def poll_callers_side(graph_prof, targets):
    """For each direct caller of the target functions: 'send' or 'recv' if, going
    up the call graph, it is reached from PMPI_Send only or from PMPI_Recv only."""
    up = defaultdict(set)
    for (caller, callee), (n, _) in graph_prof.arcs.items():
        if n > 0:
            up[callee].add(caller)
    roots = {"PMPI_Send": "send", "PMPI_Recv": "recv"}
    side = {}
    for k in targets:
        for caller in up[k]:
            found, seen, todo = set(), {caller}, [caller]
            for _ in range(8):
                nxt = []
                for f in todo:
                    if ALIASES.get(f[1], f[1]) in roots:
                        found.add(roots[ALIASES.get(f[1], f[1])])
                        continue
                    for g in up[f]:
                        if g not in seen:
                            seen.add(g)
                            nxt.append(g)
                todo = nxt
            side[caller] = found.pop() if len(found) == 1 else "other"
    return side


def polls_by_side(d, side):
    r = defaultdict(int)
    for k in keys_named(d, "opal_progress"):
        for (caller, callee), (n, _) in d.arcs.items():
            if callee == k:
                r[side.get(caller, "other")] += n
    return r


class DirectPolls:
    """Completion-queue reads that do not go through opal_progress (mtl ofi's
    blocking send waits by calling its progress function itself): calls into a
    libfabric function that the idle phase polls, from a caller that it does
    not poll. Each is priced as an empty read of that function in the idle phase."""

    def __init__(self, idle, loop_keys):
        self.cost = {}  # libfabric function -> Ir of an empty call from outside
        self.polled = set()
        self.profile = {}  # share of an empty read's Ir per libfabric / libc function
        if idle is None:
            return
        self.polled = {k for k, n in idle.calls.items() if n >= MIN_IDLE_CALLS}
        into = defaultdict(lambda: [0, 0])
        for (caller, callee), (n, ir) in idle.arcs.items():
            if group(callee[0]) == "libfabric" and group(caller[0]) != "libfabric":
                into[callee][0] += n
                into[callee][1] += ir
        self.cost = {k: ir / n for k, (n, ir) in into.items() if n >= MIN_IDLE_CALLS}
        lf = {k: v for k, v in idle.self_.items()
              if k in loop_keys and group(k[0]) in ("libfabric", "libc") and v > 0}
        tot = sum(lf.values())
        self.profile = {k: v / tot for k, v in lf.items()} if tot else {}

    def arcs(self, prof):
        for (caller, callee), (n, ir) in prof.arcs.items():
            if callee in self.cost and group(caller[0]) != "libfabric" \
                    and caller not in self.polled and n:
                yield caller, callee, n

    def count(self, prof):
        return sum(n for _, _, n in self.arcs(prof))

    def ir(self, prof):
        return sum(n * self.cost[k] for _, k, n in self.arcs(prof))

    def by_side(self, prof, side):
        r = defaultdict(float)
        for caller, k, n in self.arcs(prof):
            r[side.get(caller, "other")] += n * self.cost[k]
        return r


def main():
    out = sys.argv[1]
    meta = {}
    with open(os.path.join(out, "meta.txt")) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("=")
            meta[k] = v
    runs = []
    with open(os.path.join(out, "runs.tsv")) as f:
        next(f)
        for line in f:
            lab, cfg, size, iters, idle, status, secs = line.rstrip("\n").split("\t")
            runs.append(dict(label=lab, cfg=cfg, size=int(size), iters=int(iters),
                             idle=int(idle), status=status, secs=int(secs)))
    cache = {}

    def load(run):
        if run is None or run["status"] != "ok":
            return None
        if run["label"] not in cache:
            cache[run["label"]] = Run(out, run["label"])
        return cache[run["label"]]

    def find(cfg, size, iters):
        for r in runs:
            if r["cfg"] == cfg and r["size"] == size and r["iters"] == iters:
                return r
        return None

    cfgs = [c for c in ORDER if any(r["cfg"] == c for r in runs)]
    sizes = sorted({r["size"] for r in runs})
    results = []  # one dict per (config, size)
    problems = [r for r in runs if r["status"] != "ok"]
    for cfg in cfgs:
        # the empty-poll profile: idle phases of all this configuration's runs
        idle = None
        for r in runs:
            if r["cfg"] == cfg and r["idle"] > 0 and load(r) is not None:
                idle = load(r).idle_sum if idle is None else idle + load(r).idle_sum
        for size in sizes:
            cand = sorted({r["iters"] for r in runs if r["cfg"] == cfg and r["size"] == size})
            pair = next(((n, 2 * n) for n in cand if 2 * n in cand), None)
            if pair is None:
                continue
            n = pair[0]
            a, b = load(find(cfg, size, n)), load(find(cfg, size, 2 * n))
            if a is None or b is None:
                continue
            d = b.loop_sum - a.loop_sum
            per = 2.0 * n  # two ranks, n round trips each
            res = dict(cfg=cfg, size=size, n=n, d=d, per=per, idle=idle, runs=(a, b))
            # one empty poll: the idle phase's cost of the functions that the
            # round trips run too, per poll (MPI_Test's own code and the test
            # program's loop around it are left out)
            loop_keys = {k for pr_ in (a.loop_sum, b.loop_sum) for k, v in pr_.self_.items()
                         if v and not obshort(k[0]).startswith("profile_pingpong")}
            e_self = {}
            if idle is not None and polls(idle) >= MIN_IDLE_CALLS:
                e_self = {k: v / polls(idle) for k, v in idle.self_.items() if k in loop_keys}
                res["e"] = sum(e_self.values())
                res["e_opal"] = sum_incl(idle, "opal_progress") / polls(idle)
            else:
                res["e"] = res["e_opal"] = None
            e = res["e"] or 0.0
            dp = DirectPolls(idle, loop_keys)

            def net(run_b, run_a):
                """Ir of run_b - run_a less their polls (opal_progress and direct)."""
                if res["e"] is None:
                    return None
                return (run_b.total - run_a.total - (polls(run_b) - polls(run_a)) * e
                        - (dp.ir(run_b) - dp.ir(run_a)))

            res["total"] = d.total / per
            res["net"] = net(b.loop_sum, a.loop_sum) / per if res["e"] is not None else None
            res["rank_net"] = [net(b.loop[r], a.loop[r]) for r in (0, 1)]
            res["rank_net"] = [x / n if x is not None else None for x in res["rank_net"]]
            res["whole"] = (sum(b.whole) - sum(a.whole)) / per
            res["with_polls"] = (a.loop_sum.total / (2.0 * n), b.loop_sum.total / (4.0 * n))
            res["polls_run"] = (polls(a.loop_sum) / (2.0 * n), polls(b.loop_sum) / (4.0 * n))
            res["direct_run"] = (dp.count(a.loop_sum) / (2.0 * n), dp.count(b.loop_sum) / (4.0 * n))
            side = poll_callers_side(b.loop_sum, keys_named(b.loop_sum, "opal_progress"))
            ps = polls_by_side(d, side)
            dside = dp.by_side(d, poll_callers_side(b.loop_sum, list(dp.cost)))
            res["polls_side"] = {k: v / per for k, v in ps.items()}
            res["direct_side"] = {k: v / per for k, v in dside.items()}
            res["send"] = sum_incl(d, "PMPI_Send") / per
            res["recv"] = sum_incl(d, "PMPI_Recv") / per
            if res["e_opal"] is not None:
                res["send_net"] = (sum_incl(d, "PMPI_Send") - ps["send"] * res["e_opal"]
                                   - dside["send"]) / per
                res["recv_net"] = (sum_incl(d, "PMPI_Recv") - ps["recv"] * res["e_opal"]
                                   - dside["recv"]) / per
            else:
                res["send_net"] = res["recv_net"] = None
            # per function self cost net of polls, and by library
            k_polls = polls(d)
            d_ir = dp.ir(d)
            fnet = {k: (v - k_polls * e_self.get(k, 0.0) - d_ir * dp.profile.get(k, 0.0)) / per
                    for k, v in d.self_.items()}
            grp = defaultdict(float)
            sub = defaultdict(float)
            for k, v in fnet.items():
                grp[group(k[0])] += v
                if obshort(k[0]).startswith("mca_mtl_rustofi"):
                    # by the source file of each instruction (a function
                    # may hold inlined code of the other side), in the
                    # proportion of the round trips' own counts
                    own = d.self_.get(k, 0)
                    share = d.shim_self.get(k, 0) / own if own else 0.0
                    share = min(1.0, max(0.0, share))
                    sub["shim"] += v * share
                    sub["engine"] += v * (1.0 - share)
            res["fnet"], res["groups"], res["rustofi_split"] = fnet, grp, sub
            c = load(find(cfg, size, 3 * n))
            if c is not None:  # linearity: a 3N run of the same configuration and size
                lin = []
                for r in (0, 1):
                    n3 = net(c.loop[r], a.loop[r])
                    n2 = net(b.loop[r], a.loop[r])
                    lin.append((n3 / (2.0 * n) if n3 is not None else None,
                                n2 / float(n) if n2 is not None else None,
                                (c.loop[r].total - a.loop[r].total) / (2.0 * n),
                                (b.loop[r].total - a.loop[r].total) / float(n)))
                res["lin"] = lin
            results.append(res)

    def ratio(x, y):
        return "%.3f" % (x / y) if x is not None and y else "–"

    w = []
    w.append("# Cost per message (callgrind instruction counts)\n")
    w.append("- mode %s, %s UTC; git %s%s; mca_mtl_rustofi.so sha256 %s… (built %s)" % (
        meta.get("mode"), meta.get("date"), meta.get("git"),
        " (%s)" % meta["git_dirty"] if meta.get("git_dirty") else "",
        meta.get("so_sha256"), meta.get("so_mtime")))
    w.append("- %s; %s; %s; libfabric %s" % (meta.get("host"), meta.get("valgrind"),
                                             meta.get("ompi"), meta.get("libfabric")))
    w.append("- Blocking ping-pong (bench/src/profile_pingpong.c), 2 ranks on one host. "
             "Per round trip per rank (one MPI_Send + one MPI_Recv) = (Ir of the round trips "
             "of the 2N run - those of the N run) / N, mean of ranks 0 and 1.")
    w.append("- A waiting rank polls (opal_progress) as often as timing lets it, so counts "
             "with polls vary from run to run. \"empty poll\" is what one poll costs when it "
             "finds nothing, from the idle phase of the same runs (MPI_Test calls with "
             "nothing to receive). \"net of polls\" = Ir - polls x empty poll: the work "
             "beyond polling, which does not depend on timing (a slight underestimate: the "
             "useful polls lose their base cost too).")
    settle = int(meta.get("settle_us", "0") or 0)
    if settle > 0:
        w.append("- Paced (PROFILE_SETTLE_US=%d): one round trip every %d µs on a common clock, "
                 "each rank sleeping outside MPI until its turn, so that each receive started "
                 "after its message was there and made no poll that found nothing (the polls "
                 "per round trip say how far that held); the counts with polls are then the "
                 "work alone." % (settle, settle))
        # The pacing's own instructions (the program's pace and what it
        # calls, libc's clock_nanosleep) fall in program+libmpi and libc.
        pacing = ", ".join(
            "%s %s B %s" % (r["cfg"], r["size"], num(sum(
                r["d"].incl(k) for k in r["d"].self_
                if obshort(k[0]).startswith("profile_pingpong") and k[1].split(".")[0] == "pace"
            ) / r["per"])) for r in results)
        w.append("- The pacing itself costs Ir per round trip per rank (%s), counted in "
                 "program+libmpi and libc and in the whole-stack figures (Ir, with polls), "
                 "not in MPI_Send, MPI_Recv, pml or mtl/btl." % pacing)
    w.append("- Callgrind counts each iteration of `rep movsb` as an instruction, and glibc's "
             "memcpy copies large blocks that way (on this machine from 16 KiB: a 16 KiB copy "
             "counts 16.4k Ir, an 8 KiB one, copied with vector instructions, 0.8k), so large "
             "copies weigh far more in Ir than in time; see memcpy in the top self cost lists.")
    w.append("")
    w.append("## Per round trip per rank, net of polls\n")
    w.append("| config | size B | N | Ir | r0 / r1 | MPI_Send | MPI_Recv | empty poll Ir |")
    w.append("|---|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        w.append("| %s | %d | %d | %s | %s / %s | %s | %s | %s |" % (
            r["cfg"], r["size"], r["n"], num(r["net"]), num(r["rank_net"][0]),
            num(r["rank_net"][1]), num(r["send_net"]), num(r["recv_net"]), num(r["e"])))
    w.append("")
    w.append("MPI_Send / MPI_Recv: inclusive Ir less their own polls (attributed through the "
             "call graph) x the inclusive Ir of an empty opal_progress call. Completion-queue "
             "reads that a component makes outside opal_progress (mtl ofi's blocking send "
             "waits that way) are polls too: their number x the Ir of an empty read comes "
             "off as well (see \"direct CQ reads\" below).\n")
    w.append("## Per round trip per rank, with polls\n")
    w.append("| config | size B | Ir, 2N-N | whole runs, 2N-N | Ir (N run / 2N run) "
             "| polls (N run / 2N run) | direct CQ reads (N run / 2N run) "
             "| MPI_Send incl | MPI_Recv incl |")
    w.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        w.append("| %s | %d | %s | %s | %s / %s | %s / %s | %s / %s | %s | %s |" % (
            r["cfg"], r["size"], num(r["total"]), num(r["whole"]), num(r["with_polls"][0]),
            num(r["with_polls"][1]), num(r["polls_run"][0]), num(r["polls_run"][1]),
            num(r["direct_run"][0]), num(r["direct_run"][1]), num(r["send"]), num(r["recv"])))
    w.append("")
    w.append("\"whole runs\": the difference of the complete runs, start-up and teardown "
             "included (their polls do not cancel). \"N run / 2N run\": the round trips of "
             "one run on their own, divided by their number. \"direct CQ reads\": calls "
             "into a libfabric function that the idle phase polls, from a caller outside "
             "opal_progress.\n")
    w.append("## Where the instructions go (self Ir per round trip per rank net of polls, "
             "by library)\n")
    w.append("program+libmpi: the test and Open MPI's MPI layer (libmpi); pml: mca_pml_cm / "
             "mca_pml_ob1; mtl/btl: mca_mtl_rustofi (shim + Rust engine, split in the last "
             "column), mca_mtl_ofi, mca_btl_*; opal: libopen-pal (opal_progress, ...) and "
             "libevent; libfabric: the providers (tcp/rxm, shm); libc: memcpy, locks, "
             "syscall stubs.\n")
    w.append("| config | size B | " + " | ".join(GROUPS) + " | rustofi shim / engine |")
    w.append("|---|--:|" + "--:|" * len(GROUPS) + "--:|")
    for r in results:
        split = r["rustofi_split"]
        sp = "%s / %s" % (num(split.get("shim", 0)), num(split.get("engine", 0))) if split else "–"
        w.append("| %s | %d | " % (r["cfg"], r["size"])
                 + " | ".join(num(r["groups"].get(g, 0)) for g in GROUPS) + " | %s |" % sp)
    w.append("")

    ours = [r for r in results if r["cfg"].startswith("rustofi")]
    if ours:
        w.append("## rustofi's entry points (Ir per round trip per rank)\n")
        w.append("isend / irecv: inclusive Ir of rustofi_isend / rustofi_irecv (2N-N, no "
                 "polls inside). progress: rustofi_progress calls per round trip in each "
                 "run, Ir of an empty call, and its inclusive Ir beyond the empty calls "
                 "(incl - calls x empty), i.e. the completions it handled. fi_*: inclusive Ir "
                 "of the libfabric calls made through the fi_* wrappers, 2N-N (send: fi_send, "
                 "fi_sendv, fi_tsend, fi_inject, ...; cq_read beyond its empty calls).\n")
        w.append("| config | size B | isend | irecv | progress calls (N run / 2N run) "
                 "| empty progress | progress beyond empty | fi send | fi_recv "
                 "| fi_cq_read beyond empty | other fi_* |")
        w.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        for r in ours:
            d, per, idle = r["d"], r["per"], r["idle"]
            a, b = r["runs"]

            def beyond(fname):
                ks = keys_named(d, fname)
                ec = empty_cost(idle, ks) if idle is not None and ks else None
                if ec is None:
                    return None
                return (sum(d.incl(k) for k in ks) - sum(d.calls[k] for k in ks) * ec) / per

            fi = defaultdict(float)
            for k in d.calls:
                m = re.fullmatch(r"fi_(\w+)__extern", k[1] or "")
                if not m:
                    continue
                kind = m.group(1)
                if kind in ("send", "sendv", "sendmsg", "tsend", "tsendv", "tsendmsg",
                            "inject", "tinject", "senddata", "tsenddata", "injectdata"):
                    fi["send"] += d.incl(k) / per
                elif kind in ("recv", "recvv", "recvmsg", "trecv", "trecvv", "trecvmsg"):
                    fi["recv"] += d.incl(k) / per
                elif kind != "cq_read":
                    fi["other"] += d.incl(k) / per
            w.append("| %s | %d | %s | %s | %s / %s | %s | %s | %s | %s | %s | %s |" % (
                r["cfg"], r["size"], num(sum_incl(d, "rustofi_isend") / per),
                num(sum_incl(d, "rustofi_irecv") / per),
                num(sum_calls(a.loop_sum, "rustofi_progress") / (2.0 * r["n"])),
                num(sum_calls(b.loop_sum, "rustofi_progress") / (4.0 * r["n"])),
                num(empty_cost(idle, keys_named(idle, "rustofi_progress")) if idle else None),
                num(beyond("rustofi_progress")), num(fi["send"]), num(fi["recv"]),
                num(beyond("fi_cq_read__extern")), num(fi["other"])))
        w.append("")

    lin = [r for r in results if "lin" in r]
    if lin:
        w.append("## Linearity\n")
        w.append("Ir per round trip from a 3N run, (3N - N) / 2N, against (2N - N) / N:\n")
        w.append("| config | size B | N | rank | net, 3N-N | net, 2N-N | ratio "
                 "| with polls, 3N-N | with polls, 2N-N | ratio |")
        w.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        for r in lin:
            for rank, (n3, n2, x3, x2) in enumerate(r["lin"]):
                w.append("| %s | %d | %d | %d | %s | %s | %s | %s | %s | %s |" % (
                    r["cfg"], r["size"], r["n"], rank, num(n3), num(n2), ratio(n3, n2),
                    num(x3), num(x2), ratio(x3, x2)))
        w.append("")

    w.append("## Entry points per configuration\n")
    w.append("Per round trip per rank: calls, inclusive Ir (with polls), Ir per call, Ir per "
             "call in the idle phase (an empty call, for the functions polled there) and "
             "inclusive Ir beyond that (incl - calls x empty call). Open MPI's components "
             "and libfabric are stripped except for exported symbols, so their static "
             "functions show as library+offset, with their callers.\n")
    for r in results:
        d, per, idle = r["d"], r["per"], r["idle"]
        w.append("### %s, %d B (%s)\n" % (r["cfg"], r["size"], CONFIG_DESC.get(r["cfg"], "")))
        ps, ds = r["polls_side"], r["direct_side"]
        where = {"send": "in MPI_Send", "recv": "in MPI_Recv", "other": "elsewhere"}
        w.append("opal_progress polls per round trip (2N-N): %s." % ", ".join(
            "%s %s" % (num(ps.get(s_, 0)), where[s_]) for s_ in ("send", "recv", "other")))
        if any(ds.values()):
            w.append("Ir of empty completion-queue reads outside opal_progress (2N-N): %s."
                     % ", ".join("%s %s" % (num(ds.get(s_, 0)), where[s_])
                                 for s_ in ("send", "recv", "other")))
        w.append("")
        w.append("| function | calls | incl Ir | Ir/call | Ir/empty call | incl beyond empty |")
        w.append("|---|--:|--:|--:|--:|--:|")
        rows = []
        seen = set()
        for fname in NAMED:
            ks = keys_named(d, fname)
            if not ks or all(d.calls.get(k, 0) == 0 for k in ks):
                continue
            seen.update(ks)
            rows.append((fname, sum(d.calls[k] for k in ks), sum(d.incl(k) for k in ks),
                         empty_cost(idle, ks) if idle else None))
        for k in sorted(k for k in d.calls if k[1] and re.fullmatch(r"fi_\w+__extern", k[1])):
            if d.calls[k] != 0 and k not in seen:
                seen.add(k)
                rows.append((k[1], d.calls[k], d.incl(k), empty_cost(idle, [k]) if idle else None))
        # component functions entered from another library, calls into libfabric
        entry = defaultdict(lambda: [0, 0, set()])
        lf = defaultdict(lambda: [0, 0, set()])
        for (caller, callee), (n, ir) in d.arcs.items():
            if caller[0] == callee[0] or n == 0:
                continue
            if group(callee[0]) == "mtl/btl":
                e = entry[callee]
            elif group(callee[0]) == "libfabric":
                e = lf[callee]
            else:
                continue
            e[0] += n
            e[1] += ir
            e[2].add(label(caller, 40))
        for k, (n, ir, callers) in sorted(entry.items(), key=lambda kv: -abs(kv[1][1])):
            if k in seen or abs(n) / per < 0.01:
                continue
            seen.add(k)
            rows.append(("%s ← %s" % (label(k), ", ".join(sorted(callers)[:2])), n, d.incl(k),
                         empty_cost(idle, [k]) if idle else None))
        lf_rows = sorted(lf.items(), key=lambda kv: -abs(kv[1][1]))
        if lf_rows:
            rows.append(("libfabric: all calls into it", sum(v[0] for _, v in lf_rows),
                         sum(v[1] for _, v in lf_rows), None))
            for k, (n, ir, callers) in lf_rows[:6]:
                if abs(n) / per < 0.01:
                    continue
                ec = None
                if idle is not None:
                    ic = sum(v[0] for (cr, ce), v in idle.arcs.items() if ce == k and cr[0] != k[0])
                    ii = sum(v[1] for (cr, ce), v in idle.arcs.items() if ce == k and cr[0] != k[0])
                    ec = ii / ic if ic >= MIN_IDLE_CALLS else None
                rows.append(("&nbsp;&nbsp;%s ← %s" % (label(k), ", ".join(sorted(callers)[:2])),
                             n, ir, ec))
        for fname, n, ir, ec in rows:
            beyond = (ir - n * ec) / per if ec is not None else None
            w.append("| %s | %s | %s | %s | %s | %s |" % (
                fname, num(n / per), num(ir / per), num(ir / n) if n > 0 else "–", num(ec),
                num(beyond)))
        w.append("")
        w.append("Top self cost net of polls (Ir per round trip per rank, share of the net "
                 "total; with polls in brackets):\n")
        w.append("| function | self Ir net | share | (with polls) |")
        w.append("|---|--:|--:|--:|")
        tot = r["net"] if r["net"] else r["total"]
        for k, v in sorted(r["fnet"].items(), key=lambda kv: -kv[1])[:10]:
            w.append("| %s | %s | %.1f%% | (%s) |" % (label(k, 80), num(v),
                                                      100.0 * v / tot if tot else 0,
                                                      num(d.self_[k] / per)))
        w.append("")

    w.append("## Runs\n")
    w.append("| run | status | seconds |")
    w.append("|---|---|--:|")
    for r in runs:
        w.append("| %s | %s | %d |" % (r["label"], r["status"], r["secs"]))
    if problems:
        w.append("")
        w.append("Failed or timed-out runs (their pairs are left out): "
                 + ", ".join(r["label"] for r in problems))
    neg = [r for r in results
           if (r["net"] is not None and r["net"] <= 0)
           or any(x is not None and x <= 0 for x in r["rank_net"])]
    if neg:
        w.append("")
        w.append("WARNING: non-positive 2N-N difference (net of polls) for: "
                 + ", ".join("%s %d B" % (r["cfg"], r["size"]) for r in neg))
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(w) + "\n")


if __name__ == "__main__":
    main()
