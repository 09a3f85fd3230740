"""``bench.stack_memory --pages`` (DEC-memory-cow): a forked process's anonymous pages told
apart against its parent's by physical page, with a real fork: those still shared, those
copied on a write, those allocated after the fork."""

from __future__ import annotations

import mmap
import os

import pytest

from bench.stack_memory import PAGE, anonymous_pages, sharing

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="/proc/<pid>/pagemap gives physical pages to root only")


def test_a_forked_process_pages_are_shared_copied_or_new() -> None:
    inherited = mmap.mmap(-1, 64 * PAGE, flags=mmap.MAP_PRIVATE)
    inherited.write(b"z" * (64 * PAGE))  # resident in the parent before the fork
    start = _address(inherited)
    parent = anonymous_pages(os.getpid())  # before the fork: the parent's other threads may
    # map memory after it where the child maps its own (the zygote has no other thread)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: writes 8 of the inherited pages, maps 4 new ones
        try:
            os.close(read_end)
            for i in range(8):
                inherited[i * PAGE] = ord("c")
            fresh = mmap.mmap(-1, 4 * PAGE, flags=mmap.MAP_PRIVATE)
            fresh.write(b"n" * (4 * PAGE))
            mine = anonymous_pages(os.getpid())
            ours = {a: f for a, f in mine.items() if start <= a < start + 64 * PAGE}
            theirs = {a: f for a, f in parent.items() if start <= a < start + 64 * PAGE}
            inside = sharing(ours, theirs)
            base = _address(fresh)
            new = sharing({a: f for a, f in mine.items() if base <= a < base + 4 * PAGE},
                          parent)
            os.write(write_end, f"{inside.shared} {inside.copied} {inside.new} "
                                f"{new.new}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    said = os.read(read_end, 100).decode().split()
    os.close(read_end)
    os.waitpid(pid, 0)
    shared, copied, new_inside, fresh_new = (int(x) for x in said)
    assert (shared, copied, new_inside) == (56, 8, 0)
    assert fresh_new == 4


def _address(buffer: mmap.mmap) -> int:
    import ctypes

    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))
