"""Where the cores' time goes while a bench runs against the whole local stack:
CPU seconds by process over a window, read from ``/proc/<pid>/stat`` (user + system of every
thread), and py-spy profiles of the stack's Python processes summed by function.

    with CpuWindow(stack, {"producer": os.getpid()}) as window:
        ... the load ...
    print(window.table())

Each of the stack's processes is named by its part (``bench.stack_memory.part_of``: ``store``,
``scheduler worker --beat``, ``analytics serve --schedule --export``, ``redis``, ...); the
bench's own processes are named by the caller; everything else on the machine (other helpers'
test runs on a shared machine) is summed as ``(rest of the machine)`` from ``/proc/stat``, so a
figure always says what else ran beside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from bench.stack_memory import part_of
from tests.fixtures.stack import RunningStack, descendants

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
REST = "(rest of the machine)"


def process_cpu(pid: int) -> tuple[float, float] | None:
    """(user, system) CPU seconds of a process so far, every thread; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[11]) * TICK_S, int(fields[12]) * TICK_S


def thread_cpu(pid: int) -> dict[int, tuple[float, float]]:
    """tid -> (user, system) CPU seconds so far of every thread of a process."""
    found: dict[int, tuple[float, float]] = {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return found
    for tid in tids:
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        found[tid] = (int(fields[11]) * TICK_S, int(fields[12]) * TICK_S)
    return found


def machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine so far (every core; idle and iowait left out)."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(v) for v in first]
    busy = sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
    return busy * TICK_S


def stack_processes(stack: RunningStack) -> dict[int, str]:
    """pid -> part of every process of the stack (the supervisor included)."""
    named: dict[int, str] = {}
    for pid in [stack.proc.pid, *descendants(stack.proc.pid)]:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        named[pid] = part_of(argv)
    return named


def store_requests(store_url: str) -> Counter[str]:
    """The store's requests so far by operation (``clepsydra_store_requests_total``)."""
    raw = urllib.request.urlopen(store_url + "/metrics", timeout=10).read().decode()
    calls: Counter[str] = Counter()
    for line in raw.splitlines():
        if line.startswith("clepsydra_store_requests_total{"):
            operation = line.split('operation="', 1)[1].split('"', 1)[0]
            calls[operation] += int(float(line.rsplit(" ", 1)[1]))
    return calls


@dataclass
class CpuWindow:
    """CPU seconds by process between ``start()`` and ``stop()`` (or a ``with`` block)."""

    stack: RunningStack | None
    own: Mapping[str, int | Iterable[int]] = field(default_factory=dict)
    """The bench's own processes by name (a name may stand for several pids)."""
    elapsed_s: float = 0.0
    used: dict[str, tuple[float, float]] = field(default_factory=dict)
    """name -> (user, system) seconds in the window."""
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    thread_parts: tuple[str, ...] = ()
    """Parts whose threads are also measured one by one (``threads``)."""
    threads: dict[str, dict[int, tuple[float, float]]] = field(default_factory=dict)
    """part -> tid -> (user, system) seconds in the window."""
    _before: dict[int, tuple[str, float, float]] = field(default_factory=dict)
    thread_names: dict[str, dict[int, str]] = field(default_factory=dict)
    """part -> tid -> the thread's name (from a py-spy profile of the part, when one ran)."""
    _threads_before: dict[int, dict[int, tuple[float, float]]] = field(default_factory=dict)
    _t0: float = 0.0
    _machine0: float = 0.0

    def _named(self) -> dict[int, str]:
        named = stack_processes(self.stack) if self.stack is not None else {}
        for name, pids in self.own.items():
            for pid in ([pids] if isinstance(pids, int) else pids):
                named[pid] = name
        return named

    def start(self) -> CpuWindow:
        self._before = {}
        for pid, name in self._named().items():
            cpu = process_cpu(pid)
            if cpu is not None:
                self._before[pid] = (name, *cpu)
        self._threads_before = {pid: thread_cpu(pid) for pid, name in self._named().items()
                                if name in self.thread_parts}
        self._machine0 = machine_cpu_s()
        self._t0 = time.monotonic()
        return self

    def stop(self) -> CpuWindow:
        self.elapsed_s = time.monotonic() - self._t0
        machine = machine_cpu_s() - self._machine0
        used: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for pid, name in self._named().items():
            cpu = process_cpu(pid)
            if cpu is None:
                continue
            _, user0, sys0 = self._before.get(pid, (name, 0.0, 0.0))
            used[name][0] += cpu[0] - user0
            used[name][1] += cpu[1] - sys0
        self.threads = {}
        for pid, name in self._named().items():
            if pid in self._threads_before:
                before = self._threads_before[pid]
                self.threads[name] = {
                    tid: (u - before.get(tid, (0.0, 0.0))[0], s - before.get(tid, (0.0, 0.0))[1])
                    for tid, (u, s) in thread_cpu(pid).items()}
        ours = sum(u + s for u, s in used.values())
        used[REST] = [max(machine - ours, 0.0), 0.0]
        self.used = {name: (u, s) for name, (u, s) in used.items()}
        self.load = os.getloadavg()
        return self

    def __enter__(self) -> CpuWindow:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def seconds(self, name: str) -> float:
        """user + system seconds of a part (or one of the bench's own names) in the window;
        a part's prefix (``scheduler``) sums every part it starts."""
        return sum(u + s for n, (u, s) in self.used.items()
                   if n == name or n.startswith(name + " "))

    def share(self, name: str) -> float:
        """A part's CPU as a share of one core over the window."""
        return self.seconds(name) / self.elapsed_s if self.elapsed_s else 0.0

    def table(self, per: tuple[str, int] | None = None) -> str:
        """One line per process: share of a core, user/system seconds and, with ``per``
        (what, count), µs of CPU per unit of work."""
        head = f"  {'process':<36} {'% core':>7} {'user s':>7} {'sys s':>6}"
        if per:
            head += f" {'us/' + per[0]:>12}"
        lines = [head]
        order = sorted(self.used, key=lambda n: (n == REST, -sum(self.used[n])))
        for name in order:
            u, s = self.used[name]
            if u + s < 0.005 and name != REST:
                continue
            line = f"  {name:<36} {100 * (u + s) / self.elapsed_s:>6.1f}% {u:>7.2f} {s:>6.2f}"
            if per and per[1]:
                line += f" {1e6 * (u + s) / per[1]:>12,.1f}"
            lines.append(line)
        for part, by_tid in self.threads.items():
            busy = sorted(by_tid.items(), key=lambda kv: -sum(kv[1]))
            names = self.thread_names.get(part, {})
            lines.append(f"    {part}'s threads: " + ", ".join(
                f"{names.get(tid, tid)} {100 * (u + s) / self.elapsed_s:.1f}%"
                for tid, (u, s) in busy if u + s >= 0.005))
        lines.append(f"  window {self.elapsed_s:.1f} s, load average "
                     f"{self.load[0]:.2f} {self.load[1]:.2f} {self.load[2]:.2f}, "
                     f"{os.cpu_count()} cores")
        return "\n".join(lines)


# ---- py-spy --------------------------------------------------------------------------------

def py_spy() -> str | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return spy if os.access(spy, os.X_OK) else None


@dataclass
class Profiles:
    """py-spy ``record`` of several processes at once, each summed by function afterwards."""

    pids: Mapping[str, int]
    seconds: float
    out_dir: Path
    rate: int = 200
    gil: bool = False
    """Only the thread holding the interpreter's lock is sampled (py-spy ``--gil``): where a
    process's Python CPU goes when its threads wait on one another for the lock."""
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self) -> Profiles:
        spy = py_spy()
        if spy is None:
            print("py-spy not found (pip install -r requirements/bench.txt): no profiles",
                  file=sys.stderr)
            return self
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for name, pid in self.pids.items():
            self._procs[name] = subprocess.Popen(
                [spy, "record", "--pid", str(pid), "--format", "raw", "--full-filenames",
                 "--threads", "--rate", str(self.rate), "--duration", str(int(self.seconds)),
                 "--nonblocking", *(["--gil"] if self.gil else []),
                 "--output", str(self._path(name))],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def _path(self, name: str) -> Path:
        return self.out_dir / (name.replace(" ", "_").replace("/", "_") + ".txt")

    def wait(self) -> dict[str, Profile]:
        for proc in self._procs.values():
            try:
                proc.wait(self.seconds + 60)
            except subprocess.TimeoutExpired:
                proc.kill()
        return {name: Profile.read(self._path(name)) for name in self._procs}


IDLE_LEAVES = ("wait (threading.py", "select (selectors.py", "poll (selectors.py",
               "_worker (concurrent", "get (queue.py", "acquire", "sleep", "epoll",
               "accept (socket.py", "readline (socket.py", "read (socket.py",
               "_read_from_socket", "Connection._recv (clepsydra_core", "wait (clepsydra")
"""Leaves of a thread waiting (py-spy records a thread as active while it is in a system call
that releases the interpreter's lock, e.g. a blocking ``recv``); their samples are counted
apart as waiting. A spin (``select`` with no timeout, a non-blocking ``recv`` in a loop) has
the same leaves: the per-thread CPU of :class:`CpuWindow` is the measure of time spent, the
profile says where the rest of it went."""


@dataclass
class Profile:
    """One process's samples: by thread, by function (self and inclusive)."""

    samples: int = 0
    waiting: int = 0
    self_by_function: Counter[str] = field(default_factory=Counter)
    inclusive_by_function: Counter[str] = field(default_factory=Counter)
    by_thread: Counter[str] = field(default_factory=Counter)
    thread_names: dict[int, str] = field(default_factory=dict)
    """tid -> the thread's name, as py-spy saw them."""

    @classmethod
    def read(cls, path: Path) -> Profile:
        profile = cls()
        if not path.exists():
            return profile
        for line in path.read_text().splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = stack.split(";")
            thread = frames[0] if frames[0].startswith(("thread", "process")) else "?"
            if thread.startswith("thread (") and "): " in thread:
                tid_text, _, name = thread[len("thread ("):].partition("): ")
                if tid_text.isdigit():
                    profile.thread_names[int(tid_text)] = name
            frames = [f for f in frames if not f.startswith(("thread", "process"))]
            if not frames:
                continue
            profile.samples += count
            if any(mark in _short(frames[-1]) for mark in IDLE_LEAVES):
                profile.waiting += count
                continue
            profile.by_thread[thread] += count
            profile.self_by_function[_short(frames[-1])] += count
            for name in {_short(f) for f in frames}:
                profile.inclusive_by_function[name] += count
        return profile

    @property
    def busy(self) -> int:
        return self.samples - self.waiting

    def top(self, n: int = 12, *, inclusive: bool = False,
            only: tuple[str, ...] = ()) -> list[tuple[str, float]]:
        """The ``n`` functions with the most busy samples, as shares of the busy samples;
        ``only``: functions whose file holds one of these markers."""
        counter = self.inclusive_by_function if inclusive else self.self_by_function
        busy = self.busy or 1
        rows = [(name, 100.0 * count / busy) for name, count in counter.most_common()
                if not only or any(mark in name for mark in only)]
        return rows[:n]


def _short(frame: str) -> str:
    """``func (path/to/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py)``."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/src/", "lib/python3.11/"):
        if marker in path:
            path = path.rsplit(marker, 1)[1]
            break
    return f"{name} ({path})"
