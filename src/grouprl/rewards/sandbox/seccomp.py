"""A small seccomp-BPF filter for the reward sandbox (handed to ``bwrap --seccomp FD``).

It refuses the system calls that get around the sandbox's other limits, in every mode (root or
not, with or without a memory cgroup):

* ``memfd_create``: anonymous files hold RAM that ``RLIMIT_AS`` does not count (a 512 MB address
  space limit still let a program pin 2 GiB); refused with EPERM.
* new user namespaces: ``unshare``/``clone`` with ``CLONE_NEWUSER`` (EPERM); ``clone3`` passes
  its flags in memory a filter cannot read, so it answers ENOSYS and libc falls back to ``clone``.
  When we are not root, ``bwrap --disable-userns`` closes the same door a second way.
* System V shared memory and message queues (``shmget``, ``msgget``): a segment outlives its
  mapping and a queue holds kernel memory, so neither counts against ``RLIMIT_AS`` (a 256 MB
  limit still let a program hold 1.6 GB in detached segments); refused with EPERM.
* kernel attack surface no reward program needs: ``io_uring_*``, ``bpf``, ``perf_event_open``,
  ``userfaultfd``, the key-ring calls (EPERM).

* socket families other than ``AF_UNIX``, ``AF_INET`` and ``AF_INET6`` (an allow-list for ``socket``
  and ``socketpair``; EAFNOSUPPORT, as for a family the kernel lacks): the network namespace covers
  IP only, so ``AF_VSOCK`` would still reach the host's and the hypervisor's vsock services, and
  netlink, packet, ``AF_ALG`` and the rest are kernel surface no reward program needs.

System calls of another ABI (32-bit ``int 0x80`` on x86-64, or x32 numbers) kill the process:
nothing in the sandbox uses them and the filter would not understand their numbers.
The filter is hand-assembled (no libseccomp needed); machines other than x86-64 and aarch64 get
no filter, and ``filter_bytes()`` says so by returning None.
"""

from __future__ import annotations

import errno
import platform
import struct

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
_NR, _ARCH, _ARG0_LOW = 0, 4, 16
_LD_W_ABS, _JEQ_K, _JSET_K, _JGE_K, _RET_K = 0x20, 0x15, 0x45, 0x35, 0x06
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
CLONE_NEWUSER = 0x10000000
X32_BIT = 0x40000000

# (audit arch, syscall numbers) per machine. Numbers: x86-64 from arch/x86/entry/syscalls/
# syscall_64.tbl, aarch64 from include/uapi/asm-generic/unistd.h.
_ARCHES = {
    "x86_64": (
        0xC000003E,
        dict(
            memfd_create=319,
            userfaultfd=323,
            bpf=321,
            perf_event_open=298,
            keyctl=250,
            add_key=248,
            request_key=249,
            io_uring_setup=425,
            io_uring_enter=426,
            io_uring_register=427,
            unshare=272,
            clone=56,
            clone3=435,
            shmget=29,
            msgget=68,
            ptrace=101,
            process_vm_readv=310,
            process_vm_writev=311,
            socket=41,
            socketpair=53,
        ),
    ),
    "aarch64": (
        0xC00000B7,
        dict(
            memfd_create=279,
            userfaultfd=282,
            bpf=280,
            perf_event_open=241,
            keyctl=219,
            add_key=217,
            request_key=218,
            io_uring_setup=425,
            io_uring_enter=426,
            io_uring_register=427,
            unshare=97,
            clone=220,
            clone3=435,
            shmget=194,
            msgget=186,
            ptrace=117,
            process_vm_readv=270,
            process_vm_writev=271,
            socket=198,
            socketpair=199,
        ),
    ),
}
REFUSED = (
    "memfd_create",
    "userfaultfd",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "shmget",
    "msgget",
    # no reading or steering another process of the sandbox (as non-root, bwrap's pid 1)
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
)
ALLOWED_SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_bytes(machine: str | None = None) -> bytes | None:
    """The compiled filter (``struct sock_filter[]``) for this machine, or None if unsupported."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        return None
    audit_arch, nr = _ARCHES[machine]
    eperm, enosys = _RET_ERRNO | errno.EPERM, _RET_ERRNO | errno.ENOSYS
    prog = [_op(_LD_W_ABS, _ARCH), _op(_JEQ_K, audit_arch, 1, 0), _op(_RET_K, _RET_KILL_PROCESS), _op(_LD_W_ABS, _NR)]
    if machine == "x86_64":
        prog += [_op(_JGE_K, X32_BIT, 0, 1), _op(_RET_K, _RET_KILL_PROCESS)]
    for name in REFUSED:
        prog += [_op(_JEQ_K, nr[name], 0, 1), _op(_RET_K, eperm)]
    prog += [_op(_JEQ_K, nr["clone3"], 0, 1), _op(_RET_K, enosys)]
    # socket(family, ...) / socketpair(family, ...): only the allowed families.
    n = len(ALLOWED_SOCKET_FAMILIES)
    for name in ("socket", "socketpair"):
        prog += [_op(_JEQ_K, nr[name], 0, n + 3), _op(_LD_W_ABS, _ARG0_LOW)]
        prog += [_op(_JEQ_K, family, n - i, 0) for i, family in enumerate(ALLOWED_SOCKET_FAMILIES)]
        prog += [_op(_RET_K, _RET_ERRNO | errno.EAFNOSUPPORT), _op(_RET_K, _RET_ALLOW)]
    # unshare(flags) / clone(flags, ...): refuse only when CLONE_NEWUSER is asked for.
    for name in ("unshare", "clone"):
        prog += [
            _op(_JEQ_K, nr[name], 0, 4),
            _op(_LD_W_ABS, _ARG0_LOW),
            _op(_JSET_K, CLONE_NEWUSER, 0, 1),
            _op(_RET_K, eperm),
            _op(_RET_K, _RET_ALLOW),
        ]
    prog.append(_op(_RET_K, _RET_ALLOW))
    return b"".join(prog)
