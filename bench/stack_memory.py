"""The local stack's memory at rest (DEC-memory-at-rest).

    .venv/bin/python -m bench.stack_memory [--settle-s 20] [--separate-beat]
                                           [--gunicorn-masters] [--without-analytics]

Starts ``python -m tools.stack`` of its own (its own CLEPSYDRA_HOME and free ports), waits
``--settle-s`` after `clepsydra: ready`, and prints, for every part (a part's processes summed:
gunicorn's master and worker with ``--gunicorn-masters``, ...; a part is named by its module,
command and flags, e.g. ``scheduler worker --beat``), three figures from
``/proc/<pid>/smaps_rollup``:

- RSS: what ``ps`` shows; pages shared between processes (libpython, a forked worker's pages
  still shared with its master) are counted in each;
- PSS: each shared page divided among the processes sharing it; the parts' PSS add up to what
  the stack really holds;
- USS: the process's private pages, what stopping it would give back.

The cores' time by part over the last 10 s of the settle time is printed too (what the stack
costs at rest: the scheduler's idle polling, beat, the exporter's cycles; ``bench.stack_cpu``),
with the store's requests by operation in that window. ``--set VAR=VALUE`` is given to the
stack's processes.

Totals are given for the core (Redis, store, retry, the scheduler's worker and beat: one
process in ``make run``, two with ``--separate-beat``) and the whole stack (plus the gateway,
the analytics processes, the console and the supervisor). ``--separate-beat`` is passed on
to ``tools.stack``; ``--gunicorn-masters`` runs the store, retry and analytics API as
deployed, each a gunicorn master and its worker (``CLEPSYDRA_SINGLE_PROCESS=false``);
``--without-analytics`` is ``make run-core``'s stack. The zygote the services are forked from
(DEC-stack-zygote) is a part of its own, in the whole stack's total; ``--set
CLEPSYDRA_STACK_FORK=off`` measures the services exec'd instead.

``--pages`` adds where each forked service's private memory comes from (DEC-memory-cow): of
its resident anonymous pages (the C heap, pymalloc's arenas, thread stacks), those it still
shares with the zygote, those it copied from the zygote on a write (copy-on-write: a
reference count, a code object's warm-up counters, an allocation into a free block of the
zygote's) and those it allocated anew; and how many of the zygote's pages 1, 2, ... every
service copied (a page every service copied is held once more by the zygote, for nothing).
It reads the physical page of every virtual page (``/proc/<pid>/pagemap``: root only).
The zygote exits once the stack is ready (DEC-zygote-retires): ``--pages`` keeps it
(``CLEPSYDRA_STACK_KEEP_ZYGOTE=true``), so its figures are those of a stack holding it too;
``--set CLEPSYDRA_STACK_KEEP_ZYGOTE=true`` alone measures the stack with it.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bench.scratch import scratch_dir
from tests.fixtures.stack import RunningStack, descendants, launch_stack, stop_stack
from tools.zygote import KEEP_VAR

CORE = ("redis", "store", "retry", "scheduler worker", "scheduler beat", "scheduler worker --beat")
FIELDS = ("Rss", "Pss", "Private_Clean", "Private_Dirty")


def part_of(argv: list[bytes]) -> str:
    """The stack part a process belongs to, by its command line."""
    text = b" ".join(argv).decode(errors="replace")
    if "redis-server" in text:
        return "redis"
    if "tools.stack" in text:
        return "supervisor"
    if "tools.zygote" in text:
        return "zygote"
    if "tools.host" in text:  # services served by one process (DEC-stack-console-hosted)
        return "+".join(word.removeprefix("clepsydra_") for word in text.split()
                        if word.startswith("clepsydra_"))
    for module in ("clepsydra_store", "clepsydra_retry", "clepsydra_scheduler",
                   "clepsydra_gateway", "clepsydra_analytics", "clepsydra_console"):
        if module in text:
            words = text.split()
            i = words.index(module) if module in words else -1
            rest = words[i + 1:] if i >= 0 else []
            verb = " ".join(rest[:1] + [w for w in rest[1:] if w.startswith("--")])
            return module.removeprefix("clepsydra_") + (f" {verb}" if verb else "")
    return "other"


def memory_by_part(stack: RunningStack) -> dict[str, dict[str, int]]:
    """KiB per part: ``rss``, ``pss``, ``uss`` and ``processes``."""
    parts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pid in [stack.proc.pid, *descendants(stack.proc.pid)]:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        kib = {name: 0 for name in FIELDS}
        for line in rollup.splitlines():
            name, _, rest = line.partition(":")
            if name in kib:
                kib[name] = int(rest.split()[0])
        part = parts[part_of(argv)]
        part["rss"] += kib["Rss"]
        part["pss"] += kib["Pss"]
        part["uss"] += kib["Private_Clean"] + kib["Private_Dirty"]
        part["processes"] += 1
    return {name: dict(values) for name, values in parts.items()}


PAGE = 4096
PRESENT = 1 << 63
PFN_MASK = (1 << 55) - 1


def anonymous_pages(pid: int) -> dict[int, int]:
    """Virtual address -> physical page number of every resident page of ``pid``'s writable
    anonymous mappings (the C heap, pymalloc's arenas, thread stacks). The physical numbers
    read 0 without root (``/proc/<pid>/pagemap``)."""
    pages: dict[int, int] = {}
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in maps:
            fields = line.split()
            name = fields[5] if len(fields) > 5 else ""
            if "w" not in fields[1] or name not in ("", "[heap]", "[stack]"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            pagemap.seek(start // PAGE * 8)
            raw = pagemap.read((end - start) // PAGE * 8)
            for i, (entry,) in enumerate(struct.iter_unpack("<Q", raw)):
                if entry & PRESENT:
                    pages[start + i * PAGE] = entry & PFN_MASK
    return pages


@dataclass
class Sharing:
    """A forked process's resident anonymous pages against its parent's, by page."""

    shared: int = 0
    """Pages it still shares with its parent (the same physical page)."""
    copied: int = 0
    """Pages its parent has at the same address on another physical page: copied on a write."""
    new: int = 0
    """Pages at addresses its parent has no page at: allocated after the fork."""
    copied_at: set[int] = field(default_factory=set)


def sharing(child: dict[int, int], parent: dict[int, int]) -> Sharing:
    """``child``'s pages (:func:`anonymous_pages`) against its ``parent``'s."""
    found = Sharing()
    for address, frame in child.items():
        theirs = parent.get(address)
        if theirs is None:
            found.new += 1
        elif theirs == frame:
            found.shared += 1
        else:
            found.copied += 1
            found.copied_at.add(address)
    return found


def print_pages(stack: RunningStack) -> None:
    """``--pages``: each forked service's anonymous pages against the zygote's."""
    named = {}
    for pid in descendants(stack.proc.pid):
        try:
            named[pid] = part_of(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))
        except (FileNotFoundError, ProcessLookupError):
            continue
    zygote = next((pid for pid, name in named.items() if name == "zygote"), None)
    if zygote is None:
        print("\n--pages: no zygote (the services were exec'd)")
        return
    parent = anonymous_pages(zygote)
    if parent and not any(parent.values()):
        print("\n--pages: /proc/<pid>/pagemap gives no physical pages (not root)")
        return
    mib = PAGE / 2**20
    print(f"\nanonymous pages of each forked service against the zygote's "
          f"({len(parent) * mib:.1f} MiB resident), MiB:")
    print(f"  {'part':<36} {'shared':>7} {'copied':>7} {'new':>7}")
    copies: Counter[int] = Counter()
    services = 0
    for pid, name in sorted(named.items(), key=lambda item: item[1]):
        if name in ("zygote", "supervisor", "redis", "other"):
            continue
        try:
            found = sharing(anonymous_pages(pid), parent)
        except (FileNotFoundError, ProcessLookupError):
            continue
        services += 1
        copies.update(found.copied_at)
        print(f"  {name:<36} {found.shared * mib:>7.1f} {found.copied * mib:>7.1f} "
              f"{found.new * mib:>7.1f}")
    by_count = Counter(copies.values())
    print("  the zygote's pages copied by k services (k: MiB): " + ", ".join(
        f"{k}: {by_count[k] * mib:.1f}" for k in range(1, services + 1)))


def rss_by_part(stack: RunningStack) -> dict[str, int]:
    """Resident memory (KiB) of each part of the stack."""
    return {name: values["rss"] for name, values in memory_by_part(stack).items()}


def print_table(parts: dict[str, dict[str, int]]) -> None:
    width = max(29, *(len(name) for name in parts))
    print(f"{'part':<{width}} {'procs':>5} {'RSS MiB':>8} {'PSS MiB':>8} {'USS MiB':>8}")
    for name in sorted(parts, key=lambda n: (n not in CORE, n)):
        v = parts[name]
        print(f"{name:<{width}} {v['processes']:>5} {v['rss'] / 1024:>8.1f} "
              f"{v['pss'] / 1024:>8.1f} {v['uss'] / 1024:>8.1f}")
    for label, names in (("core", [n for n in parts if n in CORE]), ("whole stack", list(parts))):
        total = {k: sum(parts[n][k] for n in names) for k in ("processes", "rss", "pss", "uss")}
        print(f"{'= ' + label:<{width}} {total['processes']:>5} {total['rss'] / 1024:>8.1f} "
              f"{total['pss'] / 1024:>8.1f} {total['uss'] / 1024:>8.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settle-s", type=float, default=20.0)
    parser.add_argument("--separate-beat", action="store_true",
                        help="the scheduler's beat as a process of its own (tools.stack's flag)")
    parser.add_argument("--gunicorn-masters", action="store_true",
                        help="CLEPSYDRA_SINGLE_PROCESS=false: the one-worker services each a "
                             "gunicorn master and its worker, as deployed")
    parser.add_argument("--without-analytics", action="store_true",
                        help="make run-core's stack: no analytics parts (tools.stack's flag)")
    parser.add_argument("--pages", action="store_true",
                        help="each forked service's anonymous pages: shared with the zygote, "
                             "copied from it, new (root: /proc/<pid>/pagemap)")
    parser.add_argument("--set", action="append", default=[], metavar="VAR=VALUE",
                        help="a setting for the stack's processes; repeatable")
    args = parser.parse_args()
    settings = dict(item.partition("=")[::2] for item in args.set)
    home = scratch_dir("clepsydra-memory-") / "home"
    flags = (*(("--separate-beat",) if args.separate_beat else ()),
             *(("--without-analytics",) if args.without_analytics else ()))
    masters = {"CLEPSYDRA_SINGLE_PROCESS": "false"} if args.gunicorn_masters else {}
    if args.pages:  # the pages are compared with the zygote's: it stays (DEC-zygote-retires)
        settings.setdefault(KEEP_VAR, "true")
    stack = launch_stack(home, "--quiet", *flags, CLEPSYDRA_OTEL_EXPORTER="none", **masters,
                         **settings)
    try:
        from bench.stack_cpu import CpuWindow, store_requests

        window_s = min(10.0, args.settle_s)
        time.sleep(args.settle_s - window_s)
        calls0 = store_requests(stack.store_url)
        with CpuWindow(stack, thread_parts=("scheduler worker --beat",)) as window:
            time.sleep(window_s)
        calls = store_requests(stack.store_url) - calls0
        print(f"the local stack at rest, {args.settle_s:g} s after ready (home {home}):")
        print_table(memory_by_part(stack))
        print(f"\nthe cores' time at rest, the last {window_s:g} s:")
        print(window.table())
        print("  store requests in that window: " + ", ".join(
            f"{op} {n:,}" for op, n in calls.most_common() if n))
        if args.pages:
            print_pages(stack)
    finally:
        stop_stack(stack)
    return 0


if __name__ == "__main__":
    sys.exit(main())
