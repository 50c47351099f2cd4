"""A body answered in two halves by a loopback test server: a dropped, slow or stalled download."""

from __future__ import annotations


def send_in_halves(handler, data: bytes, *, content_length=True, between=None, rest=True) -> None:
    """Answer ``handler``'s request with 200 and ``data``'s first half; then call ``between`` (a pause,
    a look at the client's files) and send the rest, or with ``rest`` False close there, short of the
    Content-Length sent (a dropped connection). Without ``content_length`` the body ends with the
    connection."""
    handler.send_response(200)
    if content_length:
        handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data[: len(data) // 2])
    handler.wfile.flush()
    if rest:
        if between is not None:
            between()
        handler.wfile.write(data[len(data) // 2 :])
    handler.close_connection = True
