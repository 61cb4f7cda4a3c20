#![allow(incomplete_features)]
#![feature(generic_const_exprs)]
use rustile::prelude::*;
pub static CUBINS: rustile_host::Cubins = rustile_host::Cubins { crate_name: "ui", images: &[], ptx: &[], stale: None };

#[kernel(configs = [(BLOCK = 1024, WARPS = 4, SMEM = 300000)], grid = [cdiv(n, BLOCK)])]
pub fn copy(x: Ptr<f32>, y: PtrMut<f32>, n: usize) {
    let at = [0, program_id(0) * BLOCK];
    store(&BlockPtr::<f32, 1, BLOCK>::rows(y, 1, n, at), &load(&BlockPtr::<f32, 1, BLOCK>::rows(x, 1, n, at)));
}

fn main() {}
