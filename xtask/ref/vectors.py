"""Golden vectors from the reference client (hf_xet). Run by `cargo xtask vectors`.

usage: vectors.py CORPUS_DIR ARTIFACT_DIR WORK_DIR OUT_DIR

CORPUS_DIR and ARTIFACT_DIR hold the inputs that xet-testdata generates. The reference
hashes them and uploads them into local:// stores under WORK_DIR. Chunk lists are read
back from the reference's own shards (terms -> CAS entries), parsed here independently
of the Rust code so the two implementations check each other.
"""
import hashlib, importlib.metadata, json, os, shutil, sys

import hf_xet

BOOKEND = b"\xff" * 32
FLAG_VERIFY = 0x80000000
FLAG_META = 0x40000000


def hstr(b):
    return "".join("%016x" % int.from_bytes(b[i * 8:i * 8 + 8], "little") for i in range(4))


def u32(b, o):
    return int.from_bytes(b[o:o + 4], "little")


def parse_shard(data):
    assert data[32:40] == (2).to_bytes(8, "little"), "shard header version"
    pos = 48
    files = {}
    while True:
        h = data[pos:pos + 32]
        if h == BOOKEND:
            pos += 48
            break
        flags, n = u32(data, pos + 32), u32(data, pos + 36)
        pos += 48
        terms = []
        for _ in range(n):
            terms.append((hstr(data[pos:pos + 32]), u32(data, pos + 36), u32(data, pos + 40), u32(data, pos + 44)))
            pos += 48
        if flags & FLAG_VERIFY:
            pos += 48 * n
        sha = None
        if flags & FLAG_META:
            sha = hstr(data[pos:pos + 32])  # stored byte-swapped: the hash-string form is the digest hex
            pos += 48
        files[hstr(h)] = (terms, sha)
    xorbs = {}
    while True:
        h = data[pos:pos + 32]
        if h == BOOKEND:
            break
        n = u32(data, pos + 36)
        pos += 48
        chunks = []
        for _ in range(n):
            chunks.append((hstr(data[pos:pos + 32]), u32(data, pos + 36)))
            pos += 48
        xorbs[hstr(h)] = chunks
    return files, xorbs


def upload(paths, store, cache):
    os.environ["HF_XET_CACHE"] = cache
    return hf_xet.upload_files(paths, "local://" + store, None, None, None, "model")


def main():
    corpus_dir, art_dir, work, out = sys.argv[1:5]
    names = sorted(os.listdir(corpus_dir))
    art_names = sorted(os.listdir(art_dir))
    paths = [os.path.join(corpus_dir, n) for n in names]
    art_paths = [os.path.join(art_dir, n) for n in art_names]

    hashed = {os.path.basename(p): r.hash for p, r in zip(paths + art_paths, hf_xet.hash_files(paths + art_paths))}

    files, xorbs = {}, {}
    for group, store in ((paths, "store"), (art_paths, "art-store")):
        store = os.path.join(work, store)
        res = upload(group, store, os.path.join(work, "cache-" + os.path.basename(store)))
        for p, r in zip(group, res):
            assert r.hash == hashed[os.path.basename(p)], "upload and hash_files disagree on " + p
        sdir = os.path.join(store, "xet", "xorbs", "shards")
        for s in os.listdir(sdir):
            if s.endswith(".mdb"):
                f, x = parse_shard(open(os.path.join(sdir, s), "rb").read())
                files.update(f)
                xorbs.update(x)

    out_files = []
    for p in paths + art_paths:
        name = os.path.basename(p)
        data = open(p, "rb").read()
        h = hashed[name]
        terms, sha = files[h]
        chunks, off = [], 0
        for xorb, _unpacked, start, end in terms:
            for ch, ln in xorbs[xorb][start:end]:
                chunks.append({"offset": off, "len": ln, "hash": ch})
                off += ln
        assert off == len(data), "chunk lengths of %s sum to %d, not %d" % (name, off, len(data))
        digest = hashlib.sha256(data).hexdigest() if data else "0" * 64
        assert sha == digest, "FileMetadataExt of %s is %s, sha256 is %s" % (name, sha, digest)
        out_files.append({"name": name, "size": len(data), "hash": h, "sha256": digest, "chunks": chunks})

    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "files.json"), "w") as fh:
        json.dump({"reference": "hf_xet " + importlib.metadata.version("hf-xet"), "files": out_files}, fh, indent=1)
        fh.write("\n")

    # Real reference artifacts for the small artifact corpus.
    ref = os.path.join(out, "ref")
    shutil.rmtree(ref, ignore_errors=True)
    art_store = os.path.join(work, "art-store", "xet")
    for sub, src in (("xorbs", "xorbs/xorbs"), ("shards", "xorbs/shards"), ("shard-cache", "shard-cache")):
        os.makedirs(os.path.join(ref, sub))
        for n in sorted(os.listdir(os.path.join(art_store, src))):
            if n.endswith(".tagset"):
                continue
            shutil.copy(os.path.join(art_store, src, n), os.path.join(ref, sub, n))
    print("wrote %d golden files and reference artifacts to %s" % (len(out_files), out))


if __name__ == "__main__":
    main()
