"""The tokens file (CLEPSYDRA_AUTH_TOKENS_FILE): what it holds, reading it again when it changes,
and adding or revoking a token by rewriting it atomically.

The file is JSON and holds digests only (``clepsydra_core.auth.token_digest``)::

    {"version": 1, "tokens": [{"name": "orders-app", "role": "producer",
      "topics": ["orders-*"], "groups": [], "sha256": "<hex>", "createdMs": 1764000000000}]}

:class:`TokenTable` answers "who is this token?" for a service and picks up a token added or
revoked (by ``clepsydra auth``, the store's ``/v1/auth/tokens``, or a Kubernetes Secret's update)
without a restart: a new token at once, a revoked one within a second (DEC-tokens-at-once).
A file that cannot be read or parsed keeps the last good table (and logs why): a half-written
edit must not lock everyone out. Known tokens are cached by their value, so a request costs one
dict lookup, not a hash.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from clepsydra_core.auth import (
    BOOTSTRAP_ADMIN,
    Principal,
    Role,
    new_token,
    parse_role,
    token_digest,
)
from clepsydra_core.errors import ConfigError, ValidationError

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
RELOAD_CHECK_S = 1.0
"""How often (at most) a service reads the tokens file again: the longest a revoked token is still
accepted by a service that did not revoke it itself."""
_CACHE_MAX = 10_000
"""Known tokens cached by value; beyond it the cache starts again (bounded memory)."""


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One line of the tokens file."""

    name: str
    role: Role
    digest: str
    topics: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    created_ms: int = 0
    rate_per_s: float = 0.0
    """Requests a second (``ratePerS``; 0 or absent: the service's default)."""

    def principal(self) -> Principal:
        return Principal(self.name, self.role, self.topics, self.groups, self.rate_per_s)

    def to_json(self) -> dict[str, Any]:
        return {**self.describe(), "sha256": self.digest}

    def describe(self) -> dict[str, Any]:
        """What ``auth list`` shows: never the digest."""
        out: dict[str, Any] = {"name": self.name, "role": self.role.value,
                               "topics": list(self.topics), "groups": list(self.groups),
                               "createdMs": self.created_ms}
        if self.rate_per_s:
            out["ratePerS"] = self.rate_per_s
        return out


def _strings(value: object, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValidationError(f"{what} must be a list of non-empty strings")
    return tuple(value)


def parse_entry(obj: object) -> TokenEntry:
    if not isinstance(obj, dict):
        raise ValidationError("a token entry must be an object")
    name, digest = obj.get("name"), obj.get("sha256")
    if not isinstance(name, str) or not name:
        raise ValidationError("a token entry needs a name")
    if not isinstance(digest, str) or len(digest) != 64:
        raise ValidationError(f"token {name!r}: sha256 must be 64 hex digits")
    try:
        role = parse_role(str(obj.get("role")))
    except ValueError as exc:
        raise ValidationError(f"token {name!r}: {exc}") from None
    created = obj.get("createdMs", 0)
    return TokenEntry(name, role, digest.lower(), _strings(obj.get("topics"), "topics"),
                      _strings(obj.get("groups"), "groups"),
                      created if isinstance(created, int) else 0,
                      parse_rate(obj.get("ratePerS"), f"token {name!r}: ratePerS"))


def parse_rate(value: object, what: str = "ratePerS") -> float:
    """A requests-a-second limit: a number >= 0 (0 or None: the service's default)."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValidationError(f"{what} must be a number of requests a second >= 0, "
                              f"got {value!r}")
    return float(value)


def parse_file(raw: bytes) -> list[TokenEntry]:
    """The entries of a tokens file's bytes; ValidationError naming what is wrong."""
    try:
        doc = orjson.loads(raw) if raw.strip() else {"tokens": []}
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"the tokens file is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tokens", []), list):
        raise ValidationError('the tokens file must be {"version": 1, "tokens": [...]}')
    entries = [parse_entry(e) for e in doc.get("tokens", [])]
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ValidationError("the tokens file names a token twice")
    return entries


def dump_file(entries: Iterable[TokenEntry]) -> bytes:
    return orjson.dumps({"version": FORMAT_VERSION, "tokens": [e.to_json() for e in entries]},
                        option=orjson.OPT_INDENT_2) + b"\n"


def read_entries(path: Path) -> list[TokenEntry]:
    """The file's entries; a missing file has none."""
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return []
    return parse_file(raw)


class TokensFileReadOnly(ConfigError):
    """The tokens file cannot be written here (a mounted Kubernetes Secret)."""


_write_lock = threading.Lock()
_UNREAD = object()


def _write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (a temporary file in the same folder, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def create_token(path: Path, name: str, role: Role, *, topics: tuple[str, ...] = (),
                 groups: tuple[str, ...] = (),
                 rate_per_s: float = 0.0) -> tuple[TokenEntry, str]:
    """Add a token named ``name`` to the file: (its entry, the token itself - the only time
    it exists outside its holder). ValidationError when the name is taken or empty;
    TokensFileReadOnly when the file or its folder cannot be written."""
    if not name or len(name) > 128 or not name.isprintable():
        raise ValidationError("a token name is 1 to 128 printable characters")
    token = new_token()
    entry = TokenEntry(name, role, token_digest(token), topics, groups,
                       int(time.time() * 1000), parse_rate(rate_per_s))
    with _write_lock:
        entries = read_entries(path)
        if any(e.name == name for e in entries):
            raise ValidationError(f"a token named {name!r} exists; revoke it first")
        _save(path, [*entries, entry])
    return entry, token


def revoke_token(path: Path, name: str) -> bool:
    """Remove the token named ``name``; False when there is none."""
    with _write_lock:
        entries = read_entries(path)
        kept = [e for e in entries if e.name != name]
        if len(kept) == len(entries):
            return False
        _save(path, kept)
    return True


def _save(path: Path, entries: list[TokenEntry]) -> None:
    try:
        _write_atomically(path, dump_file(entries))
    except OSError as exc:
        raise TokensFileReadOnly(
            f"the tokens file {path} cannot be written ({exc.strerror}); where it comes from a "
            "Kubernetes Secret, change the Secret instead") from None


@dataclass(frozen=True, slots=True)
class _Loaded:
    """One reading of the tokens file, replaced whole by the next: a lookup reads one of these
    and never mixes two (a token revoked by the next reading cannot slip into its cache)."""

    generation: int
    by_digest: dict[str, Principal]
    cache: dict[str, Principal]
    """Known tokens by value (filled by lookups of this reading only)."""
    stamp: object
    raw: bytes | None
    """The file's bytes this reading parsed (None: no file)."""


class TokenTable:
    """Token -> principal for one service: the tokens file (read again when it changes) and the
    bootstrap admin token. Safe to share between threads.

    When the file's changes are seen (DEC-tokens-at-once):

    - a token unknown to the table makes it look at the file's stamp (modification time, size,
      inode: one ``stat``) before refusing, so a token just added anywhere is accepted at once;
    - at most every ``check_every_s`` the file is read and compared byte for byte with the last
      reading, so a change its stamp hides (same size and inode within the clock's resolution)
      and a revocation are seen within that time;
    - :meth:`create` and :meth:`revoke` write the file and take the change before they return,
      so the service that made a change (the store's ``/v1/auth/tokens``) never answers from
      the old tokens.
    """

    def __init__(self, path: Path | None, admin_token: str | None = None, *,
                 check_every_s: float = RELOAD_CHECK_S) -> None:
        self.path = path
        self._check_every_s = check_every_s
        self._admin = ({token_digest(admin_token): Principal(BOOTSTRAP_ADMIN, Role.ADMIN)}
                       if admin_token else {})
        self._state = _Loaded(0, dict(self._admin), {}, _UNREAD, None)
        self._next_check = 0.0
        self._lock = threading.Lock()
        self._reload(read=True)

    @property
    def generation(self) -> int:
        """Counts the readings that changed the tokens: a caller caching decisions keeps them
        per generation."""
        return self._state.generation

    def refresh(self) -> None:
        """Read the file again and take what changed (no more than every ``check_every_s``)."""
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + self._check_every_s
            self._reload(read=True)

    def lookup(self, token: str) -> Principal | None:
        """The principal of ``token``, or None when it is not a valid token."""
        self.refresh()
        state = self._state
        found = self._find(state, token)
        if found is None and self._reload(read=False) is not state:
            found = self._find(self._state, token)
        return found

    def create(self, name: str, role: Role, *, topics: tuple[str, ...] = (),
               groups: tuple[str, ...] = (), rate_per_s: float = 0.0) -> tuple[TokenEntry, str]:
        """:func:`create_token` on this table's file; the token is known here on return."""
        created = create_token(self._file(), name, role, topics=topics, groups=groups,
                               rate_per_s=rate_per_s)
        self._reload(read=True)
        return created

    def revoke(self, name: str) -> bool:
        """:func:`revoke_token` on this table's file; refused here on return."""
        found = revoke_token(self._file(), name)
        self._reload(read=True)
        return found

    def _file(self) -> Path:
        if self.path is None:
            raise ConfigError("no tokens file to change")
        return self.path

    @staticmethod
    def _find(state: _Loaded, token: str) -> Principal | None:
        found = state.cache.get(token)
        if found is not None:
            return found
        found = state.by_digest.get(token_digest(token))
        if found is not None:
            if len(state.cache) >= _CACHE_MAX:
                state.cache.clear()
            state.cache[token] = found
        return found

    def _file_stamp(self) -> tuple[int, int, int] | None:
        if self.path is None:
            return None
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _reload(self, *, read: bool) -> _Loaded:
        """Take the file's current tokens when they changed; ``read``: compare its bytes even
        when its stamp is the same. The reading in force afterwards."""
        with self._lock:
            state = self._state
            try:
                stamp = self._file_stamp()
            except OSError as exc:
                logger.warning("tokens file %s not readable, keeping the last tokens: %s",
                               self.path, exc)
                return state
            if stamp == state.stamp and not read:
                return state
            try:
                raw = None if stamp is None or self.path is None else self.path.read_bytes()
            except FileNotFoundError:
                raw = None
            except OSError as exc:
                logger.warning("tokens file %s not readable, keeping the last tokens: %s",
                               self.path, exc)
                return state
            if raw == state.raw and state.stamp is not _UNREAD:
                self._state = replace(state, stamp=stamp)  # the same tokens, a new stamp
                return self._state
            try:
                entries = parse_file(raw) if raw is not None else []
            except ValidationError as exc:
                logger.warning("tokens file %s not loaded, keeping the last tokens: %s",
                               self.path, exc)
                return state
            table = {e.digest: e.principal() for e in entries}
            table.update(self._admin)
            self._state = _Loaded(state.generation + 1, table, {}, stamp, raw)
            logger.info("tokens loaded path=%s tokens=%d", self.path, len(entries))
            return self._state
