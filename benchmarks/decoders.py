"""What does decoding cost a page of 50 rows, per payload format, against JSON?

Builds 50 entries of one typical order (about 1 KB as JSON: a customer, five items, a
card whose ``api_token`` is redacted) in each format a decoder reads, made by that
format's own library: JSON (the baseline, today's display), msgpack (guessed, and by a
rule), protobuf (by a rule, from a descriptor set), FastStream's binary message
(guessed), taskiq's message (by a rule), gzip and zstd of JSON, base64 of msgpack. A
"page" is what the dead-letter page does per row, the costliest of the tables: its
preview (``payloads.preview``) and its fields (``payloads.fields_page``, one shared
``DecodeBudget``). The preview cache is cleared before each page, so every value is
decoded. Each line is the best of ``--runs`` CPU times (``time.process_time``) and its
ratio to the JSON page measured in the same run.

    uv run python -m benchmarks.decoders [--runs 5]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

import msgpack  # noqa: E402
import zstandard  # noqa: E402
from django.test import override_settings  # noqa: E402

from dashboard.views import payloads  # noqa: E402
from tests import decoder_samples  # noqa: E402

ROWS = 50


def order(i: int) -> dict[str, object]:
    return {
        "order": f"o-{i}",
        "customer": {"id": f"c-{i % 17}", "name": "Ada Lovelace", "country": "GB"},
        "items": [
            {"sku": f"A{i}-{k}", "name": "widget", "qty": k + 1, "price": 9.5 * (k + 1)}
            for k in range(5)
        ],
        "card": {"api_token": "tok-" + "x" * 24, "last4": "4242"},
        "note": "leave at the door, ring twice",
    }


def formats() -> dict[str, tuple[str, str, bytes]]:
    """name -> (rule for the stream "bench", field name, one value)."""
    doc = order(7)
    text = json.dumps(doc).encode()
    packed = msgpack.packb(doc)
    taskiq = {"task_id": "t-7", "task_name": "shop:charge", "labels": {}, "args": [doc],
              "kwargs": {}}  # fmt: skip
    return {
        "JSON (baseline)": ("", "payload", text),
        "msgpack, guessed": ("", "payload", packed),
        "msgpack, by rule": ("bench=msgpack", "payload", packed),
        "protobuf, by rule": (
            "bench=protobuf:acme.Payment",
            "body",
            decoder_samples.payment(
                "o-7", token="tok-" + "x" * 24, cents=4750, tags=("a", "b", "c", "d", "e")
            ),
        ),  # fmt: skip
        "FastStream, guessed": ("", "__data__", decoder_samples.faststream_message(doc)),
        "taskiq, by rule": ("bench=taskiq", "data", json.dumps(taskiq).encode()),
        "gzip of JSON, guessed": ("", "payload", gzip.compress(text)),
        "zstd of msgpack, guessed": ("", "payload", zstandard.ZstdCompressor().compress(packed)),
        "base64 of msgpack, by rule": ("bench=base64", "payload", base64.b64encode(packed)),
    }


def page(rows: list[tuple[tuple[bytes, bytes], ...]]) -> None:
    payloads._preview_cached.cache_clear()
    budget = payloads.DecodeBudget()
    for fields in rows:
        payloads.preview(fields, stream="bench")
        payloads.fields_page(fields, count=payloads.DLQ_ROW_FIELDS, budget=budget, stream="bench")


def best_cpu(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.process_time()
        fn()
        times.append(time.process_time() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    descriptors = decoder_samples.descriptor_set(Path(tempfile.mkdtemp()) / "set.pb")
    results: dict[str, tuple[float, int]] = {}
    for name, (rule, field, value) in formats().items():
        rows = [((field.encode(), value), (b"n", str(i).encode())) for i in range(ROWS)]
        with override_settings(ACKBOARD_DECODERS=rule, ACKBOARD_PROTO_DESCRIPTORS=descriptors):
            shown = payloads.field_view(field.encode(), value, stream="bench")
            assert shown.redacted and "xxxx" not in shown.shown, (name, shown)
            page(rows)  # warm: imports (FastStream's parser), descriptor pool, caches
            results[name] = (best_cpu(lambda r=rows: page(r), args.runs), len(value))
    baseline = results["JSON (baseline)"][0]
    print(f"{ROWS} rows a page, preview + fields of each, best of {args.runs} (CPU time)")
    for name, (cpu, size) in results.items():
        print(
            f"{name:28} {size:5} B/value  {cpu * 1000:7.2f} ms/page  "
            f"{cpu / ROWS * 1e6:6.0f} µs/row  {cpu / baseline:5.2f}x JSON"
        )


if __name__ == "__main__":
    main()
