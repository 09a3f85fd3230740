"""The tokens file: digests only on disk, a token added or revoked
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


def test_a_new_token_is_known_at_once_and_a_revoked_one_within_the_interval(
        tmp_path: Path) -> None:
    # DEC-tokens-at-once: an unknown token makes the table look at the file's stamp before it
    # refuses; a revocation waits for the next reading (check_every_s)
    path = tmp_path / "tokens.json"
    _, first = create_token(path, "first", Role.ADMIN)
    table = TokenTable(path, check_every_s=3600.0)
    assert table.lookup(first) is not None
    _, later = create_token(path, "later", Role.ADMIN)
    found = table.lookup(later)
    assert found is not None and found.name == "later"
    assert revoke_token(path, "first")
    assert table.lookup(first) is not None  # not read again yet: the interval is an hour


def test_a_change_the_stamp_hides_is_seen_at_the_next_reading(tmp_path: Path) -> None:
    """The same size, inode and modification time (an edit in place within the clock's
    resolution, or an inode reused at once): the stamp cannot tell, the bytes can."""
    import os

    path = tmp_path / "tokens.json"
    _, token = create_token(path, "app", Role.PRODUCER, topics=("*",))
    table = TokenTable(path, check_every_s=3600.0)
    assert table.lookup(token) is not None
    before = path.stat()
    text = path.read_text()
    entry = read_entries(path)[0]
    edited = text.replace(entry.digest, "0" * 64)  # the same length: the same size
    assert len(edited) == len(text)
    with open(path, "r+", encoding="utf-8") as out:  # in place: the same inode
        out.write(edited)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (
        before.st_mtime_ns, before.st_size, before.st_ino)
    assert table.lookup(token) is not None  # the stamp says nothing changed
    table._next_check = 0.0  # the interval is over
    assert table.lookup(token) is None


def test_the_tables_own_changes_are_in_force_when_they_return(tmp_path: Path) -> None:
    # the store's /v1/auth/tokens goes through its own table: never answers from old tokens
    path = tmp_path / "tokens.json"
    table = TokenTable(path, check_every_s=3600.0)
    generation = table.generation
    entry, token = table.create("app", Role.CONSUMER, topics=("t",), groups=("g",))
    found = table.lookup(token)
    assert found is not None and found.groups == ("g",) and table.generation > generation
    assert read_entries(path) == [entry]
    assert table.revoke("app") and not table.revoke("app")
    assert table.lookup(token) is None


def test_a_lookup_never_caches_into_a_newer_reading(tmp_path: Path) -> None:
    """A lookup that read the tokens before a revocation may still answer from them, but it
    cannot leave the revoked token in the next reading's cache."""
    path = tmp_path / "tokens.json"
    _, token = create_token(path, "app", Role.ADMIN)
    table = TokenTable(path, check_every_s=3600.0)
    old = table._state
    assert table.revoke("app")
    assert TokenTable._find(old, token) is not None  # the old reading, as a late lookup sees it
    assert token not in table._state.cache and table.lookup(token) is None


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
