//! pandas on `hf://buckets/...` (issue 37): a parquet file written and read through
//! `huggingface_hub`'s filesystem against `xet serve`, and crossed with `xet sync` and
//! `xet cp` both ways, every byte compared.

use crate::hub_buckets::{python_ok, xet, xet_ok};
use crate::hub_serve::{Py, WRITE, serve};

/// A frame of a training log, the same for a given `n`.
const FRAME: &str = r#"
import pandas as pd
def frame(n):
    return pd.DataFrame({
        "step": range(n),
        "loss": [1.0 / (i + 1) for i in range(n)],
        "tag": ["run-%d" % (i % 7) for i in range(n)],
    })
"#;

#[test]
fn pandas_parquet_on_buckets_crossed_with_xet() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::with_pandas();
    let home = tempfile::tempdir().unwrap();
    py.hf_ok(url, &["buckets", "create", "org/frames"]);

    // pandas writes and reads back through hf://buckets/.
    let code = format!(
        "{FRAME}\nimport sys\ndf = frame(200_000)\ndf.to_parquet(sys.argv[1])\n\
         back = pd.read_parquet(sys.argv[1])\nassert back.equals(df), 'differs'\nprint(len(back))"
    );
    let out = python_ok(
        &py,
        url,
        &code,
        &["hf://buckets/org/frames/logs/train.parquet"],
    );
    assert_eq!(out.trim(), "200000");

    // xet sync down: pandas reads the local copy as the same frame, and xet cp to
    // stdout gives the bytes HfFileSystem gives.
    let down = tempfile::tempdir().unwrap();
    xet_ok(
        url,
        home.path(),
        &[
            "sync",
            "hf://buckets/org/frames",
            down.path().to_str().unwrap(),
        ],
    );
    let local = down.path().join("logs/train.parquet");
    let check = format!(
        "{FRAME}\nimport sys\nassert pd.read_parquet(sys.argv[1]).equals(frame(200_000))\nprint('ok')"
    );
    assert_eq!(
        python_ok(&py, url, &check, &[local.to_str().unwrap()]).trim(),
        "ok"
    );
    let by_xet = xet(
        url,
        home.path(),
        &["cp", "hf://buckets/org/frames/logs/train.parquet", "-"],
        None,
    );
    assert!(by_xet.status.success());
    let cat = "import sys\nfrom huggingface_hub import HfFileSystem\n\
               sys.stdout.buffer.write(HfFileSystem().cat_file(sys.argv[1]))";
    let by_hf = py.python(
        url,
        Some(WRITE),
        cat,
        &["hf://buckets/org/frames/logs/train.parquet"],
    );
    assert!(
        by_hf.status.success(),
        "{}",
        String::from_utf8_lossy(&by_hf.stderr)
    );
    assert_eq!(by_xet.stdout, by_hf.stdout);
    assert_eq!(by_xet.stdout, std::fs::read(&local).unwrap());

    // pandas writes locally, xet cp sends it, pandas reads it from the bucket.
    let mine = down.path().join("eval.parquet");
    let write = format!("{FRAME}\nimport sys\nframe(1234).to_parquet(sys.argv[1])");
    python_ok(&py, url, &write, &[mine.to_str().unwrap()]);
    xet_ok(
        url,
        home.path(),
        &[
            "cp",
            mine.to_str().unwrap(),
            "hf://buckets/org/frames/eval/",
        ],
    );
    let read = format!(
        "{FRAME}\nimport sys\nassert pd.read_parquet(sys.argv[1]).equals(frame(1234))\nprint('ok')"
    );
    assert_eq!(
        python_ok(
            &py,
            url,
            &read,
            &["hf://buckets/org/frames/eval/eval.parquet"]
        )
        .trim(),
        "ok"
    );
}
