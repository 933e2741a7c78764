//! The `xet` binary: all logic lives in `xet-cli`.
fn main() -> std::process::ExitCode {
    xet_cli::main()
}
