"""The Markdown table and the PNG plot from bench/run's measurements."""
import os
import statistics

from suites import SIZES

LOWER, HIGHER = "lower is better", "higher is better"


def size_name(size):
    if size is None:
        return ""
    if size >= 1 << 20:
        return f"{size >> 20} MiB"
    if size >= 1 << 10:
        return f"{size >> 10} KiB"
    return f"{size} B"


def rows():
    """(metric label, our key, peer key or None, peer label, unit, which way is better)."""
    out = []
    for s in SIZES:
        out.append((f"`ib_send_lat` {size_name(s)} vs UCX `tag_lat`", ("rdmashim", "send_lat", s),
                    ("ucx", "send_lat", s), "UCX", "µs one way", LOWER))
    for s in SIZES:
        out.append((f"`ib_send_lat` {size_name(s)} vs libfabric `fi_pingpong -p shm`",
                    ("rdmashim", "send_lat", s), ("libfabric", "send_lat", s), "libfabric",
                    "µs one way", LOWER))
    for s in SIZES:
        out.append((f"`ib_write_lat` {size_name(s)} vs UCX `ucp_put_lat`",
                    ("rdmashim", "write_lat", s), ("ucx", "write_lat", s), "UCX",
                    "µs one way", LOWER))
    out.append(("`ib_read_lat` 64 B", ("rdmashim", "read_lat", 64), None, "", "µs", LOWER))
    out.append(("`ib_atomic_lat` 8 B", ("rdmashim", "atomic_lat", 8), None, "", "µs", LOWER))
    for s in SIZES:
        out.append((f"`ib_send_bw` {size_name(s)} vs UCX `tag_bw`", ("rdmashim", "send_bw", s),
                    ("ucx", "send_bw", s), "UCX", "MiB/s", HIGHER))
    for s in SIZES:
        out.append((f"`ib_write_bw` {size_name(s)} vs UCX `ucp_put_bw`",
                    ("rdmashim", "write_bw", s), ("ucx", "write_bw", s), "UCX", "MiB/s", HIGHER))
    for s in SIZES:
        out.append((f"`ib_send_bw` {size_name(s)} message rate vs UCX `tag_bw`",
                    ("rdmashim", "send_mr", s), ("ucx", "send_mr", s), "UCX", "M msg/s", HIGHER))
    for s in SIZES:
        out.append((f"`ib_write_bw` {size_name(s)} message rate vs UCX `ucp_put_bw`",
                    ("rdmashim", "write_mr", s), ("ucx", "write_mr", s), "UCX", "M msg/s", HIGHER))
    out.append(("`rstream -S 64` (rsockets) vs `rstream -T s` (kernel TCP, loopback)",
                ("rdmashim", "rstream_lat", 64), ("tcp", "rstream_lat", 64), "TCP", "µs one way", LOWER))
    out.append(("`rstream -S 1048576` (rsockets) vs `rstream -T s` (kernel TCP, loopback)",
                ("rdmashim", "rstream_bw", 1048576), ("tcp", "rstream_bw", 1048576), "TCP", "MiB/s", HIGHER))
    out.append(("`ibv_rc_pingpong -e` 64 B, per round trip (event mode) vs the kernel's "
                "wake-up round trip (`bench/wake_pingpong.c`)",
                ("rdmashim", "rc_pingpong_event", 64), ("kernel", "rc_pingpong_event", 64),
                "kernel", "µs", LOWER))
    out.append(("`ibv_rc_pingpong` 64 B, per round trip (busy polling)",
                ("rdmashim", "rc_pingpong_poll", 64), None, "", "µs", LOWER))
    out.append(("idle CPU, 2 processes holding 200 connected RC QPs each",
                ("rdmashim", "idle_cpu", 200), None, "", "% of one core", LOWER))
    return out


def netns_rows():
    """The cross-namespace table (bench/run --netns, keys of bench/netns.py)."""
    lat, bw, mr = "µs one way", "MiB/s", "M msg/s"
    ucx, fab = "UCX `UCX_TLS=tcp`", "libfabric `fi_pingpong"
    return [
        ("`ib_send_lat` 64 B vs " + ucx + " `tag_lat`", ("rdmashim", "send_lat", 64),
         ("ucx-tcp", "send_lat", 64), "UCX tcp", lat, LOWER),
        ("`ib_send_lat` 64 B vs " + fab + " -p tcp`", ("rdmashim", "send_lat", 64),
         ("fi-tcp", "send_lat", 64), "libfabric tcp", lat, LOWER),
        ("`ib_send_lat` 64 B vs " + fab + " -p udp`", ("rdmashim", "send_lat", 64),
         ("fi-udp", "send_lat", 64), "libfabric udp", lat, LOWER),
        ("`ib_write_lat` 64 B vs " + ucx + " `ucp_put_lat`", ("rdmashim", "write_lat", 64),
         ("ucx-tcp", "write_lat", 64), "UCX tcp", lat, LOWER),
        ("`ib_send_bw` 1 MiB vs " + ucx + " `tag_bw`", ("rdmashim", "send_bw", 1 << 20),
         ("ucx-tcp", "send_bw", 1 << 20), "UCX tcp", bw, HIGHER),
        ("`ib_write_bw` 1 MiB vs " + ucx + " `ucp_put_bw`", ("rdmashim", "write_bw", 1 << 20),
         ("ucx-tcp", "write_bw", 1 << 20), "UCX tcp", bw, HIGHER),
        ("1 MiB ping-pong (1 MiB / `ib_send_lat` one way) vs " + fab + " -p tcp`",
         ("rdmashim", "pingpong_bw", 1 << 20), ("fi-tcp", "pingpong_bw", 1 << 20),
         "libfabric tcp", bw, HIGHER),
        ("`ib_send_bw` 64 B message rate vs " + ucx + " `tag_bw`", ("rdmashim", "send_mr", 64),
         ("ucx-tcp", "send_mr", 64), "UCX tcp", mr, HIGHER),
        ("`ib_write_bw` 64 B message rate vs " + ucx + " `ucp_put_bw`",
         ("rdmashim", "write_mr", 64), ("ucx-tcp", "write_mr", 64), "UCX tcp", mr, HIGHER),
    ]


def netns_floor_rows():
    """`ib_send_lat` across namespaces beside UDP alone on the same veth (bench/netns.py's
    udp_floor): context for the goals, not a goal."""
    lat, floor = "µs one way", "`bench/udp_pingpong.c`"
    return [
        ("`ib_send_lat` 64 B vs UDP alone, one datagram each way (" + floor + ")",
         ("rdmashim", "send_lat", 64), ("udp", "send_lat", 64), "UDP", lat, LOWER),
        ("`ib_send_lat` 64 B vs UDP alone, each message with an ACK-sized datagram ("
         + floor + " `ack`)", ("rdmashim", "send_lat", 64), ("udp-ack", "send_lat", 64),
         "UDP + ACK", lat, LOWER),
    ]


def netns_goals(results):
    """Issue 8's goal for every row of the cross-namespace table: at least the peer's figure
    (≤ 1.0× its latency, ≥ 1.0× its bandwidth and message rate)."""
    out = []
    for label, ours, peer, _, _, better in netns_rows():
        o, p = results.get(ours), results.get(peer)
        if not o or not p:
            out.append(f"- {label}: **not measured** in this run.")
            continue
        r = o / p
        met = r <= 1.0 if better == LOWER else r >= 1.0
        far = r if better == LOWER else 1 / r
        out.append(f"- {label}: **{'met' if met else 'missed'}** ({fmt_ratio(r)}×, goal "
                   f"{'≤' if better == LOWER else '≥'} 1×"
                   + ("" if met else f"; off by a factor of {fmt_ratio(far)}") + ").")
    return "\n".join(out)


# The cross-namespace section lives between these lines of docs/PERFORMANCE.md: `bench/run
# --netns` replaces it, and the same-host `bench/run` keeps it when it rewrites the rest.
NETNS_BEGIN = "<!-- bench/run --netns: begin -->"
NETNS_END = "<!-- bench/run --netns: end -->"


def netns_section_of(path):
    """The cross-namespace section of the file at `path` (markers included), or ""."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    b, e = text.find(NETNS_BEGIN), text.find(NETNS_END)
    return text[b:e + len(NETNS_END)] if 0 <= b < e else ""


def splice_netns_section(path, body):
    """Writes `body` as the cross-namespace section of `path`: in place of the old one, or
    appended; the rest of the file is kept as it is."""
    section = f"{NETNS_BEGIN}\n{body.strip()}\n{NETNS_END}"
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        text = "# Performance\n"
    old = netns_section_of(path)
    text = text.replace(old, section) if old else text.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(text.rstrip("\n") + "\n")


def fmt(v):
    if v is None:
        return "–"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}" if v >= 0.01 else f"{v:.2g}"


def ratio(ours, peer, better):
    """"1.8× slower" style: how rdmashim compares, in the metric's own direction."""
    if ours is None or peer is None or ours <= 0 or peer <= 0:
        return "–"
    r = ours / peer
    if better == LOWER:
        return f"{fmt_ratio(r)}× the time" + (" (faster)" if r < 1 else "")
    return f"{fmt_ratio(r)}× the rate" + (" (faster)" if r > 1 else "")


def fmt_ratio(r):
    return f"{r:,.0f}" if r >= 100 else f"{r:.3g}"


def table(results, which=None):
    """The Markdown table of `which` rows (default: the same-host ones)."""
    lines = ["| metric | unit | rdmashim | peer | ratio (rdmashim / peer) | |",
             "|---|---|---:|---:|---|---|"]
    for label, ours, peer, peer_name, unit, better in (which or rows()):
        if ours[1] == "atomic_lat":
            ours = next((k for k in results if k[:2] == ("rdmashim", "atomic_lat")), ours)
        o = results.get(ours)
        p = results.get(peer) if peer else None
        peer_cell = f"{fmt(p)} ({peer_name})" if peer else "–"
        lines.append(f"| {label} | {unit} | {fmt(o)} | {peer_cell} | "
                     f"{ratio(o, p, better) if peer else '–'} | {better} |")
    return "\n".join(lines)


def spread(samples):
    """Each figure's rounds (bench/run --rounds): the median the tables show, the lowest and the
    highest, in the order they were measured."""
    lines = ["| program | figure | size | rounds | median | lowest | highest |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for (who, name, size), vs in samples.items():
        lines.append(f"| {who} | {name} | {size_name(size)} | {len(vs)} | "
                     f"{fmt(statistics.median(vs))} | {fmt(min(vs))} | {fmt(max(vs))} |")
    return "\n".join(lines)


def spread_section(samples, rounds, heading="##"):
    """The part of a document that shows the spread, or nothing for a single round."""
    if rounds < 2:
        return ""
    return (f"\n{heading} Spread over the {rounds} rounds\n\nEach figure above that is listed "
            f"here is the median of its {rounds} rounds (the others were measured\nonce, or are "
            "derived from listed ones). A round runs every program once, in the order below,\nso "
            "each rdmashim figure and its peers' were measured side by side in every round.\n\n"
            + spread(samples) + "\n")


def plot(results, path, log):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("note: matplotlib is not installed (Debian: python3-matplotlib); no plot written")
        return False
    fig, (lat, bw) = plt.subplots(1, 2, figsize=(12, 4.8))
    series_lat = [("rdmashim ib_send_lat", ("rdmashim", "send_lat")),
                  ("rdmashim ib_write_lat", ("rdmashim", "write_lat")),
                  ("UCX tag_lat", ("ucx", "send_lat")),
                  ("UCX ucp_put_lat", ("ucx", "write_lat")),
                  ("libfabric fi_pingpong shm", ("libfabric", "send_lat"))]
    series_bw = [("rdmashim ib_send_bw", ("rdmashim", "send_bw")),
                 ("rdmashim ib_write_bw", ("rdmashim", "write_bw")),
                 ("UCX tag_bw", ("ucx", "send_bw")),
                 ("UCX ucp_put_bw", ("ucx", "write_bw")),
                 ("libfabric fi_pingpong shm (ping-pong)", ("libfabric", "pingpong_bw"))]
    for ax, series, ylabel, title in (
            (lat, series_lat, "one-way latency, µs (log)", "Latency (lower is better)"),
            (bw, series_bw, "bandwidth, MiB/s (log)", "Bandwidth (higher is better)")):
        for label, (who, metric) in series:
            pts = [(s, results[(who, metric, s)]) for s in SIZES if (who, metric, s) in results]
            if pts:
                style = "-o" if who == "rdmashim" else ("--s" if who == "ucx" else ":^")
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(SIZES, [size_name(s) for s in SIZES])
        ax.set_xlabel("message size")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=100)
    log(f"plot written to {path}")
    return True
