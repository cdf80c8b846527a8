//! The proof examples' command lines: clap parsing followed by the checks clap's types cannot
//! express, with clap's usage error (exit status 2) for a bad option.

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

/// A command line clap parses, with the checks its types cannot express.
pub trait CheckedArgs: Parser {
    /// The checks clap's types cannot express: `Err` holds the message for the user.
    ///
    /// # Errors
    /// The first check the arguments fail, as a message naming the options at fault.
    fn check(&self) -> Result<(), String>;

    /// Parses the process's arguments, then [`check`](CheckedArgs::check)s them; a bad
    /// option prints clap's usage error (or `check`'s message as one) and exits the process
    /// with status 2.
    fn parse_or_exit() -> Self {
        let args = Self::parse();
        if let Err(msg) = args.check() {
            usage::<Self>(&msg);
        }
        args
    }

    /// Parses `line` (the arguments after the program's name), then
    /// [`check`](CheckedArgs::check)s them, for tests of a command line.
    ///
    /// # Errors
    /// Clap's message for an option it refuses, else `check`'s message.
    fn parse_line(line: &[&str]) -> Result<Self, String> {
        let program = Self::command().get_name().to_owned();
        let args =
            Self::try_parse_from(std::iter::once(program.as_str()).chain(line.iter().copied()))
                .map_err(|e| e.to_string())?;
        args.check()?;
        Ok(args)
    }

    /// Asserts that each of `lines` (the arguments after the program's name) is refused by
    /// [`parse_line`](CheckedArgs::parse_line).
    ///
    /// # Panics
    /// On the first line accepted, naming it.
    fn assert_refused(lines: &[&[&str]]) {
        for line in lines {
            assert!(Self::parse_line(line).is_err(), "{line:?} was accepted");
        }
    }
}

/// Prints `msg` as clap prints a usage error of `A`'s command and exits with status 2.
pub fn usage<A: CommandFactory>(msg: &str) -> ! {
    A::command().error(ErrorKind::ValueValidation, msg).exit()
}
