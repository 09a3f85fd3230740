"""tools/pytest_plugin.py over a small tree of its own, run by pytest in a subprocess: a test
without its suite's marker stops the suite, a test that ``-k`` leaves out does not, and a suite
that selects nothing passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

MARKED = '''
import pytest

pytestmark = pytest.mark.faults


def test_one():
    pass


def test_two():
    pass
'''


def _pytest(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tree / "pytest.ini").write_text("[pytest]\nmarkers =\n    faults: the fault matrix\n")
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tools.pytest_plugin", "-q",
                           "-p", "no:cacheprovider", "-m", "faults", "tests/faults", *args],
                          cwd=tree, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "tests" / "faults").mkdir(parents=True)
    (tmp_path / "tests" / "faults" / "test_marked.py").write_text(MARKED)
    return tmp_path


def test_a_test_without_its_suites_marker_stops_the_suite_naming_it(tree: Path) -> None:
    (tree / "tests" / "faults" / "test_forgot.py").write_text("def test_forgot():\n    pass\n")
    run = _pytest(tree)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert "tests/faults/test_forgot.py::test_forgot" in run.stderr
    assert "lack @pytest.mark.faults" in run.stderr


def test_tests_left_out_by_k_are_not_taken_for_unmarked(tree: Path) -> None:
    # CONTRIBUTING.md's `tox -e faults -- -k ...`: the marked tests -k leaves out are fine
    run = _pytest(tree, "-k", "one")
    assert run.returncode == pytest.ExitCode.OK, run.stdout + run.stderr
    assert "1 passed, 1 deselected" in run.stdout


def test_a_suite_that_selects_nothing_passes_and_says_so(tree: Path) -> None:
    run = _pytest(tree, "-k", "nothing_matches_this")
    assert run.returncode == pytest.ExitCode.OK, run.stdout + run.stderr
    assert "no tests selected in this suite: passing" in run.stdout
