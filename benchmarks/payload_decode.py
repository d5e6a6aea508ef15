"""What does one hostile payload cost to show, on the entry page and in a table preview?

Times ``dashboard.views.payloads.field_view`` (entry and dead-letter pages) on 2 MB JSON values
of the worst shapes found (JSON nested a million deep, a flat array of a million numbers,
100k tiny JSON documents in strings, 100k of them naming a secret, one string of a
million backslashes, 4000-digit numbers, invalid JSON full of ``\\u`` escapes or
%-encoding, a typical object with a secret), 50 MB of text and of whitespace before JSON,
and ``payloads.preview`` (table rows) on 256 KB values. Each line is the best of
``--runs`` CPU times (``time.process_time``) and its ratio to the baseline measured in the
same run: a bare ``json.loads`` of the typical 2 MB object.

    uv run python -m benchmarks.payload_decode [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from dashboard.views import payloads  # noqa: E402

MB2 = payloads.PRETTY_JSON_BYTES - 16
KB256 = payloads.PREVIEW_JSON_BYTES - 16


def typical(items: int) -> bytes:
    rows = [
        {"sku": f"A{i}", "name": "widget", "qty": i, "price": i * 1.5, "tags": ["a", "b"]}
        for i in range(items)
    ]
    return json.dumps({"items": rows, "token": "t"}).encode()


FIELD_SHAPES: dict[str, bytes] = {
    "typical object with a secret": typical(20_000),
    "nested 1M deep": b"[" * (MB2 // 2) + b"]" * (MB2 // 2),
    "flat array of 1M numbers": b"[" + b"0," * (MB2 // 2 - 1) + b"0]",
    "400k tiny JSON strings": b"[" + b'"{}",' * (MB2 // 5 - 1) + b'"{}"]',
    "130k JSON strings naming a secret": b"[" + b'"{\\"key\\":1}",' * (MB2 // 15 - 1) + b"1]",
    "1M backslashes in a string": b'["' + b"\\\\" * (MB2 // 2 - 8) + b'", "key"]',
    "4000-digit numbers": b"[" + (b"9" * 3999 + b",") * (MB2 // 4000 - 1) + b"1]",
    "invalid, \\u escapes, a secret": b'{"key": "' + b"\\u0041" * (MB2 // 6 - 3),
    "invalid, %-encoded": b'{"k' + b"%25" * (MB2 // 3 - 2),
    "50 MB of text": b"a" * 50_000_000,
    "50 MB of whitespace, then JSON": b" " * 50_000_000 + b'{"a": 1}',
}
PREVIEW_SHAPES: dict[str, bytes] = {
    "typical object": typical(2_400)[:KB256],
    "nested 128k deep": b"[" * (KB256 // 2) + b"]" * (KB256 // 2),
    "flat array of 128k numbers": b"[" + b"0," * (KB256 // 2 - 1) + b"0]",
}


def best_cpu(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.process_time()
        fn()
        times.append(time.process_time() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base_value = FIELD_SHAPES["typical object with a secret"]
    baseline = best_cpu(lambda: json.loads(base_value), args.runs)
    print(f"baseline: json.loads of a {len(base_value):,} B object: {baseline * 1000:.0f} ms")
    for name, value in FIELD_SHAPES.items():
        cpu = best_cpu(lambda v=value: payloads.field_view(b"payload", v), args.runs)
        print(
            f"field_view {name:36s} {len(value):>11,} B {cpu * 1000:6.0f} ms {cpu / baseline:5.1f}x"
        )
    for name, value in PREVIEW_SHAPES.items():
        cpu = best_cpu(lambda v=value: payloads.preview([(b"payload", v)]), args.runs)
        print(
            f"preview    {name:36s} {len(value):>11,} B {cpu * 1000:6.0f} ms {cpu / baseline:5.1f}x"
        )


if __name__ == "__main__":
    main()
