"""The WireGuard tunnel's figures in a lab of network namespaces (edgelet/testing/wglab.py): the time from
bringing the device's interface up (wireguard-go started, configured over UAPI, addresses and routes) to its
first handshake with the hub; the time the keep-up loop takes to bring it back after its wireguard-go is
SIGKILLed (at the agent's 10 s check period, so most of it is the wait for the next check); and wireguard-go's
own RSS with the tunnel up and idle.

Run as root: `.venv/bin/python bench/tunnel.py [--rounds 5]`. Prints medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgelet.testing.wglab import sh, wireguard_gos, wireguard_lab

# Run in the site namespace: bring the tunnel up, time the first handshake, then kill wireguard-go and time the
# keep-up loop's recovery to the next handshake.
DEVICE = """
import asyncio, json, os, signal, sys, time
from pathlib import Path
from edgelet.tunnel import keys
from edgelet.tunnel.device import Tunnel
from edgelet.util.clock import REAL_CLOCK

def daemons():
    # wireguard-go processes in this network namespace
    mine, found = os.readlink("/proc/self/ns/net"), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == "wireguard-go" and os.readlink(f"/proc/{pid}/ns/net") == mine:
                found.append(int(pid))
        except OSError:
            pass
    return found

async def handshake_after(tunnel, since):
    while True:
        try:
            state = await tunnel.state()
            if any(p.last_handshake and p.last_handshake >= since for p in state.peers):
                return time.monotonic()
        except Exception:
            pass
        await asyncio.sleep(0.01)

async def main():
    loaded = keys.load(Path(sys.argv[1]), Path(sys.argv[2]))
    tunnel = Tunnel(loaded.config, REAL_CLOCK)
    wall, t0 = time.time() // 1, time.monotonic()
    await tunnel.up()
    up = time.monotonic() - t0
    first = await handshake_after(tunnel, wall) - t0
    tunnel.status.up = True
    keeper = asyncio.create_task(tunnel.keep_up())
    await asyncio.sleep(2)
    pids = daemons()
    rss = sum(int(l.split()[1]) for p in pids for l in open(f"/proc/{p}/status") if l.startswith("VmRSS:"))
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wall, t0 = time.time() // 1 + 1, time.monotonic()
    healed = await handshake_after(tunnel, wall) - t0
    keeper.cancel()
    print(json.dumps({"up": up, "first_handshake": first, "healed": healed, "rss_kib": rss}))

asyncio.run(main())
"""


def one_round() -> dict:
    with tempfile.TemporaryDirectory(prefix="edgelet-bench-tunnel-") as tmp:
        with wireguard_lab(Path(tmp)) as lab:
            out = sh(
                sys.executable, "-c", DEVICE, str(lab["conf"]), str(lab["root"]), netns=lab["site_ns"], timeout=120
            )
            assert len(wireguard_gos(lab)) == 1  # brought back, once
            return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = [one_round() for _ in range(args.rounds)]
    for key, unit, scale in (
        ("up", "ms", 1000),
        ("first_handshake", "ms", 1000),
        ("healed", "s", 1),
        ("rss_kib", "MiB", 1 / 1024),
    ):
        values = [r[key] * scale for r in rounds]
        print(
            f"{key:16} median {statistics.median(values):8.2f} {unit}  (min {min(values):.2f}, "
            f"max {max(values):.2f}, {len(values)} rounds)"
        )


if __name__ == "__main__":
    main()
