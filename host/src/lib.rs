//! Rustile host runtime: find the GPU, hold typed device tensors, pick the
//! embedded cubin for the device, launch kernels, and time them with events.
//!
//! Built on cudarc with libcuda loaded at run time, so binaries build and
//! start on machines without CUDA and report `Error::NoDriver` there.

mod cubin;
mod elem;
mod error;
mod gpu;
mod param;
mod tma;

pub use cubin::{native_arch, pick_image, Cubins, Image};
pub use elem::Elem;
pub use error::{Error, Result};
pub use gpu::{Event, Gpu, Graph, Tensor};
pub use param::Param;
pub use tma::{TileMap, MAPS_KEPT};
