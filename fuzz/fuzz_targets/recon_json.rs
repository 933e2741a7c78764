//! Reconstruction answers as the client receives them: `serde_json::from_slice` into
//! `xet_cas::wire::{ReconstructionV2, ReconstructionV1, BatchReconstructionV1}` and the
//! conversion to the domain type (`Reconstruction::from_v2` / `from_v1`). Also the other
//! JSON bodies a client or server reads: `Grant`, `GrantRequest`, `WasInserted`,
//! `ShardResultV1`, `TokenRefresh`, `ErrorBody`.
//!
//! Checks: no panic; every accepted wire value serializes and parses back equal; a
//! reconstruction that converts converts back (`to_v2`/`to_v1`) to a wire value that
//! converts to the same terms and the same set of fetches (v2 may regroup fetches that
//! share a URL), and hash strings come back in canonical (lower case) form.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::{Serialize, de::DeserializeOwned};
use xet_cas::Reconstruction;
use xet_cas::wire::*;

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    data: &[u8],
) -> Option<T> {
    let v: T = serde_json::from_slice(data).ok()?;
    let text = serde_json::to_vec(&v).expect("serialize");
    let back: T = serde_json::from_slice(&text).expect("parse what we wrote");
    assert_eq!(back, v, "JSON round trip");
    Some(v)
}

fn sorted_fetches(r: &Reconstruction) -> Vec<String> {
    let mut v: Vec<String> = r.fetches.iter().map(|f| format!("{f:?}")).collect();
    v.sort();
    v
}

fn no_url(_: &xet_cas::XorbFetch) -> String {
    unreachable!("fetches from the wire carry their URL")
}

fuzz_target!(|data: &[u8]| {
    if let Some(w) = round_trip::<ReconstructionV2>(data)
        && let Ok(r) = Reconstruction::from_v2(&w)
    {
        let again =
            Reconstruction::from_v2(&r.to_v2(no_url)).expect("to_v2 of a parsed value converts");
        assert_eq!(again.terms, r.terms);
        assert_eq!(again.offset_into_first_range, r.offset_into_first_range);
        assert_eq!(sorted_fetches(&again), sorted_fetches(&r));
        let v1 =
            Reconstruction::from_v1(&r.to_v1(no_url)).expect("to_v1 of a parsed value converts");
        assert_eq!(v1.terms, r.terms);
        assert_eq!(sorted_fetches(&v1), sorted_fetches(&r));
    }
    if let Some(w) = round_trip::<ReconstructionV1>(data)
        && let Ok(r) = Reconstruction::from_v1(&w)
    {
        let again =
            Reconstruction::from_v1(&r.to_v1(no_url)).expect("to_v1 of a parsed value converts");
        assert_eq!(again, r, "v1 conversion round trip");
    }
    round_trip::<BatchReconstructionV1>(data);
    round_trip::<Grant>(data);
    round_trip::<GrantRequest>(data);
    round_trip::<WasInserted>(data);
    round_trip::<ShardResultV1>(data);
    round_trip::<TokenRefresh>(data);
    round_trip::<ErrorBody>(data);
});
