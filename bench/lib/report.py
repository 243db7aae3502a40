#!/usr/bin/env python3
"""Analysis shared by the benchmark scripts (bench/p2p, bench/osu).

    report.py OUT PLOTTER MODE REPEATS CONFIGS BENCHES
                    [--title TEXT] [--note TEXT] [--unit BENCH=TEXT ...]

OUT      results folder holding raw.csv (benchmark,config,repeat,size,value)
         and optionally missing.txt (one line per failed / skipped run)
PLOTTER  matplotlib, gnuplot or none
MODE     quick or full (printed in the title and on the plots)
REPEATS  how many times every run was repeated
CONFIGS  configuration names, comma or space separated, in table order
BENCHES  benchmark names, comma or space separated, in report order

Writes OUT/medians.csv (benchmark,config,size,median,min,max), OUT/report.md
(a table per benchmark, medians over the repeats, with rustofi/ofi,
rustofi/ob1-tcp, rustofi-shm/ob1-vader and rustofi-fishm/ob1-vader ratio columns for those
configurations that are present) and
OUT/<benchmark>.png (value vs message size, log-log).
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
from collections import defaultdict

CONFIG_DESC = {
    "rustofi": "pml cm + mtl rustofi (libfabric tcp carrying all traffic, mtl_rustofi_shm off)",
    "rustofi-shm": "pml cm + mtl rustofi, tcp with its own shared-memory rail for same-host peers (the default)",
    "rustofi-fishm": "pml cm + mtl rustofi, tcp with libfabric's shm provider for same-host peers (mtl_rustofi_shm libfabric)",
    "ofi": "pml cm + mtl ofi (libfabric tcp)",
    "ob1-tcp": "pml ob1 + btl tcp,self",
    "ob1-vader": "pml ob1 + btl vader,self",
}

# y-axis / table captions; both our own benchmark names (bench/src/osu) and
# the OSU micro-benchmarks program names.
UNITS = {
    "lat": "latency µs (lower is better)",
    "mt_lat": "latency µs, mean over threads (lower is better)",
    "bw": "MB/s (higher is better)",
    "bibw": "MB/s, both directions (higher is better)",
    "mr_1pair": "MB/s, 1 pair (2 ranks), window of 64 (higher is better)",
    "mr_1pair_rate": "messages/s, 1 pair (2 ranks) (higher is better)",
    "mbw_mr": "aggregate MB/s, 2 pairs (higher is better)",
    "mbw_mr_rate": "messages/s, 2 pairs (higher is better)",
    "osu_latency": "latency µs (lower is better)",
    "osu_latency_mt": "latency µs, 1 sender thread, 2 receiver threads (lower is better)",
    "osu_bw": "MB/s (higher is better)",
    "osu_bibw": "MB/s, both directions (higher is better)",
    "osu_mbw_mr": "aggregate MB/s, 2 pairs (higher is better)",
    "osu_mbw_mr_rate": "messages/s, 2 pairs (higher is better)",
}

# (ours, theirs) ratio columns: the network paths, then the shared-memory paths.
RATIOS = [("rustofi", "ofi"), ("rustofi", "ob1-tcp"), ("rustofi-shm", "ob1-vader"),
          ("rustofi-fishm", "ob1-vader")]


def split_list(s):
    return [x for x in s.replace(",", " ").split() if x]


def size_str(s):
    if s >= 1 << 20 and s % (1 << 20) == 0:
        return f"{s >> 20}M"
    if s >= 1 << 10 and s % (1 << 10) == 0:
        return f"{s >> 10}K"
    return str(s)


def fmt(v):
    if v is None:
        return "–"
    if v >= 1000:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "–"


def read_raw(out):
    vals = defaultdict(list)
    path = os.path.join(out, "raw.csv")
    if not os.path.exists(path):
        return vals
    with open(path) as f:
        for row in csv.DictReader(f):
            try:
                vals[(row["benchmark"], row["config"], int(row["size"]))].append(float(row["value"]))
            except (KeyError, TypeError, ValueError):
                continue  # a malformed line is skipped, not fatal
    return vals


def write_medians(out, vals, benches, configs):
    med = {}
    with open(os.path.join(out, "medians.csv"), "w") as f:
        f.write("benchmark,config,size,median,min,max\n")
        for b in benches:
            for c in configs:
                for s in sorted(k[2] for k in vals if k[0] == b and k[1] == c):
                    v = vals[(b, c, s)]
                    m = statistics.median(v)
                    med[(b, c, s)] = m
                    f.write(f"{b},{c},{s},{m:g},{min(v):g},{max(v):g}\n")
    return med


def write_report(out, med, benches, configs, units, mode, repeats, title, note):
    missing = []
    mpath = os.path.join(out, "missing.txt")
    if os.path.exists(mpath):
        with open(mpath) as f:
            missing = [line.strip() for line in f if line.strip()]
    pairs = [(a, b) for a, b in RATIOS if a in configs and b in configs]

    desc = "; ".join(f"`{c}` = {CONFIG_DESC[c]}" if c in CONFIG_DESC else f"`{c}`" for c in configs)
    intro = f"Configurations: {desc}."
    if note:
        intro += " " + note
    if pairs:
        intro += (" Ratios are ours ÷ theirs (for latency < 1 means ours is faster, "
                  "for bandwidth/rate > 1 means ours is faster).")
    lines = [f"# {title} ({mode}, {repeats} repeat(s), median of repeats)", "", intro, ""]
    for b in benches:
        sizes = sorted({k[2] for k in med if k[0] == b})
        lines += [f"## {b}: {units.get(b, 'value')}", ""]
        if not sizes:
            lines += ["no data", ""]
            continue
        lines.append("| " + " | ".join(["size"] + configs + [f"{a}/{b}" for a, b in pairs]) + " |")
        lines.append("|---:|" + "---:|" * (len(configs) + len(pairs)))
        for s in sizes:
            g = {c: med.get((b, c, s)) for c in configs}
            lines.append(f"| {size_str(s)} | " + " | ".join(fmt(g[c]) for c in configs) + " |"
                         + "".join(f" {ratio(g[a], g[b])} |" for a, b in pairs))
        lines.append("")
    lines += ["## Missing runs", ""]
    lines += [f"- {m}" for m in missing] if missing else ["none"]
    lines.append("")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines))


def plot(out, med, benches, configs, units, mode, plotter):
    written = []
    for b in benches:
        # log axes: size 0 (OSU's first latency size) and non-positive values are left out
        series = {c: sorted((s, v) for (bb, cc, s), v in med.items()
                            if bb == b and cc == c and s > 0 and v > 0) for c in configs}
        series = {c: p for c, p in series.items() if p}
        if not series:
            continue
        png = os.path.join(out, f"{b}.png")
        if plotter == "matplotlib":
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for c, p in series.items():
                ax.plot([x for x, _ in p], [y for _, y in p], marker="o", ms=3, label=c)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel(units.get(b, "value"))
            ax.set_title(f"{b} ({mode})")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
            fig.tight_layout()
            fig.savefig(png, dpi=110)
            plt.close(fig)
        elif plotter == "gnuplot":
            datafiles = []
            for c, p in series.items():
                d = os.path.join(out, f".{b}_{c}.dat")
                with open(d, "w") as f:
                    f.writelines(f"{x} {y}\n" for x, y in p)
                datafiles.append((c, d))
            ylabel = units.get(b, "value").replace("'", "")
            script = (f"set terminal png size 800,520\nset output '{png}'\nset logscale xy\n"
                      f"set xlabel 'message size (bytes)'\nset ylabel '{ylabel}'\n"
                      f"set title '{b} ({mode})'\n"
                      "plot " + ", ".join(f"'{d}' with linespoints title '{c}'" for c, d in datafiles)
                      + "\n")
            subprocess.run(["gnuplot"], input=script.encode(), check=False)
            for _, d in datafiles:
                os.remove(d)
        else:
            continue
        if os.path.exists(png):
            written.append(png)
    return written


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("plotter", choices=["matplotlib", "gnuplot", "none"])
    ap.add_argument("mode")
    ap.add_argument("repeats")
    ap.add_argument("configs", help="comma or space separated")
    ap.add_argument("benches", help="comma or space separated")
    ap.add_argument("--title", default="Point-to-point benchmarks")
    ap.add_argument("--note", default="--bind-to none; expect noise on a shared machine.")
    ap.add_argument("--unit", action="append", default=[], metavar="BENCH=TEXT",
                    help="caption for a benchmark's values (repeatable)")
    a = ap.parse_args(argv)

    configs, benches = split_list(a.configs), split_list(a.benches)
    units = dict(UNITS)
    for u in a.unit:
        k, sep, v = u.partition("=")
        if not sep:
            ap.error(f"--unit needs BENCH=TEXT, got {u!r}")
        units[k] = v

    vals = read_raw(a.out)
    med = write_medians(a.out, vals, benches, configs)
    write_report(a.out, med, benches, configs, units, a.mode, a.repeats, a.title, a.note)
    plot(a.out, med, benches, configs, units, a.mode, a.plotter)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
