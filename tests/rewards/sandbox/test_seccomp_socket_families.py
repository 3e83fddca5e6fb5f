"""Sandboxed code opens only the socket families it needs (AF_UNIX, AF_INET, AF_INET6), root or not.

The network namespace covers IP only: AF_VSOCK reaches the host's and the hypervisor's vsock
services from inside it, and netlink, packet or AF_ALG sockets are kernel surface. The control
opens the same families outside the sandbox, so the refusal is the filter's, not the kernel's.
"""

from __future__ import annotations

import socket

import pytest

from grouprl.rewards.sandbox.runner import run_in_sandbox
from grouprl.rewards.sandbox.seccomp import ALLOWED_SOCKET_FAMILIES

pytestmark = pytest.mark.usefixtures("bwrap")

# family number -> name; AF_VSOCK (40) first, then the kernel surface, then out-of-range numbers
REFUSED = {
    40: "AF_VSOCK",
    16: "AF_NETLINK",
    17: "AF_PACKET",
    38: "AF_ALG",
    4: "AF_IPX",
    3: "AF_AX25",
    5: "AF_APPLETALK",
    9: "AF_X25",
    29: "AF_CAN",
    30: "AF_TIPC",
    31: "AF_BLUETOOTH",
    44: "AF_XDP",
    45: "AF_MCTP",
    46: "AF_MAX+",
    255: "255",
    65536 + 1: "AF_UNIX in the high bits",
}
PROBE = """
import errno, json, socket
out = {}
for family in %r:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW, socket.SOCK_SEQPACKET):
        try:
            socket.socket(family, kind).close()
            out[family] = "opened"
            break
        except OSError as err:
            out[family] = errno.errorcode.get(err.errno, str(err.errno))
try:
    a, b = socket.socketpair(socket.AF_UNIX)
    a.sendall(b"x"); out["pair"] = b.recv(1).decode()
except OSError as err:
    out["pair"] = str(err)
try:
    socket.socketpair(socket.AF_NETLINK if hasattr(socket, "AF_NETLINK") else 16)
    out["netlink_pair"] = "opened"
except OSError as err:
    out["netlink_pair"] = errno.errorcode.get(err.errno, str(err.errno))
print(json.dumps(out))
"""


def _probe(families) -> dict:
    r = run_in_sandbox(PROBE % (list(families),), backend="bwrap")
    assert r.ok, r
    import json

    return {int(k) if k.isdigit() else k: v for k, v in json.loads(r.stdout).items()}


def test_only_unix_and_ip_sockets_open_in_the_sandbox():
    out = _probe([*REFUSED, *ALLOWED_SOCKET_FAMILIES])
    for family, name in REFUSED.items():
        assert out[family] == "EAFNOSUPPORT", (name, out[family])
    for family in ALLOWED_SOCKET_FAMILIES:
        assert out[family] == "opened", (family, out[family])
    assert out["pair"] == "x" and out["netlink_pair"] == "EAFNOSUPPORT"


def test_the_refused_families_open_outside_the_sandbox():
    # The control: netlink and packet sockets open on this kernel (as root), so the sandbox's refusal of
    # them is the filter's; AF_VSOCK opens wherever the VM has a vsock device.
    opened = []
    for family in (16, 17, 40):
        try:
            socket.socket(family, socket.SOCK_RAW if family != 40 else socket.SOCK_STREAM).close()
            opened.append(family)
        except OSError:
            pass
    assert 16 in opened, "netlink cannot be opened here at all; the sandbox test would prove nothing"


def test_the_same_families_are_refused_when_the_trainer_is_not_root():
    import os
    import shutil
    import subprocess
    from pathlib import Path

    if os.geteuid() != 0 or not shutil.which("setpriv") or not Path("/usr/bin/python3").exists():
        pytest.skip("needs root (to become nobody with setpriv) and /usr/bin/python3")
    src = str(Path(__file__).resolve().parents[3] / "src" / "grouprl")
    script = (  # the system Python has no pydantic: load the sandbox without grouprl/__init__.py
        f"import sys, types\npkg = types.ModuleType('grouprl')\npkg.__path__ = [{src!r}]\nsys.modules['grouprl'] = pkg\n"
        "from grouprl.rewards.sandbox.runner import run_in_sandbox\n"
        f"r = run_in_sandbox({PROBE % ([40, 16, 17, 38, 1, 2, 10],)!r}, backend='bwrap', python='/usr/bin/python3')\n"
        "print(r.stdout if r.ok else 'FAILED ' + r.stderr[-300:] + str(r.infra_error))\n"
    )
    p = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
        timeout=60,
    )
    if "FAILED" in p.stdout or p.returncode:
        pytest.skip(f"the sandbox does not start as nobody here: {p.stdout[-300:]} {p.stderr[-300:]}")
    import json

    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert [out[str(f)] for f in (40, 16, 17, 38)] == ["EAFNOSUPPORT"] * 4, out
    assert [out[str(f)] for f in (1, 2, 10)] == ["opened"] * 3 and out["pair"] == "x", out
