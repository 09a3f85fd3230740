"""The console's view logic (clepsydra_console.views, DEC-console-server-rendered): the search
box's kinds, body previews (text escaped by the templates, binary labelled, long bodies cut),
paging bounds, and the server-drawn chart."""

from __future__ import annotations

import base64

from clepsydra_console.views import Bar, Page, bar_chart_svg, body_preview, classify_query


def test_what_the_search_box_was_given() -> None:
    assert classify_query("  ").kind == "empty"
    hex32 = "7F000001568501A220913FE300000000"
    found = classify_query(hex32)
    assert found.kind == "id" and found.trace_id == hex32.lower()  # a trace id looks alike
    assert classify_query("7F00000100007CBC0000000000000000").kind == "id"
    trace = classify_query("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    assert trace.kind == "trace" and trace.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert classify_query("order-42").kind == "key"


def test_body_previews() -> None:
    text = body_preview("<b>hi</b>", None, 9)
    assert (text.kind, text.text, text.cut) == ("text", "<b>hi</b>", False)
    long = body_preview("x" * 5000, None, 5000, max_chars=100)
    assert long.cut and len(long.text) == 100 and long.size == 5000
    raw = bytes(range(256)) * 4
    binary = body_preview(None, base64.b64encode(raw).decode(), len(raw), max_chars=30)
    assert binary.kind == "binary" and binary.cut and binary.text.startswith("00 01 02")
    assert body_preview(None, "!!", 2).text == "(not readable base64)"
    assert body_preview("", None, 0).kind == "empty"
    assert body_preview(None, None, 10).kind == "empty"


def test_pages_are_bounded() -> None:
    assert Page.of({"offset": "40", "max": "5000"}, 50, 200) == Page(40, 200)
    assert Page.of({"offset": "-3", "max": "x"}, 50, 200) == Page(0, 50)
    assert Page(40, 20).previous == 20 and Page(0, 20).previous is None
    assert Page(40, 20).next() == 60 and Page(40, 20).next(55) == 55


def test_the_chart_escapes_its_labels() -> None:
    svg = bar_chart_svg([Bar("<1h", 3), Bar("1-2h", 1)], title="a & b")
    assert svg.startswith("<svg") and svg.count("<rect") == 2
    assert "&lt;1h" in svg and "a &amp; b" in svg and "<1h" not in svg.replace("&lt;1h", "")
    assert "nothing pending" in bar_chart_svg([], title="t")
