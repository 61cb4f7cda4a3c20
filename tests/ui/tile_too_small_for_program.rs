#![allow(incomplete_features)]
#![feature(generic_const_exprs)]
use rustile::prelude::*;
pub static CUBINS: rustile_host::Cubins = rustile_host::Cubins { crate_name: "ui", images: &[], ptx: &[], stale: None };

// A 1×256 tile is 32 chunks of 8, but the program has 256 threads.
#[kernel(configs = [(BLOCK = 256, WARPS = 8)], grid = [cdiv(n, BLOCK)])]
pub fn copy(x: Ptr<f32>, y: PtrMut<f32>, n: usize) {
    let at = [0, program_id(0) * BLOCK];
    store(&BlockPtr::<f32, 1, BLOCK>::rows(y, 1, n, at), &load(&BlockPtr::<f32, 1, BLOCK>::rows(x, 1, n, at)));
}

fn main() {
    let (x, mut y) = (vec![0.0f32; 300], vec![0.0f32; 300]);
    copy::cpu(0, &x, &mut y, 300);
}
