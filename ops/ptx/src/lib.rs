//! Re-exports nothing: linking `rustile_ops` into this cdylib is what makes
//! rustc export its `#[no_mangle] extern "ptx-kernel"` entries into one PTX module.
#![no_std]
#![feature(stdarch_nvptx)]
pub use rustile_ops;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // A device panic (an index out of range in a kernel) traps: the launch
    // fails with a CUDA error that the host reports, instead of going on.
    unsafe { core::arch::nvptx::trap() }
}
