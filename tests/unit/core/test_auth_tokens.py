"""The tokens file (issue 16, "Access control"): digests only on disk, a token added or revoked
is picked up without a restart, a broken edit keeps the last good tokens, an unwritable file
(a Kubernetes Secret) is said so."""

from __future__ import annotations

from pathlib import Path

import pytest

from clepsydra_core.auth import BOOTSTRAP_ADMIN, Role
from clepsydra_core.auth_tokens import (
    TokensFileReadOnly,
    TokenTable,
    create_token,
    read_entries,
    revoke_token,
)
from clepsydra_core.errors import ValidationError


def test_file_holds_digests_never_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    entry, token = create_token(path, "orders-app", Role.PRODUCER, topics=("orders-*",))
    text = path.read_text()
    assert token not in text and entry.digest in text
    assert read_entries(path) == [entry]
    assert "sha256" not in entry.describe()
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_names_are_unique(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    create_token(path, "a", Role.ADMIN)
    with pytest.raises(ValidationError, match="exists"):
        create_token(path, "a", Role.ADMIN)


def test_a_change_is_picked_up_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    _, first = create_token(path, "first", Role.PRODUCER, topics=("*",))
    table = TokenTable(path, check_every_s=0.0)
    assert table.lookup(first) is not None
    _, second = create_token(path, "second", Role.CONSUMER, topics=("t",), groups=("g",))
    found = table.lookup(second)
    assert found is not None and found.name == "second" and found.groups == ("g",)
    assert revoke_token(path, "first")
    assert table.lookup(first) is None  # also out of the by-value cache


def test_checks_the_file_at_most_every_interval(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    create_token(path, "first", Role.ADMIN)
    table = TokenTable(path, check_every_s=3600.0)
    table.lookup("x")
    _, later = create_token(path, "later", Role.ADMIN)
    assert table.lookup(later) is None  # not looked at again yet


def test_a_broken_file_keeps_the_last_good_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    _, token = create_token(path, "a", Role.ADMIN)
    table = TokenTable(path, check_every_s=0.0)
    path.write_text('{"tokens": [ half')
    assert table.lookup(token) is not None


def test_bootstrap_admin_token_without_a_file(tmp_path: Path) -> None:
    table = TokenTable(tmp_path / "missing.json", "s3cret-bootstrap", check_every_s=0.0)
    found = table.lookup("s3cret-bootstrap")
    assert found is not None and found.name == BOOTSTRAP_ADMIN and found.role is Role.ADMIN
    assert table.lookup("wrong") is None


def test_unwritable_file_is_said_so(tmp_path: Path) -> None:
    """A folder that cannot hold the file (here: a plain file in its place, which even root
    cannot write into, as with a read-only Secret mount) is a TokensFileReadOnly."""
    blocker = tmp_path / "secret"
    blocker.write_text("not a folder")
    with pytest.raises(TokensFileReadOnly, match="Kubernetes Secret"):
        create_token(blocker / "tokens.json", "b", Role.ADMIN)
