"""``dashboard.runtime.middleware.GZipMiddleware``: Django's compression done by ISA-L, with
everything else Django's: the floor, ``Vary``, the weak ETag, the random-length padding,
streaming responses, and no compression for clients that did not ask for it."""

from __future__ import annotations

import gzip
import os
import zlib

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.test import RequestFactory
from isal import igzip, isal_zlib

from dashboard.runtime.middleware import GZipMiddleware, compress_padded

BODY = ("<tr><td>pending</td><td>1796577070994-0</td></tr>\n" * 400).encode()


def _answer(body: bytes = BODY, *, accept: str = "gzip, deflate", etag: str = "") -> HttpResponse:
    request = RequestFactory().get("/", headers={"accept-encoding": accept} if accept else {})

    def view(_: HttpRequest) -> HttpResponse:
        response = HttpResponse(body)
        if etag:
            response["ETag"] = etag
        return response

    response = GZipMiddleware(view)(request)
    assert isinstance(response, HttpResponse)
    return response


def test_a_page_is_gzipped_and_decompresses_to_itself() -> None:
    response = _answer()
    assert response["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in response["Vary"]
    assert gzip.decompress(response.content) == BODY
    assert int(response["Content-Length"]) == len(response.content) < len(BODY) // 10


def test_the_gzip_header_carries_random_length_padding() -> None:
    sizes = {len(_answer().content) for _ in range(12)}
    assert len(sizes) > 1, "the same page compressed to the same size every time"
    header = _answer().content[:10]
    assert header[:3] == b"\x1f\x8b\x08"
    assert header[3] & gzip.FNAME, "no padded file name in the gzip header"


def test_the_answer_is_compressed_by_isal_not_djangos_zlib() -> None:
    packed = _answer().content
    # Past the 10-byte header and the padded file name (NUL-terminated): the deflate data.
    data = packed[packed.index(b"\x00", 10) + 1 :]
    isal = igzip.compress(BODY, compresslevel=isal_zlib.ISAL_DEFAULT_COMPRESSION, mtime=0)
    assert data == isal[10:]
    assert data != gzip.compress(BODY, compresslevel=6, mtime=0)[10:]
    assert compress_padded(BODY, 0) == isal
    # Standard gzip: what zlib (and so every browser) reads back.
    assert zlib.decompress(packed, wbits=31) == BODY


def test_a_strong_etag_becomes_weak() -> None:
    assert _answer(etag='"abc"')["ETag"] == 'W/"abc"'


def test_no_compression_without_accept_encoding_or_for_short_answers() -> None:
    plain = _answer(accept="")
    assert not plain.has_header("Content-Encoding")
    assert plain.content == BODY
    assert "Accept-Encoding" in plain["Vary"]
    short = _answer(b"ok\n")
    assert not short.has_header("Content-Encoding")
    assert short.content == b"ok\n"


def test_incompressible_answers_stay_as_they_are() -> None:
    noise = os.urandom(4000)
    response = _answer(noise)
    assert not response.has_header("Content-Encoding")
    assert response.content == noise


def test_streaming_answers_are_compressed_by_djangos_code() -> None:
    request = RequestFactory().get("/", headers={"accept-encoding": "gzip"})
    middleware = GZipMiddleware(lambda _: StreamingHttpResponse(iter([BODY, BODY])))
    response = middleware(request)
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Encoding"] == "gzip"
    assert gzip.decompress(b"".join(response.streaming_content)) == BODY + BODY
