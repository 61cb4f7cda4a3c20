#![allow(incomplete_features)]
#![feature(generic_const_exprs)]
use rustile::prelude::*;
pub static CUBINS: rustile_host::Cubins = rustile_host::Cubins { crate_name: "ui", images: &[], ptx: &[], stale: None };

#[kernel(configs = [(BLOCK = 1024, WARPS = 4)], grid = [cdiv(n, BLOCK)], dtypes = [f64])]
pub fn copy<T: Elem>(x: Ptr<T>, y: PtrMut<T>, n: usize) {}

fn main() {}
