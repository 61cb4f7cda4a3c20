//! Re-exports nothing: linking `rustile_ops` into this cdylib is what makes
//! rustc export its `#[no_mangle] extern "ptx-kernel"` entries into one PTX module.
#![no_std]
#![feature(abi_ptx)]
pub use rustile_ops;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // A device panic (an index out of range in a kernel) traps: the launch fails with a clear CUDA error.
    unsafe { core::arch::asm!("trap;", options(noreturn)) }
}
