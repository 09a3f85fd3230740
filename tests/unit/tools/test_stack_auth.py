"""`make run` with CLEPSYDRA_AUTH=on: each child that calls
another service gets a token of its own role, fresh at every start; the user's tokens stay."""

from __future__ import annotations

from pathlib import Path

from clepsydra_core.auth import Role
from clepsydra_core.auth_tokens import TokenTable, create_token, read_entries
from clepsydra_core.settings import AuthSettings
from tools.stack_auth import CHILD_ROLES, SCOPED, service_tokens


def test_off_gives_no_tokens(tmp_path: Path) -> None:
    assert service_tokens(AuthSettings(enabled=False, tokens_file=tmp_path / "t.json")) == {}
    assert not (tmp_path / "t.json").exists()


def test_each_child_gets_a_token_of_its_role_fresh_each_start(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    create_token(path, "mine", Role.ADMIN)
    auth = AuthSettings(enabled=True, tokens_file=path)
    first = service_tokens(auth)
    second = service_tokens(auth)
    table = TokenTable(path, check_every_s=0.0)
    for child, role in CHILD_ROLES.items():
        found = table.lookup(second[child]["CLEPSYDRA_TOKEN"])
        assert found is not None and found.role is role, child
        assert table.lookup(first[child]["CLEPSYDRA_TOKEN"]) is None  # the last run's: gone
    for child, (role, topics, groups) in SCOPED.items():
        found = table.lookup(second[child]["CLEPSYDRA_TOKEN"])
        assert found is not None and (found.role, found.topics, found.groups) == (
            role, topics, groups), child
        assert table.lookup(first[child]["CLEPSYDRA_TOKEN"]) is None
    assert sorted(e.name for e in read_entries(path)) == [
        "local-analytics", "local-gateway", "local-retry", "local-scheduler", "mine"]
