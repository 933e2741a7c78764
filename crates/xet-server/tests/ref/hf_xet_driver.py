#!/usr/bin/env python3
"""Drive the reference client (hf_xet 1.8.0) against a CAS endpoint.

Run by crates/xet-server/tests/{interop,ref_ranges,load}.rs; usable by hand too:

    python hf_xet_driver.py corpus   --work DIR
    python hf_xet_driver.py upload   --work DIR --endpoint URL [--token T] [--set S]
    python hf_xet_driver.py download --work DIR --endpoint URL [--token T] [--set S] [--out NAME]
    python hf_xet_driver.py session-download --work DIR --refresh-url URL --token T [--set S] [--out NAME]
    python hf_xet_driver.py ranges   --work DIR --endpoint URL [--token T] --spec FILE
    python hf_xet_driver.py load     --work DIR --endpoint URL --token W --read-token R
                                     --client I --clients N --seconds S

`corpus` writes deterministic files to DIR/src and DIR/src2 (a file meant to be
uploaded after src: it shares chunks with src). `upload` uploads the set DIR/<S> with the
legacy `hf_xet.upload_files` and writes DIR/<S>.manifest.json (name, hash, size, sha256
per file). `download` fetches every manifest entry with `hf_xet.download_files` into
DIR/<out> and compares the bytes with DIR/<S>. `session-download` does the same through the session
API, seeding no token and no endpoint: the client first GETs the token refresh URL (with
`Authorization: Bearer T`) and takes the endpoint from its `casUrl`.

`ranges` reads a JSON list of {"hash", "size" (or null: unknown to the client), "start",
"end" (either null: open), "out", "unordered"} from FILE and downloads each byte range with
the session streaming API (`XetDownloadStreamGroup.download_stream(info, start, end)`, or
`download_unordered_stream` when "unordered"), writing the bytes to DIR/<out>.

`load` is one of N concurrent clients (run by crates/xet-server/tests/load.rs). The
clients start together and all upload the same shared base files at once, then each loops
for S seconds (at least two rounds): write a round of files (its own random data, shared
bases identical across clients, shared bases with a random insertion, splices of two
bases, a tiny or empty file), upload them, publish their manifest in DIR/manifests/, then
download them and files other clients published (legacy `download_files`) plus one byte
range of another client's file (streaming API), checking every byte against the sources.
Files are left in DIR/c<I>/ so other clients (and the test) can compare against them.

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


def ranges(work, endpoint, token, spec_path):
    spec = json.load(open(spec_path))
    session = hf_xet.XetSession()
    kwargs = {"token": token, "token_expiry_unix_secs": FAR_FUTURE} if token else {}
    n = 0
    with session.new_download_stream_group(endpoint=endpoint, **kwargs) as group:
        for r in spec:
            info = hf_xet.XetFileInfo(r["hash"], r["size"])
            dest = os.path.join(work, r["out"])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if r["unordered"]:
                parts = list(group.download_unordered_stream(info, start=r["start"], end=r["end"]))
                size = sum(len(d) for _, d in parts)
                buf = bytearray(size)
                for off, d in parts:
                    if off + len(d) > size:
                        raise SystemExit(f"{r}: part at {off} of {len(d)} bytes past {size}")
                    buf[off:off + len(d)] = d
                data = bytes(buf)
            else:
                data = b"".join(group.download_stream(info, start=r["start"], end=r["end"]))
            with open(dest, "wb") as f:
                f.write(data)
            n += 1
    return {"ranges": n}


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def published(mdir):
    """Every manifest entry published so far (by any client)."""
    out = []
    for n in sorted(os.listdir(mdir)):
        if n.endswith(".json"):
            out.extend(json.load(open(os.path.join(mdir, n))))
    return out


def load(work, endpoint, token, read_token, client, clients, seconds):
    start = time.monotonic()
    deadline = start + seconds
    mdir = os.path.join(work, "manifests")
    os.makedirs(mdir, exist_ok=True)
    # Identical in every client: uploaded concurrently, deduplicated against each other.
    bases = [random.Random(7000 + k).randbytes(n) for k, n in enumerate([1_500_000, 900_000, 2_100_000])]
    rng = random.Random(1000 + client)
    stats = {"rounds": 0, "uploaded": 0, "downloaded_own": 0, "downloaded_other": 0, "ranges": 0,
             "other_clients": []}
    others_seen = set()
    # Start together, then all upload the same files at once: identical xorbs and shards
    # race on the server (unless a client's dedup query already finds another's).
    def barrier(name):
        open(os.path.join(mdir, f"{name}.{client}"), "w").close()
        while sum(n.startswith(name + ".") for n in os.listdir(mdir)) < clients:
            if any(n.startswith("failed.") for n in os.listdir(mdir)):
                raise SystemExit(f"client {client}: another client failed")
            if time.monotonic() > start + 120:
                raise SystemExit(f"client {client}: other clients never reached {name}")
            time.sleep(0.02)
    barrier("ready")
    shared = os.path.join(work, f"c{client}", "shared")
    os.makedirs(shared, exist_ok=True)
    shared_paths = []
    for k, b in enumerate(bases):
        shared_paths.append(os.path.join(shared, f"base{k}.bin"))
        with open(shared_paths[-1], "wb") as f:
            f.write(b)
    # One file per call: its xorb is then the same in every client (several files in one
    # call are packed in an order that depends on thread timing).
    results = [hf_xet.upload_files([pth], endpoint, token_info(token), None, None, "model")[0]
               for pth in shared_paths]
    entries = [{"client": client, "round": -1, "path": os.path.relpath(pth, work), "hash": r.hash,
                "size": r.file_size, "sha256": hashlib.sha256(b).hexdigest()}
               for pth, r, b in zip(shared_paths, results, bases)]
    write_atomic(os.path.join(mdir, f"c{client}-shared.json"), json.dumps(entries))
    stats["uploaded"] += len(entries)
    rnd = 0
    while rnd < 2 or time.monotonic() < deadline:
        # 1. This round's files.
        d = os.path.join(work, f"c{client}", f"r{rnd}")
        b = rng.choice(bases)
        pos = rng.randrange(len(b))
        x, y = rng.randrange(len(bases[0])), rng.randrange(len(bases[2]))
        files = {
            "own.bin": rng.randbytes(rng.randint(50_000, 1_000_000)),
            "base.bin": rng.choice(bases),
            "edited.bin": b[:pos] + rng.randbytes(rng.randint(1, 5000)) + b[pos:],
            "splice.bin": bases[0][:x] + bases[2][y:],
            "tiny.bin": rng.choice([b"", b"!", rng.randbytes(rng.randint(2, 20_000))]),
        }
        names = sorted(files)
        paths = [os.path.join(d, n) for n in names]
        os.makedirs(d, exist_ok=True)
        for n, pth in zip(names, paths):
            with open(pth, "wb") as f:
                f.write(files[n])
        # 2. Upload, check what the client reports, publish.
        results = hf_xet.upload_files(paths, endpoint, token_info(token), None, None, "model")
        assert len(results) == len(paths), (len(results), len(paths))
        entries = []
        for n, pth, r in zip(names, paths, results):
            assert r.file_size == len(files[n]), (pth, r.file_size, len(files[n]))
            entries.append({"client": client, "round": rnd, "path": os.path.relpath(pth, work),
                            "hash": r.hash, "size": r.file_size,
                            "sha256": hashlib.sha256(files[n]).hexdigest()})
        write_atomic(os.path.join(mdir, f"c{client}-r{rnd}.json"), json.dumps(entries))
        stats["uploaded"] += len(entries)
        # Before the first downloads, wait for every client's first upload, so each client
        # downloads other clients' files while they are still uploading.
        if rnd == 0:
            barrier("round0")
        # 3. Download this round's files and a random pick of other clients' files.
        others = [e for e in published(mdir) if e["client"] != client]
        picks = rng.sample(others, min(len(others), 4))
        out = os.path.join(work, f"c{client}", "out")
        os.makedirs(out, exist_ok=True)
        todo = [(e, os.path.join(out, f"{i}.bin")) for i, e in enumerate(entries + picks)]
        infos = [hf_xet.PyXetDownloadInfo(dest, e["hash"], e["size"]) for e, dest in todo]
        hf_xet.download_files(infos, endpoint, token_info(read_token), None, None)
        for e, dest in todo:
            got = sha256_file(dest)
            if got != e["sha256"]:
                raise SystemExit(f"client {client} round {rnd}: {e['path']} ({e['hash']}) "
                                 f"downloaded as {os.path.getsize(dest)} bytes with sha256 {got}")
            os.remove(dest)
        stats["downloaded_own"] += len(entries)
        stats["downloaded_other"] += len(picks)
        others_seen.update(e["client"] for e in picks)
        # 4. One byte range of another client's file, against the bytes of its source file.
        sized = [e for e in others if e["size"] > 1]
        if sized:
            e = rng.choice(sized)
            a = rng.randrange(e["size"])
            z = rng.randint(a + 1, e["size"])
            want = open(os.path.join(work, e["path"]), "rb").read()[a:z]
            session = hf_xet.XetSession()
            group = session.new_download_stream_group(endpoint=endpoint, token=read_token,
                                                      token_expiry_unix_secs=FAR_FUTURE)
            got = b"".join(group.download_stream(hf_xet.XetFileInfo(e["hash"], e["size"]), start=a, end=z))
            group.finish()
            if got != want:
                raise SystemExit(f"client {client}: range {a}..{z} of {e['path']} ({e['hash']}) differs "
                                 f"({len(got)} bytes, want {len(want)})")
            stats["ranges"] += 1
        rnd += 1
    stats["rounds"] = rnd
    stats["other_clients"] = sorted(others_seen)
    stats["seconds"] = round(time.monotonic() - start, 2)
    return stats


def main():
    p = argparse.ArgumentParser()
    p.add_argument("step", choices=["corpus", "upload", "download", "session-download", "ranges", "load"])
    p.add_argument("--work", required=True)
    p.add_argument("--endpoint")
    p.add_argument("--token")
    p.add_argument("--refresh-url")
    p.add_argument("--out", default="out")
    p.add_argument("--set", default="src", help="which file set (src or src2)")
    p.add_argument("--spec", help="ranges: JSON list of ranges to download")
    p.add_argument("--read-token", help="load: token for downloads")
    p.add_argument("--client", type=int, default=0)
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--seconds", type=float, default=10.0)
    a = p.parse_args()
    if a.step == "corpus":
        res = {"files": corpus(a.work)}
    elif a.step == "upload":
        res = upload(a.work, a.set, a.endpoint, a.token)
    elif a.step == "download":
        res = download(a.work, a.set, a.endpoint, a.token, a.out)
    elif a.step == "session-download":
        res = session_download(a.work, a.set, a.refresh_url, a.token, a.out)
    elif a.step == "ranges":
        res = ranges(a.work, a.endpoint, a.token, a.spec)
    else:
        try:
            res = load(a.work, a.endpoint, a.token, a.read_token, a.client, a.clients, a.seconds)
        except BaseException:
            # Let clients waiting for this one at a barrier stop.
            os.makedirs(os.path.join(a.work, "manifests"), exist_ok=True)
            open(os.path.join(a.work, "manifests", f"failed.{a.client}"), "w").close()
            raise
    res["ok"] = True
    sys.stdout.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
