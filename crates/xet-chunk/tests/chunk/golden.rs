//! Boundaries, chunk hashes and file hashes against vectors made with the reference client.

use xet_chunk::{Chunker, StreamChunker, boundaries_from_matches, chunk_data, find_matches};
use xet_hash::MerkleHash;
use xet_testdata::golden_files;

#[test]
fn golden_chunks_and_file_hashes() {
    let files = golden_files();
    assert!(!files.is_empty());
    for (corpus, golden) in files {
        let data = corpus.bytes();
        assert_eq!(
            data.len() as u64,
            golden.size,
            "{}: input size",
            golden.name
        );

        let ours = chunk_data(&data);
        let got: Vec<(u64, u64)> = ours.iter().map(|c| (c.offset, c.len as u64)).collect();
        let want: Vec<(u64, u64)> = golden.chunks.iter().map(|c| (c.offset, c.len)).collect();
        assert_eq!(got, want, "{}: chunk boundaries", golden.name);

        // The two-step parallel path, scanning the input in four pieces.
        let q = data.len() / 4;
        let matches: Vec<usize> = [0, q, 2 * q, 3 * q, data.len()]
            .windows(2)
            .flat_map(|w| find_matches(&data, w[0]..w[1]))
            .collect();
        let ends: Vec<u64> = boundaries_from_matches(&matches, data.len())
            .into_iter()
            .map(|e| e as u64)
            .collect();
        let want_ends: Vec<u64> = want.iter().map(|(o, l)| o + l).collect();
        assert_eq!(ends, want_ends, "{}: parallel path", golden.name);

        for (i, (c, g)) in ours.iter().zip(&golden.chunks).enumerate() {
            let want = MerkleHash::from_hex(&g.hash).expect("golden chunk hash parses");
            assert_eq!(c.hash, want, "{}: hash of chunk {i}", golden.name);
        }

        let pairs: Vec<(MerkleHash, u64)> = ours.iter().map(|c| (c.hash, c.len as u64)).collect();
        let want = MerkleHash::from_hex(&golden.hash).expect("golden file hash parses");
        assert_eq!(
            xet_hash::file_hash(&pairs),
            want,
            "{}: file hash",
            golden.name
        );
        assert_eq!(
            xet_chunk::file_hash(&data),
            want,
            "{}: file hash helper",
            golden.name
        );
    }
}

/// The same vectors through the streaming paths, with awkward block sizes.
#[test]
fn golden_boundaries_streaming() {
    for (corpus, golden) in golden_files() {
        let data = corpus.bytes();
        let want: Vec<u64> = golden.chunks.iter().map(|c| c.offset + c.len).collect();
        for block in [1usize, 63, 4097, 65_536, 200_003] {
            if block < 4097 && data.len() > 300_000 {
                continue; // keep the run short; small blocks are covered on smaller files
            }
            let mut chunker = Chunker::new();
            let mut ends = Vec::new();
            let mut off = 0u64;
            for b in data.chunks(block) {
                let mut rest = b;
                while let Some(n) = chunker.next_boundary(rest) {
                    off += n as u64;
                    ends.push(off);
                    rest = &rest[n..];
                }
                off += rest.len() as u64;
            }
            if chunker.finish().is_some() {
                ends.push(off);
            }
            assert_eq!(ends, want, "{}: Chunker, blocks of {block}", golden.name);

            let mut sc = StreamChunker::new();
            let mut ends = Vec::new();
            for b in data.chunks(block) {
                sc.push_with(b, |o, c| ends.push(o + c.len() as u64));
            }
            sc.finish_with(|o, c| ends.push(o + c.len() as u64));
            assert_eq!(
                ends, want,
                "{}: StreamChunker, blocks of {block}",
                golden.name
            );
        }
    }
}
