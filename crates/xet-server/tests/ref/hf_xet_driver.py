#!/usr/bin/env python3
"""Drive the reference client (hf_xet 1.8.0) against a CAS endpoint.

Run by crates/xet-server/tests/interop.rs; usable by hand too:

    python hf_xet_driver.py corpus   --work DIR
    python hf_xet_driver.py upload   --work DIR --endpoint URL [--token T] [--set S]
    python hf_xet_driver.py download --work DIR --endpoint URL [--token T] [--set S] [--out NAME]
    python hf_xet_driver.py session-download --work DIR --refresh-url URL --token T [--set S] [--out NAME]

`corpus` writes deterministic files to DIR/src and DIR/src2 (a file meant to be
uploaded after src: it shares chunks with src). `upload` uploads the set DIR/<S> with the
legacy `hf_xet.upload_files` and writes DIR/<S>.manifest.json (name, hash, size, sha256
per file). `download` fetches every manifest entry with `hf_xet.download_files` into
DIR/<out> and compares the bytes with DIR/<S>. `session-download` does the same through the session
API, seeding no token and no endpoint: the client first GETs the token refresh URL (with
`Authorization: Bearer T`) and takes the endpoint from its `casUrl`.

Set HF_XET_CACHE per step (the Rust test does) so steps do not share caches. Exit 0 and
a last stdout line of JSON on success; any failure raises (non-zero exit).
"""

import argparse
import hashlib
import json
import os
import random
import struct
import sys
import time

import hf_xet

FAR_FUTURE = int(time.time()) + 10 * 365 * 24 * 3600


def write_set(work, name, files):
    for fname, data in files.items():
        path = os.path.join(work, name, fname)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def corpus(work):
    rng = random.Random(20251121)
    rand_3m = rng.randbytes(3 * 1024 * 1024 + 12345)
    words = [b"xet", b"chunk", b"xorb", b"shard", b"merkle", b"hash", b"dedup", b"range", b"grant"]
    text = b" ".join(rng.choice(words) for _ in range(400_000))
    floats = b"".join(struct.pack("<f", rng.gauss(0.0, 1.0)) for _ in range(300_000))
    files = {
        "empty.bin": b"",
        "one.bin": b"x",
        "small_random.bin": rng.randbytes(100_000),
        "random_3m.bin": rand_3m,
        "zeros_1m.bin": bytes(1024 * 1024),
        "text.txt": text,
        "floats.bin": floats,
        # Shares most chunks with random_3m.bin.
        "random_3m_appended.bin": rand_3m + rng.randbytes(70_000),
        "nested/dir/file.bin": rng.randbytes(200_000),
    }
    write_set(work, "src", files)
    # A second set, uploaded after the first: random_3m.bin with its middle replaced. Its
    # head and tail dedup (global dedup) against the first upload's xorb, so it is two
    # separate chunk ranges of that xorb plus a new xorb (a multi-range fetch when
    # multi-range fetching is on).
    holed = rand_3m[:1_000_000] + rng.randbytes(50_000) + rand_3m[2_000_000:]
    write_set(work, "src2", {"random_3m_holed.bin": holed})
    return sorted(files)


def token_info(token):
    return (token, FAR_FUTURE) if token else None


def src_names(work, set_name):
    src = os.path.join(work, set_name)
    out = []
    for root, _, names in os.walk(src):
        for n in names:
            out.append(os.path.relpath(os.path.join(root, n), src))
    return sorted(out)


def manifest_path(work, set_name):
    return os.path.join(work, f"{set_name}.manifest.json")


def upload(work, set_name, endpoint, token):
    names = src_names(work, set_name)
    paths = [os.path.join(work, set_name, n) for n in names]
    results = hf_xet.upload_files(paths, endpoint, token_info(token), None, None, "model")
    assert len(results) == len(paths), (len(results), len(paths))
    manifest = []
    for name, path, r in zip(names, paths, results):
        data = open(path, "rb").read()
        size = r.file_size
        assert size == len(data), (name, size, len(data))
        sha = hashlib.sha256(data).hexdigest()
        # The reference records the empty file's sha256 as zeros.
        if r.sha256 is not None and size > 0:
            assert r.sha256 == sha, (name, r.sha256, sha)
        manifest.append({"name": name, "hash": r.hash, "size": size, "sha256": sha})
    with open(manifest_path(work, set_name), "w") as f:
        json.dump(manifest, f, indent=1)
    return {"uploaded": len(manifest), "files": manifest}


def check_downloads(work, set_name, manifest, out):
    for m in manifest:
        got = open(os.path.join(work, out, m["name"]), "rb").read()
        want = open(os.path.join(work, set_name, m["name"]), "rb").read()
        if got != want:
            raise SystemExit(f"{m['name']}: downloaded {len(got)} bytes differ from the {len(want)} uploaded")


def download(work, set_name, endpoint, token, out):
    manifest = json.load(open(manifest_path(work, set_name)))
    infos = []
    for m in manifest:
        dest = os.path.join(work, out, m["name"])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        infos.append(hf_xet.PyXetDownloadInfo(dest, m["hash"], m["size"]))
    hf_xet.download_files(infos, endpoint, token_info(token), None, None)
    check_downloads(work, set_name, manifest, out)
    return {"downloaded": len(manifest)}


def session_download(work, set_name, refresh_url, token, out):
    manifest = json.load(open(manifest_path(work, set_name)))
    session = hf_xet.XetSession()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with session.new_file_download_group(token_refresh_url=refresh_url, token_refresh_headers=headers) as group:
        for m in manifest:
            dest = os.path.join(work, out, m["name"])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            group.start_download_file(hf_xet.XetFileInfo(m["hash"], m["size"]), dest)
    check_downloads(work, set_name, manifest, out)
    return {"downloaded": len(manifest)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("step", choices=["corpus", "upload", "download", "session-download"])
    p.add_argument("--work", required=True)
    p.add_argument("--endpoint")
    p.add_argument("--token")
    p.add_argument("--refresh-url")
    p.add_argument("--out", default="out")
    p.add_argument("--set", default="src", help="which file set (src or src2)")
    a = p.parse_args()
    if a.step == "corpus":
        res = {"files": corpus(a.work)}
    elif a.step == "upload":
        res = upload(a.work, a.set, a.endpoint, a.token)
    elif a.step == "download":
        res = download(a.work, a.set, a.endpoint, a.token, a.out)
    else:
        res = session_download(a.work, a.set, a.refresh_url, a.token, a.out)
    res["ok"] = True
    sys.stdout.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
