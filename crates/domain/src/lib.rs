//! Plain domain types shared by every Drover crate.
//!
//! No I/O, no async, no HTTP, no SQL: only values and the rules about them.

pub mod dates;
