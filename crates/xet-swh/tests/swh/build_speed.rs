//! Build time of the hash function for large key sets. Ignored by default (it wants a
//! release build); run with
//! `cargo test --release -p xet-swh --test swh build_speed -- --ignored --nocapture`
//! (`XET_SWH_KEYS=1000000,10000000` sets the sizes).

use std::time::Instant;

use std::io::Cursor;

use xet_swh::{ChdPh, ReadLimits, SeedPolicy, ShardReader, ShardWriter};

fn keys(m: usize) -> Vec<[u8; 32]> {
    let mut x = 0x0123_4567_89ab_cdefu64;
    (0..m)
        .map(|_| {
            std::array::from_fn::<u8, 32, _>(|i| {
                if i % 8 == 0 {
                    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
                }
                let mut z = x ^ (i as u64);
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) as u8
            })
        })
        .collect()
}

#[test]
#[ignore = "timing; run in release with --ignored"]
fn build_speed() {
    let sizes: Vec<usize> = std::env::var("XET_SWH_KEYS")
        .unwrap_or_else(|_| "1000000,10000000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("a key count"))
        .collect();
    for m in sizes {
        let ks = keys(m);
        let t = Instant::now();
        let f = ChdPh::build(&ks, &SeedPolicy::Swh).expect("build");
        let build = t.elapsed();
        let t = Instant::now();
        let dump = f.dump().expect("dump");
        let dump_time = t.elapsed();
        let t = Instant::now();
        let mut seen = vec![false; f.n() as usize];
        for k in &ks {
            let s = f.search32(k) as usize;
            assert!(!seen[s]);
            seen[s] = true;
        }
        let search = t.elapsed();
        let max = f.displacements().iter().max().copied().unwrap_or(0);
        println!(
            "m = {m}: build {build:.2?} (seed {}, n {}, max displacement {max}), dump {dump_time:.2?} \
             ({} bytes, {:.2} bits/key), all lookups {search:.2?}",
            f.seed(),
            f.n(),
            dump.len(),
            dump.len() as f64 * 8.0 / m as f64
        );

        // The whole writer (8-byte values, into memory) and the reader.
        let t = Instant::now();
        let mut w =
            ShardWriter::new(Cursor::new(Vec::with_capacity(m * 56 + (1 << 20)))).expect("writer");
        for (i, k) in ks.iter().enumerate() {
            w.add(k, &(i as u64).to_le_bytes()).expect("add");
        }
        let added = t.elapsed();
        let bytes = w.finish().expect("finish").0.into_inner();
        let written = t.elapsed();
        let t = Instant::now();
        let r = ShardReader::open(&bytes, &ReadLimits::default()).expect("open");
        let opened = t.elapsed();
        let t = Instant::now();
        for (i, k) in ks.iter().enumerate() {
            assert_eq!(r.get(k).expect("get"), Some(&(i as u64).to_le_bytes()[..]));
        }
        let got = t.elapsed();
        let t = Instant::now();
        r.verify().expect("verify");
        let verified = t.elapsed();
        println!(
            "m = {m}: writer {written:.2?} (adds {added:.2?}, {} bytes), open {opened:.2?}, \
             all gets {got:.2?}, verify {verified:.2?}",
            bytes.len()
        );
    }
}
