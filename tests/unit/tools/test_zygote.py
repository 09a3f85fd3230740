"""The zygote's own parts (DEC-stack-zygote), each in a fresh interpreter: what it preloads
starts no thread (it forks only alone), and a process can write a service's command line over
its own. The zygote with the stack's services: tests/e2e/test_stack_zygote.py."""

from __future__ import annotations

import subprocess
import sys

from tools.processes import REPO
from tools.zygote import PRELOAD, argv_bytes, forkable


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_preloaded_modules_start_no_thread() -> None:
    out = _python("from tools.zygote import PRELOAD, preload, threads\n"
                  "import gc, sys\n"
                  "n = preload(PRELOAD)\n"
                  "print(threads(), n, gc.get_freeze_count() > 0, gc.isenabled())")
    threads, modules, frozen, collecting = out.split()
    assert threads == "1"
    assert int(modules) > len(PRELOAD)
    assert frozen == "True" and collecting == "False"


def test_a_command_line_is_written_over_the_processes_own() -> None:
    room = " " * 60
    out = _python("import sys\n"
                  "from tools.zygote import write_command_line\n"
                  "assert write_command_line([sys.executable, '-m', 'clepsydra_store'])\n"
                  "assert not write_command_line(['x' * 10_000])\n"
                  "print(open('/proc/self/cmdline', 'rb').read().rstrip(b'\\0').split(b'\\0'))\n"
                  f"# {room}")
    assert out.strip() == repr([sys.executable.encode(), b"-m", b"clepsydra_store"])


def test_only_python_modules_of_this_interpreter_are_forkable() -> None:
    assert forkable([sys.executable, "-m", "clepsydra_retry"])
    assert not forkable(["redis-server", "--port", "6379"])
    assert not forkable(["/usr/bin/python3.9", "-m", "clepsydra_retry"]) or \
        sys.executable == "/usr/bin/python3.9"
    assert argv_bytes(["a", "bc"]) == b"a\0bc\0"


def test_an_environment_is_written_over_the_processes_own() -> None:
    code = ("import os\n"
            "from tools.zygote import write_environment\n"
            "new = {'CLEPSYDRA_STORE_SHARD_ID': '2', 'PATH': '/bin'}\n"
            "os.environ.clear(); os.environ.update(new)\n"
            "assert write_environment(new)\n"
            "assert not write_environment({'X': 'y' * 100_000})\n"
            "print(open('/proc/self/environ', 'rb').read().rstrip(b'\\0').split(b'\\0'))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "PAD": " " * 200})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr([b"CLEPSYDRA_STORE_SHARD_ID=2", b"PATH=/bin"])


def test_what_two_services_import_after_the_fork_is_preloaded() -> None:
    """DEC-memory-cow: the modules two services imported after the fork (measured with
    ``PYTHONPROFILEIMPORTTIME`` in their logs) are the zygote's, shared."""
    out = _python("import sys\n"
                  "from tools.zygote import PRELOAD, preload\n"
                  "preload(PRELOAD)\n"
                  "print(' '.join(m for m in ('celery.worker.components', 'encodings.latin_1',"
                  " 'clepsydra_core.shards') if m in sys.modules))")
    assert out.split() == ["celery.worker.components", "encodings.latin_1",
                           "clepsydra_core.shards"]
