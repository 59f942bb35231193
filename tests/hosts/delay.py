"""A slow, lossy link in user space, for kernels without ``netem``: run inside the router namespace.

    python -m tests.hosts.delay --delay-ms 100 --loss-percent 1 --tun-in slow0 --tun-out slow1

It makes two TUN devices. The router's policy rules (``Network.slow``) send the chosen traffic
into ``tun-in``; each packet read there is dropped with the given probability, else held for the
delay and written to ``tun-out``, from where the kernel forwards it on as usual (a rule sends
whatever comes in on ``tun-out`` through the main table, so nothing loops). Packets keep their
order, as on a link with a fixed delay. Prints ``ready`` once both devices exist.
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import os
import random
import select
import struct
import subprocess
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    subprocess.run(["ip", "link", "set", name, "up"], check=True)
    return fd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--loss-percent", type=float, default=0.0)
    parser.add_argument("--tun-in", required=True)
    parser.add_argument("--tun-out", required=True)
    args = parser.parse_args()
    inbound, outbound = open_tun(args.tun_in), open_tun(args.tun_out)
    delay, loss = args.delay_ms / 1000, args.loss_percent / 100
    held: collections.deque[tuple[float, bytes]] = collections.deque()
    print("ready", flush=True)
    while True:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else None
        readable, _, _ = select.select([inbound], [], [], timeout)
        if readable:
            while True:
                try:
                    packet = os.read(inbound, 65536)
                except BlockingIOError:
                    break
                if random.random() >= loss:
                    held.append((time.monotonic() + delay, packet))
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, packet = held.popleft()
            try:
                os.write(outbound, packet)
            except OSError:
                pass  # the device is going away with the namespace


if __name__ == "__main__":
    sys.exit(main())
