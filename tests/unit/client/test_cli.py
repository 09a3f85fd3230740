"""The `clepsydra` command without services: argument parsing, tables, progress bar, and
errors that say what to do (never a traceback)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import pytest

from clepsydra_client.cli.commands import parse_props
from clepsydra_client.cli.main import build_parser, main
from clepsydra_client.cli.render import (
    ProgressBar,
    format_duration_ms,
    render_fields,
    render_table,
)
from clepsydra_client.message import Message
from clepsydra_core.errors import ValidationError
from tools.processes import free_port

if TYPE_CHECKING:

    pass

def run(*argv: str, env_store: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = list(argv)
    if env_store:
        args = ["--store-url", env_store, "--retry-url", env_store, *args]
    code = main(args, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_parser_reads_send_options() -> None:
    args = build_parser().parse_args(
        ["send", "orders", "hi", "--tags", "paid", "--keys", "k1", "k2", "--prop", "a=b",
         "--delay-level", "3", "--count", "5"])
    assert (args.topic, args.body, args.tags, args.keys) == ("orders", "hi", "paid", ["k1", "k2"])
    assert args.prop == ["a=b"] and args.delay_level == 3 and args.count == 5


def test_parser_reads_dlq_resend_selections() -> None:
    args = build_parser().parse_args(["dlq", "resend", "g", "ID1", "ID2", "--to-retry",
                                      "--delay-level", "2"])
    assert args.msg_ids == ["ID1", "ID2"] and args.to_retry and args.delay_level == 2
    args = build_parser().parse_args(["dlq", "resend", "g", "--reason", "timeout"])
    assert args.msg_ids == [] and args.reason == "timeout" and not args.to_origin
    args = build_parser().parse_args(["dlq", "resend", "g", "--all", "--to-origin"])
    assert args.to_origin  # the original topic only when asked for


def test_global_flags_come_before_the_command() -> None:
    args = build_parser().parse_args(["--json", "--store-url", "http://s", "levels"])
    assert args.json and args.store_url == "http://s"


def test_usage_error_exits_2_with_a_hint() -> None:
    code, _, err = run("topics", "explode")
    assert code == 2
    assert "invalid choice" in err and "clepsydra --help" in err
    assert "Traceback" not in err


def test_missing_command_is_a_usage_error() -> None:
    code, _, err = run()
    assert code == 2 and "required" in err


def test_unreachable_store_says_what_to_do() -> None:
    code, out, err = run("topics", "list", env_store=f"http://127.0.0.1:{free_port()}")
    assert code == 1 and out == ""
    assert "did not answer" in err and "make run" in err and "CLEPSYDRA_STORE_URL" in err
    assert "Traceback" not in err


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("CLEPSYDRA_STORE_URL", url)
    code, _, err = run("levels")
    assert code == 1 and url in err


def test_purge_asks_for_confirmation_before_calling_anything() -> None:
    code, _, err = run("dlq", "purge", "g", "--all", env_store=f"http://127.0.0.1:{free_port()}")
    assert code == 1 and "--yes" in err


def test_purge_without_a_selection_is_refused_saying_how_to_select() -> None:
    # with no ids, filter or --all it emptied the whole DLQ
    for argv in (("dlq", "purge", "g", "--yes"), ("dlq", "purge", "g", "--all", "--key", "k")):
        code, _, err = run(*argv, env_store=f"http://127.0.0.1:{free_port()}")
        assert code == 2 and "msgIds, a filter (--topic, --key, --reason) or --all" in err


def test_resend_needs_a_selection() -> None:
    code, _, err = run("dlq", "resend", "g", env_store=f"http://127.0.0.1:{free_port()}")
    assert code == 1 and "msgIds, --all, or a filter" in err


def test_parse_props() -> None:
    assert parse_props(["a=b", "c=d=e", "empty="]) == {"a": "b", "c": "d=e", "empty": ""}
    with pytest.raises(ValidationError, match="NAME=VALUE"):
        parse_props(["novalue"])


def test_render_table_aligns_columns_and_numbers_right() -> None:
    text = render_table(["NAME", "N"], [("a", 5), ("longer", 12), ("c", None)], right=(1,))
    assert text.splitlines() == [
        "NAME     N",
        "------  --",
        "a        5",
        "longer  12",
        "c        -",
    ]


def test_render_table_cuts_long_cells_and_says_when_empty() -> None:
    text = render_table(["X"], [("y" * 100,)], max_width=10)
    assert text.splitlines()[2] == "y" * 9 + "…"
    assert render_table(["X"], [], empty="(nothing)") == "(nothing)"


def test_render_fields_aligns_names() -> None:
    assert render_fields([("a", 1), ("long", True)]) == "a     1\nlong  yes"


def test_progress_bar_renders_and_stays_quiet_off_a_terminal() -> None:
    stream = io.StringIO()
    bar = ProgressBar("sending", 10, stream=stream, width=10)
    bar.advance(4)
    assert bar.render() == "sending [####......] 4/10"
    bar.finish()
    assert stream.getvalue() == ""  # not a terminal: nothing drawn


def test_progress_bar_draws_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    with ProgressBar("resending", 3, stream=stream, width=3) as bar:
        bar.advance(3)
    assert stream.getvalue().endswith("\rresending [###] 3/3\n")


def test_format_duration() -> None:
    assert [format_duration_ms(x) for x in (5, 1500, 125_000, 7_380_000)] == [
        "5ms", "1.5s", "2m05s", "2h03m"]


def test_message_view_resets_a_retry_copy_to_its_original_topic() -> None:  # SPEC R15
    m = Message.from_json({"msgId": "X", "topic": "%RETRY%g", "body": "b",
                           "properties": {"RETRY_TOPIC": "orders"}})
    view = m.with_origin_topic()
    assert view.topic == "orders" and view.store_topic == "%RETRY%g" and view.is_retry
    assert m.with_origin_topic().queue.topic == "%RETRY%g"
