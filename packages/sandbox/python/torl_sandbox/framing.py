"""Length-prefixed JSON frames (4-byte big-endian length + UTF-8 JSON) between Node and the server,
and between the server and a run child."""

import json
import os
import struct


def read_exact(fd, n):
    chunks = []
    while n > 0:
        data = os.read(fd, n)
        if not data:
            return None
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def read_frame(fd):
    head = read_exact(fd, 4)
    if head is None:
        return None
    (length,) = struct.unpack(">I", head)
    body = read_exact(fd, length)
    return None if body is None else json.loads(body)


def write_frame(fd, obj):
    body = json.dumps(obj).encode()
    data = struct.pack(">I", len(body)) + body
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_all(fd, body):
    data = memoryview(struct.pack(">I", len(body)) + body)
    while data:
        data = data[os.write(fd, data):]
