"""The seccomp filter ``run_python``'s sandbox loads (bubblewrap's ``--seccomp FD``).

bubblewrap applies a compiled classic-BPF program (``struct sock_filter[]``) to the sandboxed
program right before ``exec``. It is written out here by hand, not generated with libseccomp,
because libseccomp's Python bindings are not on PyPI: Debian's ``python3-seccomp`` is built
for Debian's own interpreter and does not import in a venv of another Python (this project's
is pyenv 3.11), and a C helper would need a compiler at install time. The program is short
and checked by ``tests/security/test_contained.py`` (numbers against the kernel headers where
present, and every rule against the real kernel through bwrap).

What it does, in order:

1. The architecture in ``seccomp_data.arch`` must be this process's (x86_64 or aarch64):
   any other (the i386 ``int 0x80`` entry on x86_64, whose numbers differ) kills the process.
   On x86_64, numbers of the x32 ABI (bit 30 set) are refused with ``EPERM``.
2. ``socket`` and ``socketpair``: only ``AF_UNIX``, ``AF_INET`` and ``AF_INET6``; any other
   family (``AF_VSOCK``, ``AF_NETLINK``, ``AF_PACKET``, ``AF_ALG``, ``AF_BLUETOOTH``, ...)
   fails with ``EAFNOSUPPORT``, as on a kernel built without it. The network namespace has
   no route out, so the three allowed families reach only the sandbox's own loopback.
3. ``ioctl`` with ``TIOCSTI`` / ``TIOCLINUX`` (typing into a terminal): ``EPERM``.
   ``personality`` only with the values Docker's default seccomp profile allows
   (``PERSONALITY_ALLOWED``: ``PER_LINUX``, ``PER_LINUX32``, ``UNAME26`` with either, and the
   ``0xffffffff`` query); any other flag (``ADDR_NO_RANDOMIZE``, ``READ_IMPLIES_EXEC``,
   ``ADDR_COMPAT_LAYOUT``, ``MMAP_PAGE_ZERO``, ...), which would switch off address-space
   randomisation or make data executable for the program's children, is ``EPERM``. The
   kernel reads the argument as an ``unsigned int``, so comparing its low 32 bits is exact.
4. ``EPERM`` for every call in ``DENIED``: the kernel keyring (``keyctl``, ``add_key``,
   ``request_key``: the program has no keyring at all, so it can neither read the caller's
   keys nor leave keys behind), process inspection (``ptrace``, ``process_vm_readv/writev``,
   ``kcmp``, ``pidfd_getfd``), kernel attack surface that no program of a tool call needs
   (``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*``), file handles
   (``open_by_handle_at``, ``name_to_handle_at``), namespaces and mounts (``unshare``,
   ``setns``, ``mount`` and the new mount API, ``umount2``, ``pivot_root``, ``chroot``),
   modules, ``kexec``, ``reboot``, swap, clocks, ``syslog``, ``acct``, ``quotactl``,
   ``vhangup`` and, on x86_64, ``modify_ldt`` (the local descriptor table: a kernel attack
   surface Docker's default profile also denies), ``iopl`` / ``ioperm`` and the obsolete
   calls.
5. Everything else is allowed.
"""

from __future__ import annotations

import os
import platform
import struct

__all__ = ["DENIED", "PERSONALITY_ALLOWED", "filter_program", "supported"]

# classic BPF opcodes (linux/filter.h, linux/bpf_common.h)
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

# linux/seccomp.h
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# offsets in struct seccomp_data (little-endian: an argument's low 32 bits come first)
_NR, _ARCH = 0, 4


def _arg(index: int) -> int:
    return 16 + 8 * index


_EPERM, _EAFNOSUPPORT = 1, 97
_AF_UNIX, _AF_INET, _AF_INET6 = 1, 2, 10
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_X32_BIT = 0x40000000

#: the only ``personality`` arguments allowed (Docker's default profile: PER_LINUX,
#: PER_LINUX32, UNAME26, UNAME26 | PER_LINUX32, and 0xffffffff, which only queries)
PERSONALITY_ALLOWED: tuple[int, ...] = (0x0, 0x0008, 0x20000, 0x20008, 0xFFFFFFFF)

#: the calls refused with EPERM, by name
DENIED: tuple[str, ...] = (
    "keyctl", "add_key", "request_key",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "open_by_handle_at", "name_to_handle_at",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "syslog", "acct", "quotactl", "vhangup", "lookup_dcookie", "fanotify_init",
    "modify_ldt", "iopl", "ioperm", "create_module", "uselib", "_sysctl", "nfsservctl",
)  # fmt: skip

#: (audit arch, system call numbers) per machine; numbers from the kernel's unistd headers
#: (x86_64: asm/unistd_64.h; aarch64: asm-generic/unistd.h). A name missing from an
#: architecture's table does not exist there.
_TABLES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "socket": 41, "socketpair": 53, "ioctl": 16, "personality": 135, "modify_ldt": 154,
            "keyctl": 250, "add_key": 248, "request_key": 249, "ptrace": 101,
            "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
            "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
            "io_uring_enter": 426, "io_uring_register": 427, "open_by_handle_at": 304,
            "name_to_handle_at": 303, "unshare": 272, "setns": 308, "mount": 165,
            "umount2": 166, "pivot_root": 155, "chroot": 161, "open_tree": 428,
            "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
            "mount_setattr": 442, "init_module": 175, "finit_module": 313,
            "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320, "reboot": 169,
            "swapon": 167, "swapoff": 168, "settimeofday": 164, "clock_settime": 227,
            "clock_adjtime": 305, "adjtimex": 159, "syslog": 103, "acct": 163, "quotactl": 179,
            "vhangup": 153, "lookup_dcookie": 212, "fanotify_init": 300, "iopl": 172,
            "ioperm": 173, "create_module": 174, "uselib": 134, "_sysctl": 156,
            "nfsservctl": 180,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "socket": 198, "socketpair": 199, "ioctl": 29, "personality": 92,
            "keyctl": 219, "add_key": 217, "request_key": 218, "ptrace": 117,
            "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "pidfd_getfd": 438,
            "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
            "io_uring_enter": 426, "io_uring_register": 427, "open_by_handle_at": 265,
            "name_to_handle_at": 264, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39,
            "pivot_root": 41, "chroot": 51, "open_tree": 428, "move_mount": 429, "fsopen": 430,
            "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
            "init_module": 105, "finit_module": 273, "delete_module": 106, "kexec_load": 104,
            "kexec_file_load": 294, "reboot": 142, "swapon": 224, "swapoff": 225,
            "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
            "syslog": 116, "acct": 89, "quotactl": 60, "vhangup": 58, "lookup_dcookie": 18,
            "fanotify_init": 262, "nfsservctl": 42,
        },
    ),
}  # fmt: skip


def _machine() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def supported(machine: str | None = None) -> bool:
    """Whether a filter exists for this machine (Linux on x86_64 or aarch64)."""
    return (machine or _machine()) in _TABLES and os.name == "posix"


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def filter_program(machine: str | None = None) -> bytes:
    """The compiled filter (``struct sock_filter`` array) for ``machine`` (default: this
    one); ``ValueError`` for a machine without a table."""
    machine = machine or _machine()
    if machine not in _TABLES:
        raise ValueError(f"no seccomp filter for machine {machine!r}")
    arch, numbers = _TABLES[machine]
    out = [
        _insn(_LD_W_ABS, _ARCH),
        _insn(_JEQ_K, arch, jt=1, jf=0),
        _insn(_RET_K, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, _NR),
    ]
    if machine == "x86_64":
        out += [_insn(_JGE_K, _X32_BIT, jt=0, jf=1), _insn(_RET_K, _RET_ERRNO | _EPERM)]
    for name in ("socket", "socketpair"):  # 7 instructions each; A holds nr again after
        out += [
            _insn(_JEQ_K, numbers[name], jt=0, jf=6),
            _insn(_LD_W_ABS, _arg(0)),
            _insn(_JEQ_K, _AF_UNIX, jt=2, jf=0),
            _insn(_JEQ_K, _AF_INET, jt=1, jf=0),
            _insn(_JEQ_K, _AF_INET6, jt=0, jf=1),
            _insn(_RET_K, _RET_ALLOW),
            _insn(_RET_K, _RET_ERRNO | _EAFNOSUPPORT),
        ]
    out += [
        _insn(_JEQ_K, numbers["ioctl"], jt=0, jf=5),
        _insn(_LD_W_ABS, _arg(1)),
        _insn(_JEQ_K, _TIOCSTI, jt=1, jf=0),
        _insn(_JEQ_K, _TIOCLINUX, jt=0, jf=1),
        _insn(_RET_K, _RET_ERRNO | _EPERM),
        _insn(_RET_K, _RET_ALLOW),
    ]
    allowed = PERSONALITY_ALLOWED
    out += [_insn(_JEQ_K, numbers["personality"], jt=0, jf=len(allowed) + 3)]
    out += [_insn(_LD_W_ABS, _arg(0))]
    for i, value in enumerate(allowed):  # a match jumps over the rest and the EPERM
        out += [_insn(_JEQ_K, value, jt=len(allowed) - i, jf=0)]
    out += [_insn(_RET_K, _RET_ERRNO | _EPERM), _insn(_RET_K, _RET_ALLOW)]
    out += [_insn(_LD_W_ABS, _NR)]  # A holds nr again for the deny list
    for name in DENIED:
        if name in numbers:
            out += [_insn(_JEQ_K, numbers[name], jt=0, jf=1), _insn(_RET_K, _RET_ERRNO | _EPERM)]
    out.append(_insn(_RET_K, _RET_ALLOW))
    return b"".join(out)
