#!/usr/bin/env python3
"""tests/svg_check.py: is every text of an SVG picture inside it? For each <text> (each <tspan> line
of it), its extent is reckoned from its font size and characters: DejaVu Sans Mono, the monospace
font the pictures use, advances 0.602 em a character. Prints one line per text that runs past the
viewBox (nothing when all fit) and exits 1 when any does; `--count` prints the texts checked.

    python3 tests/svg_check.py FILE.svg [--count]
"""
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
EM = 0.602


def num(v, default=0.0):
    try:
        return float(v)
    except (TypeError, ValueError):
        return default


def lines_of(text_el, font, anchor):
    """(x, y, string, font, anchor) for the element's own text and for each tspan line."""
    x, y = num(text_el.get("x")), num(text_el.get("y"))
    out = []
    if text_el.text and text_el.text.strip():
        out.append((x, y, text_el.text, font, anchor))
    for t in text_el.iter(NS + "tspan"):
        x = num(t.get("x"), x)
        y = num(t.get("y"), y) + num(t.get("dy"))
        if t.text:
            out.append((x, y, t.text, num(t.get("font-size"), font), t.get("text-anchor", anchor)))
    return out


def check(path):
    root = ET.parse(path).getroot()
    vb = [float(v) for v in root.get("viewBox").split()]
    width, height = vb[2], vb[3]
    font0 = num(root.get("font-size"), 16)
    bad, n = [], 0
    for el in root.iter(NS + "text"):
        font = num(el.get("font-size"), font0)
        anchor = el.get("text-anchor", "start")
        for x, y, s, f, a in lines_of(el, font, anchor):
            n += 1
            w = len(s) * EM * f
            x0 = x if a == "start" else x - w / 2 if a == "middle" else x - w
            if x0 < -0.5 or x0 + w > width + 0.5 or y > height + 0.5 or y - f < -0.5:
                bad.append("%r (font %g) spans x %.1f..%.1f, y %.1f: outside the %gx%g picture" % (s[:60], f, x0, x0 + w, y, width, height))
    return n, bad


if __name__ == "__main__":
    n, bad = check(sys.argv[1])
    for b in bad:
        print(b)
    if "--count" in sys.argv:
        print("%d texts" % n)
    sys.exit(1 if bad else 0)
