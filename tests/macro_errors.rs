//! Kernels that must be rejected at compile time, with the message a user
//! should see (the expected output is in `ui/*.stderr`).
#[test]
fn bad_kernels_are_compile_errors() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/*.rs");
}
