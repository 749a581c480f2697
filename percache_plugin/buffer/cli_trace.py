"""``percache trace FILE``: the access picture (block number against time, classes coloured), loop
sizes and the hot set of a trace (format: docs/TRACES.md). The picture needs matplotlib
(``pip install 'percache-plugin[bench]'``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .trace import Access, read_trace, summarize

__all__ = ["add_arguments", "run", "classify_points"]

COLOURS = {"seq": "tab:blue", "loop": "tab:orange", "hot": "tab:red"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, help="CSV trace (t,op,file,offset,size,cls)")
    p.add_argument("--block-kib", type=int, default=1024, help="block size in KiB")
    p.add_argument("--hot-distance", type=int, default=64,
                   help="reuse distance (blocks) at or below which a block is hot")
    p.add_argument("--png", type=Path, default=None, help="write the picture here (default FILE.png)")


def classify_points(accesses: list[Access], block: int, hot_distance: int) -> list[tuple[float, int, str]]:
    """(time, global block number, class) for every block read: files are laid end to end in
    order of first access; the class is the declared one, else seq (first read), hot (re-read
    within ``hot_distance`` blocks) or loop."""
    base: dict[str, int] = {}
    extent: dict[str, int] = {}
    for a in accesses:
        extent[a.file] = max(extent.get(a.file, 0), (a.offset + a.size + block - 1) // block)
    nxt = 0
    for a in accesses:
        if a.file not in base:
            base[a.file] = nxt
            nxt += max(1, extent[a.file])
    last: dict[int, int] = {}
    out = []
    n = 0
    for a in accesses:
        if a.op != "r":
            continue
        for b in range(a.offset // block, (a.offset + max(a.size, 1) - 1) // block + 1):
            g = base[a.file] + b
            prev = last.get(g)
            cls = a.cls or ("seq" if prev is None else "hot" if n - prev <= hot_distance else "loop")
            last[g] = n
            n += 1
            out.append((a.t, g, cls))
    return out


def run(args: argparse.Namespace) -> int:
    accesses = read_trace(args.file)
    block = args.block_kib * 1024
    s = summarize(accesses, block, hot_distance=args.hot_distance)
    print(f"{args.file}: {s.reads} reads, {s.writes} writes, {s.bytes_read / 2**20:.1f} MiB read, "
          f"{s.distinct_blocks} distinct {args.block_kib} KiB blocks")
    print(f"sequential (read once): {s.seq_blocks} blocks; hot set: {s.hot_blocks} blocks "
          f"({s.hot_blocks * block / 2**20:.1f} MiB)")
    for length, cycles in s.loops:
        print(f"loop of ~{length} blocks ({length * block / 2**20:.1f} MiB), up to {cycles} re-reads")
    try:
        import matplotlib
    except ImportError:
        print("no picture: matplotlib is missing (pip install matplotlib)")
        return 0
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = classify_points(accesses, block, args.hot_distance)
    fig, ax = plt.subplots(figsize=(7, 4))
    for cls, colour in COLOURS.items():
        pts = [(t, b) for t, b, c in points if c == cls]
        if pts:
            ax.scatter([t for t, _ in pts], [b for _, b in pts], s=2, c=colour, label=cls.upper())
    ax.set_xlabel("time (s)")
    ax.set_ylabel("block number")
    ax.set_title(args.file.name)
    ax.legend(markerscale=5)
    fig.tight_layout()
    out = args.png or args.file.with_suffix(".png")
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print(f"picture: {out}")
    return 0
