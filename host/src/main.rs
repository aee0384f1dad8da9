//! The `iar` command line. Argument parsing and output live in `cli`; the
//! work is done by the library.

mod cli;

fn main() -> std::process::ExitCode {
    iar::tune_allocator();
    cli::main()
}
