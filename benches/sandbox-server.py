#!/usr/bin/env python3
"""Drives the persistent sandbox helper (`foya-sandbox __sandbox-server`) the way the
runtime does, for `perf stat` (docs/benchmarks.md, "The persistent sandbox helper"):

    python3 benches/sandbox-server.py --server-perf --helper target/release/foya-sandbox \
        --calls 400 --policy '"read-only"' --cwd . --tmp /tmp -- /bin/true

With `--server-perf` the server runs under `perf stat -e task-clock,page-faults`, which
counts it and everything it forks (each call's helper and its program), not this driver.
The calls run one after the other (each waits for the previous one's end), as
`perf stat -r N <helper> __sandbox-exec ... -- /bin/true` runs a helper per call; divide
the total by `--calls` (the server's own start, once, is in the total).
"""

import argparse
import array
import os
import socket
import struct
import subprocess
import sys

READY = b"foya-sandbox-server 1"


def item(data: bytes) -> bytes:
    return struct.pack("<I", len(data)) + data


def request(args, env):
    out = item(struct.pack("<I", len(args)))
    for a in args:
        out += item(os.fsencode(a))
    out += item(struct.pack("<I", len(env)))
    for k, v in env.items():
        out += item(os.fsencode(k)) + item(os.fsencode(v))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--helper", required=True)
    p.add_argument("--calls", type=int, default=400)
    p.add_argument("--policy", default='"read-only"')
    p.add_argument("--cwd", default=".")
    p.add_argument("--tmp", default="/tmp")
    p.add_argument("--protect", action="append", default=[])
    p.add_argument("--server-perf", action="store_true",
                   help="run the server under `perf stat -e task-clock,page-faults`")
    p.add_argument("program", nargs=argparse.REMAINDER)
    a = p.parse_args()
    program = [x for x in a.program if x != "--"] or ["/bin/true"]
    args = ["__sandbox-exec", "--policy", a.policy, "--cwd", os.path.abspath(a.cwd),
            "--tmp", a.tmp]
    for path in a.protect:
        args += ["--protect", path]
    args += ["--"] + program
    body = request(args, dict(os.environ))

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    command = [a.helper, "__sandbox-server", "--parent", str(os.getpid())]
    if a.server_perf:
        # perf's own pid is the helper's parent: no `--parent` check then.
        command = ["perf", "stat", "-e", "task-clock,page-faults", "--", a.helper,
                   "__sandbox-server"]
    server = subprocess.Popen(command, stdin=theirs.fileno(), stdout=subprocess.DEVNULL)
    theirs.close()
    if ours.recv(64) != READY:
        sys.exit("the server did not say it was ready")
    null = os.open("/dev/null", os.O_WRONLY)
    memfd = os.memfd_create("bench")
    os.write(memfd, body)
    for _ in range(a.calls):
        mine, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        socket.send_fds(ours, [b"c"], [its.fileno(), null, null, memfd])
        its.close()
        started = mine.recv(64)
        ended = mine.recv(64)
        if started[:1] != b"S" or ended[:1] != b"X" or struct.unpack("<i", ended[1:5])[0] != 0:
            sys.exit(f"a call failed: {started!r} {ended!r}")
        mine.close()
    ours.close()
    server.wait()


if __name__ == "__main__":
    main()
