#!/usr/bin/env python3
"""tests/png_colours.py: how many pixels of a PNG (8-bit RGB or RGBA, as rsvg-convert writes) are
near each colour given, read with zlib alone (no imaging library): what a person looking at the
picture would see of each curve. Prints "WIDTHxHEIGHT" then "#rrggbb N" per colour.

    python3 tests/png_colours.py FILE.png '#4e79a7' '#e15759'
"""
import struct, sys, zlib


def pixels(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), "8-bit RGB or RGBA only"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


if __name__ == "__main__":
    w, h, bpp, rows = pixels(sys.argv[1])
    print("%dx%d" % (w, h))
    for col in sys.argv[2:]:
        r, g, b = (int(col[i:i + 2], 16) for i in (1, 3, 5))
        n = sum(1 for line in rows for x in range(0, w * bpp, bpp)
                if abs(line[x] - r) + abs(line[x + 1] - g) + abs(line[x + 2] - b) < 40)
        print("%s %d" % (col, n))
