#!/usr/bin/env python3
"""tests/ckpt_tool.py: reads and damages micropp checkpoints for the tests, with python's standard
library only (numpy is used to read tensors when it is installed, to prove numpy reads the files).

  check DIR            verify the manifest, every file's CRC-32 (zlib) and safetensors header, the
                       tensor names and shapes; prints a JSON summary
  dump DIR OUT.json    all tensors of the checkpoint, merged over its files, as {name: [floats]}
  diff A.json B.json   worst relative difference between two dumps (same names required)
  corrupt DIR K        flip one data byte of file K (the manifest keeps the old CRC)
  truncate DIR K       cut file K in half
  reshape DIR K NAME   give tensor NAME of file K another shape of the same size, and fix the CRC
  manifest DIR EXPR    apply a python statement to the manifest dict `m` and write it back
  poke DIR K NAME I V  set element I of tensor NAME of file K to the float V, and fix the CRC
"""
import json, os, struct, sys, zlib

try:
    import numpy as np
except ImportError:
    np = None


def read_st(path):
    """Returns (header dict without __metadata__, metadata, data bytes)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    return header, meta, raw[8 + n:]


def tensor(info, data):
    b, e = info["data_offsets"]
    assert info["dtype"] == "F32", info
    if np is not None:  # what a numpy user would do
        return np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"]).ravel().tolist()
    import array
    a = array.array("f")
    a.frombytes(data[b:e])
    return a.tolist()


def manifest(d):
    with open(os.path.join(d, "manifest.json")) as f:
        return json.load(f)


def check(d):
    m = manifest(d)
    L, H, C = m["config"]["layers"], m["config"]["hidden"], m["config"]["classes"]
    D = m["config"].get("inputs", H)  # layer 0 is Linear(D, H); absent in checkpoints from before --inputs
    adam = m["config"]["optimizer"] == "adam"
    names = {}
    for fr in m["files"]:
        path = os.path.join(d, fr["file"])
        raw = open(path, "rb").read()
        assert len(raw) == fr["bytes"], (fr["file"], len(raw), fr["bytes"])
        assert zlib.crc32(raw) == fr["crc32"], (fr["file"], "crc")
        (n,) = struct.unpack("<Q", raw[:8])
        assert (8 + n) % 8 == 0, "data section not 8-byte aligned"
        header, meta, data = read_st(path)
        assert meta["step"] == str(m["step"]), meta
        for k, v in header.items():
            assert k not in names, "tensor in two files: " + k
            names[k] = v["shape"]
            vals = tensor(v, data)
            assert all(x == x and abs(x) != float("inf") for x in vals), k + " not finite"
            if k.startswith("optim.exp_avg_sq."):
                assert min(vals) >= 0, k
    want = {}
    for i in range(L):
        want["layers.%d.weight" % i] = [H, D if i == 0 else H]
        want["layers.%d.bias" % i] = [H]
    want["head.weight"] = [C, H]
    want["head.bias"] = [C]
    for k in list(want):
        if adam:
            want["optim.exp_avg." + k] = want[k]
            want["optim.exp_avg_sq." + k] = want[k]
    assert names == want, "names/shapes differ: extra %s missing %s" % (
        sorted(set(names) - set(want))[:4], sorted(set(want) - set(names))[:4])
    print(json.dumps({"ok": True, "step": m["step"], "files": len(m["files"]), "tensors": len(names),
                      "reader": "numpy" if np is not None else "array"}))


def dump(d, out):
    res = {}
    for fr in manifest(d)["files"]:
        header, _, data = read_st(os.path.join(d, fr["file"]))
        for k, v in header.items():
            res[k] = tensor(v, data)
    json.dump(res, open(out, "w"), sort_keys=True)  # (sorted: two dumps of the same tensors are the same bytes)


def diff(a, b):
    A, B = json.load(open(a)), json.load(open(b))
    assert sorted(A) == sorted(B), "different tensor names"
    worst = 0.0
    for k in A:
        scale = max(max(abs(x) for x in B[k]), 1e-30)
        worst = max(worst, max(abs(x - y) for x, y in zip(A[k], B[k])) / scale)
    print("%.3e" % worst)


def file_path(d, k):
    return os.path.join(d, manifest(d)["files"][int(k)]["file"])


def fix_crc(d, k):
    m = manifest(d)
    raw = open(os.path.join(d, m["files"][int(k)]["file"]), "rb").read()
    m["files"][int(k)]["crc32"] = zlib.crc32(raw)
    m["files"][int(k)]["bytes"] = len(raw)
    json.dump(m, open(os.path.join(d, "manifest.json"), "w"))


def main(a):
    if a[0] == "check":
        check(a[1])
    elif a[0] == "dump":
        dump(a[1], a[2])
    elif a[0] == "diff":
        diff(a[1], a[2])
    elif a[0] == "corrupt":
        p = file_path(a[1], a[2])
        raw = bytearray(open(p, "rb").read())
        raw[-5] ^= 0x40
        open(p, "wb").write(raw)
    elif a[0] == "truncate":
        p = file_path(a[1], a[2])
        raw = open(p, "rb").read()
        open(p, "wb").write(raw[:len(raw) // 2])
    elif a[0] == "reshape":
        p = file_path(a[1], a[2])
        raw = open(p, "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        s = header[a[3]]["shape"]
        header[a[3]]["shape"] = [s[0] // 2, 2] + s[1:]
        text = json.dumps(header).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        open(p, "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
        fix_crc(a[1], a[2])
    elif a[0] == "poke":
        p = file_path(a[1], a[2])
        raw = bytearray(open(p, "rb").read())
        (n,) = struct.unpack("<Q", raw[:8])
        at = 8 + n + json.loads(raw[8:8 + n])[a[3]]["data_offsets"][0] + 4 * int(a[4])
        raw[at:at + 4] = struct.pack("<f", float(a[5]))
        open(p, "wb").write(raw)
        fix_crc(a[1], a[2])
    elif a[0] == "manifest":
        path = os.path.join(a[1], "manifest.json")
        m = json.load(open(path))
        exec(a[2], {"m": m})
        json.dump(m, open(path, "w"))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
