//! The proof examples' command lines: clap parsing followed by the checks clap's types cannot
//! express, with clap's usage error (exit status 2) for a bad option.

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

/// Parses the process's arguments as `A`, then `check`s them; a bad option prints clap's
/// usage error (or `check`'s message as one) and exits the process with status 2.
pub fn parse_or_exit<A: Parser>(check: fn(&A) -> Result<(), String>) -> A {
    let args = A::parse();
    if let Err(msg) = check(&args) {
        usage::<A>(&msg);
    }
    args
}

/// Prints `msg` as clap prints a usage error of `A`'s command and exits with status 2.
pub fn usage<A: CommandFactory>(msg: &str) -> ! {
    A::command().error(ErrorKind::ValueValidation, msg).exit()
}

/// Parses `line` (the arguments after the program name `program`) as `A`, then `check`s
/// them, for tests of a command line.
///
/// # Errors
/// Clap's message for an option it refuses, else `check`'s message.
pub fn parse_checked<A: Parser>(
    program: &str,
    line: &[&str],
    check: fn(&A) -> Result<(), String>,
) -> Result<A, String> {
    let args = A::try_parse_from(std::iter::once(program).chain(line.iter().copied()))
        .map_err(|e| e.to_string())?;
    check(&args)?;
    Ok(args)
}
