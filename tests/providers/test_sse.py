"""The SSE decoder against the format's own line-by-line reading (S-PROF-6).

``SseDecoder`` cuts the usual read (whole one-line ``data:`` events) at its
blank lines in one split and reads everything else line by line; whatever
the bytes and wherever the network cut them, it must dispatch exactly the
events a plain reading of the format does.
"""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from supervisor.providers._sse import SseDecoder, SseEvent

#: Pieces a stream is drawn from: the usual events, and every shape the format allows.
_PIECES = st.sampled_from(
    [
        b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n',
        b"data: [DONE]\n\n",
        b"data: x\n",
        b"data:no-space\n",
        b"data: \n",
        b"data\n",
        b"event: update\n",
        b"event:\n",
        b": keep-alive\n",
        b"id: 7\n",
        b"retry: 10\n",
        b"\n",
        b"\r\n",
        b"\r",
        b"data: caf\xc3\xa9\r\n\r\n",
        b"data: \xff\xfe\n\n",
        b"data: two\ndata: lines\n\n",
        b"data:  spaced\n\n",
    ]
)


def _reference(stream: bytes) -> tuple[list[SseEvent], SseEvent | None]:
    """The events of ``stream`` read line by line as the SSE standard says, then its end."""
    # A CR that ends the stream may yet be half of a CRLF: no line ends at it until the end.
    text = stream.removesuffix(b"\r").replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    events: list[SseEvent] = []
    name, data = b"", []

    def field(line: bytes) -> None:
        nonlocal name
        key, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if key == b"data" and colon:
            data.append(value)
        elif key == b"event" and colon:
            name = value

    lines = text.split(b"\n")
    last = lines.pop()
    for line in lines:
        if line:
            field(line)
        elif data:
            events.append(_event(name, data))
            name, data = b"", []
        else:
            name = b""
    # At the end the last event is kept even without its blank line (see ``end``).
    if last:
        field(last)
    end = _event(name, data) if data else None
    return events, end


def _event(name: bytes, data: list[bytes]) -> SseEvent:
    return SseEvent(
        event=name.decode("utf-8", "replace") if name else "message",
        data=b"\n".join(data).decode("utf-8", "replace"),
    )


@given(
    pieces=st.lists(_PIECES, max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8),
)
def test_sse_decoder_reads_any_stream_cut_anywhere_as_the_standard_does(
    pieces: list[bytes], cuts: list[int]
) -> None:
    """S-PROF-6: however the network cuts a stream, the decoder dispatches the standard's
    events, in order, and ``end`` the unterminated last one."""
    stream = b"".join(pieces)
    bounds = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    decoder = SseDecoder()
    reads = (stream[start:stop] for start, stop in itertools.pairwise(bounds))
    events = [event for read in reads for event in decoder.feed(read)]
    expected, end = _reference(stream)
    assert events == expected
    assert decoder.end() == end
    assert decoder.end() is None
