//! The compile-error catalogue of `#[idempotent]` (`ui/fail/*.stderr`) and the forms it
//! accepts (`ui/pass`).
//!
//! Compiler output changes between Rust releases, so the `.stderr` files are pinned to the
//! toolchain they were recorded with. To re-record after a toolchain change, run
//! `TRYBUILD=overwrite cargo test -p idem-tests --test ui` and read every diff as a change to the
//! error messages users see.

#[rustversion::attr(
    not(stable(1.95)),
    ignore = "the .stderr files were recorded with rustc 1.95; re-record them (see above)"
)]
#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui/fail/*.rs");
    cases.pass("ui/pass/*.rs");
}
