//! The body of `POST .../preupload/{rev}` (`xet-hub::api::PreuploadRequest`) and what the
//! server makes of each file: its path (`RepoPath::parse`), its base64 sample and the
//! upload mode (`mode::upload_mode`).
//!
//! Input: the request body, any bytes.
//! Checks: no panic; the mode follows its written rules: an empty file is `regular`, a
//! file over `REGULAR_MAX_SIZE` or whose sample holds a NUL is `lfs`; the answer does not
//! depend on sample bytes past the first 512.
#![no_main]

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use xet_hub::RepoPath;
use xet_hub::api::{PreuploadRequest, UploadMode};
use xet_hub::mode::{REGULAR_MAX_SIZE, upload_mode};

fuzz_target!(|data: &[u8]| {
    let Ok(req) = serde_json::from_slice::<PreuploadRequest>(data) else {
        return;
    };
    for f in &req.files {
        let _ = RepoPath::parse(&f.path);
        let sample = base64::engine::general_purpose::STANDARD
            .decode(f.sample.as_bytes())
            .unwrap_or_default();
        let mode = upload_mode(&f.path, f.size, &sample);
        if f.size == 0 {
            assert_eq!(mode, UploadMode::Regular);
        } else if f.size > REGULAR_MAX_SIZE || sample.iter().take(512).any(|&b| b == 0) {
            assert_eq!(mode, UploadMode::Lfs);
        }
        if sample.len() > 512 {
            assert_eq!(upload_mode(&f.path, f.size, &sample[..512]), mode);
        }
    }
});
