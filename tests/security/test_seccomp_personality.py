"""Issue 36, item 6: the sandbox's seccomp filter denies ``modify_ldt`` and lets
``personality`` through only with the values Docker's default profile allows.

Two layers: the compiled program run by a small classic-BPF interpreter (no kernel needed,
so it runs everywhere), and the real kernel through bwrap (skipped where bwrap is unusable).
Both failed on the filter before issue 36 (modify_ldt and every personality flag allowed).
"""

from __future__ import annotations

import errno
import os
import struct
import textwrap

import pytest

from orchenv.envs.puppeteer import seccomp
from orchenv.envs.puppeteer.tools import run_python, sandbox_problem

PROBLEM = sandbox_problem()
needs_bwrap = pytest.mark.skipif(PROBLEM is not None, reason=f"bwrap unusable here: {PROBLEM}")

ALLOW, KILL = 0x7FFF0000, 0x80000000
EPERM_RET = 0x00050000 | errno.EPERM
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# personality flags outside Docker's list: ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC,
# ADDR_COMPAT_LAYOUT, MMAP_PAGE_ZERO, ADDR_LIMIT_32BIT, PER_BSD, and those with UNAME26
REFUSED_PERSONAS = (0x0040000, 0x0400000, 0x0200000, 0x0100000, 0x0800000, 0x0006, 0x60000)


def run_filter(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """What the filter returns for one call (a classic-BPF interpreter for the opcodes the
    filter uses: ld w abs, jeq k, jge k, ret k)."""
    data = struct.pack("<iI Q", nr, arch, 0) + b"".join(
        struct.pack("<Q", a & 0xFFFFFFFFFFFFFFFF) for a in (*args, 0, 0, 0, 0, 0, 0)[:6]
    )
    insns = [struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    for _ in range(len(insns) + 1):
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == 0x15:
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x35:
            pc += 1 + (jt if acc >= k else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"opcode {code:#x} not interpreted")
    raise AssertionError("the program ran off its end")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_program_allows_only_dockers_personalities(machine: str) -> None:
    program = seccomp.filter_program(machine)
    numbers = seccomp._TABLES[machine][1]
    arch = ARCH[machine]
    for value in seccomp.PERSONALITY_ALLOWED:
        assert run_filter(program, numbers["personality"], arch, (value,)) == ALLOW, hex(value)
    for value in REFUSED_PERSONAS:
        assert run_filter(program, numbers["personality"], arch, (value,)) == EPERM_RET, value
    # the kernel reads an unsigned int: the upper 32 bits do not make a refused value pass
    assert run_filter(program, numbers["personality"], arch, (1 << 32 | 0x40000,)) == EPERM_RET
    # the rest of the filter still works after the new block
    assert run_filter(program, numbers["socket"], arch, (40,)) == 0x00050000 | errno.EAFNOSUPPORT
    assert run_filter(program, numbers["socket"], arch, (2,)) == ALLOW
    assert run_filter(program, numbers["ptrace"], arch) == EPERM_RET
    assert run_filter(program, numbers["keyctl"], arch) == EPERM_RET
    assert run_filter(program, 0, arch) == ALLOW  # read / io_setup
    assert run_filter(program, 0, 0x40000003) == KILL  # i386


def test_the_program_denies_modify_ldt_on_x86_64() -> None:
    program = seccomp.filter_program("x86_64")
    assert "modify_ldt" in seccomp.DENIED
    assert run_filter(program, 154, ARCH["x86_64"], (0, 0, 16)) == EPERM_RET
    assert "modify_ldt" not in seccomp._TABLES["aarch64"][1]  # no such call there


@needs_bwrap
def test_the_kernel_refuses_modify_ldt_and_odd_personalities() -> None:
    code = f"""
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    x86 = os.uname().machine == "x86_64"
    PERS = 135 if x86 else 92
    for value in {list(seccomp.PERSONALITY_ALLOWED) + list(REFUSED_PERSONAS)!r}:
        rc = libc.syscall(PERS, ctypes.c_ulong(value))
        print("personality", value, 0 if rc >= 0 else ctypes.get_errno())
    if x86:
        buf = ctypes.create_string_buffer(16)
        rc = libc.syscall(154, 0, buf, 16)
        print("modify_ldt", 0, 0 if rc >= 0 else ctypes.get_errno())
    """
    result = run_python(textwrap.dedent(code), timeout_s=10)
    assert result.ok, result
    got = {}
    for line in result.output.splitlines():
        name, value, err = line.split()
        got[(name, int(value))] = int(err)
    for value in seccomp.PERSONALITY_ALLOWED:
        assert got[("personality", value)] == 0, (value, result.output)
    for value in REFUSED_PERSONAS:
        assert got[("personality", value)] == errno.EPERM, (value, result.output)
    if os.uname().machine == "x86_64":
        assert got[("modify_ldt", 0)] == errno.EPERM, result.output


def test_interpreter_reads_arguments_little_endian() -> None:
    """The interpreter itself: an argument's low word is at 16 + 8 * index."""
    prog = struct.pack("<HBBI", 0x20, 0, 0, 16) + struct.pack("<HBBI", 0x15, 0, 1, 7)
    prog += struct.pack("<HBBI", 0x06, 0, 0, 1) + struct.pack("<HBBI", 0x06, 0, 0, 2)
    assert run_filter(prog, 0, 0, (7,)) == 1 and run_filter(prog, 0, 0, (8,)) == 2
