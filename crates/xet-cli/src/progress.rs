//! Progress bars on stderr, only when stderr is a terminal and output is not JSON/quiet.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

pub fn bar(enabled: bool, total: u64, what: &str) -> ProgressBar {
    if !enabled || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let tmpl = if color {
        "{msg} {bar:30.cyan/blue} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}"
    } else {
        "{msg} {bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}"
    };
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template(tmpl)
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}
