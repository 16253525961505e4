//! The `arbor` binary: everything is in the library ([`arbor_cli::main`]).

fn main() -> std::process::ExitCode {
    arbor_cli::main()
}
