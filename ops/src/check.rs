//! Argument checks shared by the host APIs: every problem is an error value
//! with a message, before anything reaches the GPU.
use rustile::{Elem, KernelConfig};
use rustile_host::{Error, Result, Tensor};

/// A contiguous tensor of exactly `shape`.
pub(crate) fn expect_shape<T: Elem>(what: &str, t: &Tensor<T>, shape: &[usize]) -> Result<()> {
    if t.shape() != shape {
        return Err(Error::Shape(format!("{what} has shape {:?}, expected {:?}", t.shape(), shape)));
    }
    if !t.is_contiguous() {
        return Err(Error::Shape(format!("{what} must be contiguous (row-major); its strides are {:?}", t.strides())));
    }
    Ok(())
}

/// A contiguous 2-D tensor: its (rows, cols).
pub(crate) fn matrix<T: Elem>(what: &str, t: &Tensor<T>) -> Result<(usize, usize)> {
    let &[rows, cols] = t.shape() else {
        return Err(Error::Shape(format!("{what} must be 2-D [rows, cols]; it has shape {:?}", t.shape())));
    };
    expect_shape(what, t, &[rows, cols])?;
    Ok((rows, cols))
}

/// The index of the first config (in the kernel's `CONFIGS` order) that `fits`, else the last one.
pub fn pick_config(configs: &[KernelConfig], fits: impl Fn(&KernelConfig) -> bool) -> usize {
    configs.iter().position(fits).unwrap_or(configs.len() - 1)
}
