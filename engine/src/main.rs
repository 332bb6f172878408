//! The `engine` binary; everything lives in the library's [`engine_cli::cli`].

fn main() -> std::process::ExitCode {
    engine_cli::cli::main()
}
