"""``bench.stack_memory --pages`` (DEC-memory-cow): a forked process's anonymous pages told
apart against its parent's by physical page, with a real fork: those still shared, those
copied on a write, those allocated after the fork. The parent is a fresh interpreter with no
other thread (as the zygote is): a thread mapping memory after the fork would put pages of
the parent's where the child maps its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tools.processes import REPO

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="/proc/<pid>/pagemap gives physical pages to root only")

FORK = '''
import ctypes, mmap, os
from bench.stack_memory import PAGE, anonymous_pages, sharing

def address(buffer):
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))

inherited = mmap.mmap(-1, 64 * PAGE, flags=mmap.MAP_PRIVATE)
inherited.write(b"z" * (64 * PAGE))  # resident in the parent before the fork
start = address(inherited)
said_r, said_w = os.pipe()  # the child: "I wrote"
read_r, read_w = os.pipe()  # the parent: "I read"
pid = os.fork()
if pid == 0:  # the child: writes 8 of the inherited pages, maps 4 new ones
    try:
        for i in range(8):
            inherited[i * PAGE] = ord("c")
        fresh = mmap.mmap(-1, 4 * PAGE, flags=mmap.MAP_PRIVATE)
        fresh.write(b"n" * (4 * PAGE))
        os.write(said_w, b"x")
        os.read(read_r, 1)  # until the parent has read the pages
    finally:
        os._exit(0)
os.read(said_r, 1)
parent, child = anonymous_pages(os.getpid()), anonymous_pages(pid)
os.write(read_w, b"x")
os.waitpid(pid, 0)
inside = sharing({a: f for a, f in child.items() if start <= a < start + 64 * PAGE},
                 {a: f for a, f in parent.items() if start <= a < start + 64 * PAGE})
whole = sharing(child, parent)
print(inside.shared, inside.copied, inside.new, whole.new)
'''


def test_a_forked_process_pages_are_shared_copied_or_new() -> None:
    done = subprocess.run([sys.executable, "-c", FORK], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    shared, copied, new_inside, new = (int(x) for x in done.stdout.split())
    assert (shared, copied, new_inside) == (56, 8, 0)
    assert new >= 4  # the 4 pages mapped after the fork, and what the child's own work took
