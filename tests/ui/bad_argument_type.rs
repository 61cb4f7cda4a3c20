#![allow(incomplete_features)]
#![feature(generic_const_exprs)]
use rustile::prelude::*;
pub static CUBINS: rustile_host::Cubins = rustile_host::Cubins { crate_name: "ui", images: &[], ptx: &[], stale: None };

#[kernel(configs = [(BLOCK = 1024, WARPS = 4)], grid = [cdiv(n, BLOCK)])]
pub fn copy(x: &[f32], y: PtrMut<f32>, n: usize) {}

fn main() {}
