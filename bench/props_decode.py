"""A properties block's decode (``decode_properties``, DEC-props-layout), µs a block, against
another tree's decoder loaded from its file in the same process, alternating the two; each
figure is the fastest of ``--rounds`` rounds over ``--blocks`` blocks:

    .venv/bin/python -m bench.props_decode [--rounds 15] [--blocks 2000]
        [--base /work/main/libs/core/src/clepsydra_core/properties.py]

  burst       a due burst's copy: 9 ASCII properties, 268 bytes, every block of one shape
  produce2    a plain produce's block: UNIQ_KEY and TAGS (57 bytes)
  produce3    the same with KEYS (74 bytes)
  unicode     the burst's block with two values in non-ASCII text
  varied      ``--blocks`` blocks of the burst's names whose values have drawn lengths, read in
              turn over and over: a length comes back with another shape (the case that must
              not get slower)
  varied_cold the same with blocks drawn anew every round

Every block is read at an offset inside a longer buffer, as a pulled record's properties are.
Without ``--base`` only this tree's figures are printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import time
from collections.abc import Callable
from typing import Any

from clepsydra_core import properties as P

BURST = {"UNIQ_KEY": "7F000001000100000000000000012ABC", "TAGS": "t", "KEYS": "order-1",
         "DELIVER_AT": "1764351234000", "REAL_TOPIC": "burst", "REAL_QID": "1",
         "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
         "SCHEDULE_OFFSET": "0:12345", "DELIVER_TS": "1764351234000"}
PREFIX = b"\0" * 100  # the record's header, body and topic before its properties
Blocks = list[tuple[bytes, int, int]]


def placed(blocks: list[bytes]) -> Blocks:
    return [(PREFIX + b, len(PREFIX), len(PREFIX) + len(b)) for b in blocks]


def drawn(rng: random.Random, count: int) -> list[bytes]:
    """Blocks of the burst's names, each value 0 to twice its burst length of ASCII."""
    return [P.encode_properties({name: "x" * rng.randint(0, 2 * len(value))
                                 for name, value in BURST.items()}) for _ in range(count)]


def per_block_us(decode: Callable[[bytes, int, int], object], blocks: Blocks) -> float:
    started = time.perf_counter()
    for raw, start, end in blocks:
        decode(raw, start, end)
    return (time.perf_counter() - started) * 1e6 / len(blocks)


def base_decoder(path: str) -> Callable[[bytes, int, int], object]:
    spec = importlib.util.spec_from_file_location("base_properties", path)
    assert spec is not None and spec.loader is not None, path
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.decode_properties  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--blocks", type=int, default=2000)
    parser.add_argument("--base", help="another tree's clepsydra_core/properties.py")
    args = parser.parse_args()
    rng = random.Random(7)
    n = args.blocks
    unicode = dict(BURST, REAL_TOPIC="zählung", KEYS="注文-1")
    varied = placed(drawn(rng, n))
    cases: dict[str, Callable[[], Blocks]] = {
        "burst": lambda: placed([P.encode_properties(BURST)] * n),
        "produce2": lambda: placed([P.encode_properties(
            {P.UNIQ_KEY: BURST[P.UNIQ_KEY], P.TAGS: "t"})] * n),
        "produce3": lambda: placed([P.encode_properties(
            {P.UNIQ_KEY: BURST[P.UNIQ_KEY], P.TAGS: "t", P.KEYS: "order-1"})] * n),
        "unicode": lambda: placed([P.encode_properties(unicode)] * n),
        "varied": lambda: varied,
        "varied_cold": lambda: placed(drawn(rng, n)),
    }
    contenders: dict[str, Callable[[bytes, int, int], object]] = {"this": P.decode_properties}
    if args.base:
        contenders = {"base": base_decoder(args.base), **contenders}
    print(f"load average {os.getloadavg()[0]:.2f} at the start")
    for name, make in cases.items():
        best = dict.fromkeys(contenders, float("inf"))
        for _ in range(args.rounds):
            blocks = make()
            for who, decode in contenders.items():
                best[who] = min(best[who], per_block_us(decode, blocks))
        line = ", ".join(f"{who} {us:.2f} µs" for who, us in best.items())
        if args.base:
            line += f": {best['this'] / best['base']:.3f}x"
        print(f"{name:12} {line}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
