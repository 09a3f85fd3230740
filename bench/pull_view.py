"""The JSON view of a pull's page in one process: µs a message to turn a page of records read
from the CommitLog into the answer's bytes, with and without bodies (the consumer's page and
the exporter's), and the SDK's ``Message.from_json`` of each message of it (DEC-pull-json-view).

    .venv/bin/python -m bench.pull_view [--pages 80]

The records look like a due burst's copies (a short body, seven properties: ``UNIQ_KEY``, tags,
the timer's and the hand-over's). Each figure is the fastest of ``--pages`` pages of 1,000 (the
least disturbed by the other processes of a shared machine). It imports only the installed
packages, so the same file measures another worktree's code with that tree's interpreter:
``cd /work/wt-bench-base && .venv/bin/python /path/to/this/bench/pull_view.py`` (a tree without
``decode_view`` is measured the way its pull built the page: ``message_to_json`` over
``decode_record``). Alternate the trees in one sitting.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import orjson

from clepsydra_client.message import Message
from clepsydra_core.records import CommitLogRecord, decode_record, encode_record, message_to_json

PAGE = 1_000
HOST = bytes([127, 0, 0, 1, 0, 0, 0x1F, 0x90])


def page_bytes() -> tuple[bytes, list[int]]:
    """A page of burst-like records, laid end to end as a run read with one pread."""
    records = []
    for i in range(PAGE):
        props = {"UNIQ_KEY": f"7F0000010001{i:020X}", "TAGS": "t", "DELIVER_TS": "1764351234000",
                 "TIMER_OUT_MS": "1764351234000", "REAL_TOPIC": "burst", "REAL_QID": "1",
                 "TIMER_ENQUEUE_MS": "1764351112000"}
        records.append(encode_record(CommitLogRecord(
            topic="burst", body=str(i).encode(), queue_id=1, properties=props, queue_offset=i,
            commitlog_offset=1000 * i, born_timestamp=1764351112000, born_host=HOST,
            store_timestamp=1764351234001, store_host=HOST)))
    offsets, pos = [], 0
    for raw in records:
        offsets.append(pos)
        pos += len(raw)
    return b"".join(records), offsets


def viewer() -> Callable[[bytes, int, bool], dict[str, Any]]:
    """This tree's pull view of the record at a place (DEC-pull-json-view), or the older way."""
    try:
        from clepsydra_core.records import decode_view  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return lambda raw, pos, body: message_to_json(decode_record(raw, pos)[0], with_body=body)
    return lambda raw, pos, body: decode_view(raw, pos, body)[0]  # type: ignore[no-any-return,unused-ignore]


def fastest_us(work: Callable[[], object], pages: int) -> float:
    best = float("inf")
    for _ in range(pages):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best * 1e6 / PAGE


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=80)
    args = parser.parse_args()
    raw, offsets = page_bytes()
    view = viewer()

    def answer(body: bool) -> bytes:
        return orjson.dumps({"messages": [view(raw, pos, body) for pos in offsets]})

    messages = orjson.loads(answer(True))["messages"]
    with_body = fastest_us(lambda: answer(True), args.pages)
    without = fastest_us(lambda: answer(False), args.pages)
    from_json = fastest_us(lambda: [Message.from_json(m) for m in messages], args.pages)
    print(f"a page's view and encode: {with_body:.2f} µs a message with bodies, "
          f"{without:.2f} without; Message.from_json {from_json:.2f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
