//! The GPU: one device, one stream, the modules loaded on it, and tensors.
//!
//! Everything is issued on one non-blocking stream, so work is ordered the way
//! it was called; [`Gpu::concurrently`] lets two independent pieces of work
//! overlap through a second stream, ordered with the first at both ends.
//! Memory, copies and launches go through cudarc's `result`/`sys` layers,
//! because its safe `CudaSlice` needs cudarc's own element trait and ours
//! (bf16, f16, fp8) is defined by the DSL.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::marker::PhantomData;
use std::cell::Cell;
use std::panic::catch_unwind;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{self, CUdevice_attribute as Attr, CUresult};
use cudarc::driver::{result, CudaContext, CudaEvent, CudaStream, DriverError};

use crate::cubin::{parts, pick_image, Cubins, Image};
use crate::param::{arg_ptrs, pack_all, Param};
use crate::{Elem, Error, Result};

/// Above this much dynamic shared memory a kernel must opt in per function.
const DEFAULT_SMEM: u32 = 48 * 1024;

/// A GPU, or the CPU interpreter standing in for one
/// ([`Gpu::interpreter`]): the same tensors, launches and errors, with
/// every kernel run by its CPU entry, so code written against `Gpu` (a
/// model, a training step) runs and is tested on a machine without one.
pub struct Gpu {
    name: String,
    cc: (u32, u32),
    sms: u32,
    l2: usize,
    mem_total: usize,
    smem_optin: u32,
    /// `None`: the CPU interpreter.
    pub(crate) cuda: Option<Cuda>,
}

/// What a real device holds.
pub(crate) struct Cuda {
    /// Holds the (primary) context alive too.
    stream: Arc<CudaStream>,
    /// The second stream of [`Gpu::concurrently`], made on first use.
    side: OnceLock<Arc<CudaStream>>,
    /// Streams of other libraries that [`Gpu::on_stream`] has run work on,
    /// wrapped once each and never freed (a handful a process), so that
    /// a launch finds its stream without a lock.
    foreign: Mutex<Vec<&'static Arc<CudaStream>>>,
    /// Stream-ordered allocation (cuMemAllocAsync) avoids the implicit device
    /// sync of cuMemFree, so freeing a temporary does not stall timed work.
    stream_alloc: bool,
    /// Loaded modules, keyed by the address of their `Cubins` static.
    modules: Mutex<HashMap<usize, Module>>,
    /// TMA tensor maps in slots of one device buffer, by what they
    /// describe; past [`crate::tma::MAPS_KEPT`] the least recently used
    /// slot is reused, except those a capture read (`tma.rs`).
    pub(crate) tensor_maps: Mutex<crate::tma::MapSlots>,
    /// Inside [`Gpu::capture`]: launches skip their error query, which
    /// would end the capture.
    capturing: std::sync::atomic::AtomicBool,
    /// While [`Gpu::profile`] is on: every launch's kernel and events.
    profile: Mutex<Option<Vec<(String, CudaEvent, CudaEvent)>>>,
}

struct Module {
    /// One per image of the arch (the build assembles kernel families apart).
    handles: Vec<sys::CUmodule>,
    /// Every kernel of every image, by name, read from the driver when the
    /// images load; empty where the driver cannot list them (before CUDA
    /// 12.4), and then each name is tried in each image.
    index: HashMap<String, sys::CUfunction>,
    crate_name: &'static str,
    arch: &'static str,
    funcs: HashMap<String, Func>,
}

#[derive(Clone, Copy)]
struct Func {
    handle: sys::CUfunction,
    /// The dynamic shared memory this function is already allowed to use.
    smem_allowed: u32,
}

// The raw handles are plain driver ids, valid from any thread once the
// context is current; the Mutex around the map serialises their use.
unsafe impl Send for Module {}

/// The driver's name and text for an error, e.g. "CUDA_ERROR_INVALID_VALUE (invalid argument)".
fn describe(e: DriverError) -> String {
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned());
    let text = e.error_string().map(|s| s.to_string_lossy().into_owned());
    match (name, text) {
        (Ok(n), Ok(t)) => format!("{n} ({t})"),
        _ => format!("{:?}", e.0),
    }
}

pub(crate) fn cuda(what: &str) -> impl FnOnce(DriverError) -> Error + '_ {
    move |e| Error::Cuda(format!("{what}: {}", describe(e)))
}

/// Finds libcuda and initialises it, once per process. cudarc panics when the
/// library or one of its symbols is missing, so look first and catch the rest.
/// Every function of `modules` by name. A name looked up in an image that
/// lacks it is a failed driver call, which compute-sanitizer reports as an
/// error in the user's program, so the names are read once instead. Empty
/// where the driver cannot list a module's functions.
fn function_index(modules: &[sys::CUmodule]) -> HashMap<String, sys::CUfunction> {
    let list = || -> Option<HashMap<String, sys::CUfunction>> {
        let mut index = HashMap::new();
        for &m in modules {
            let mut count = 0u32;
            unsafe { sys::cuModuleGetFunctionCount(&mut count, m) }.result().ok()?;
            let mut funcs = vec![std::ptr::null_mut(); count as usize];
            unsafe { sys::cuModuleEnumerateFunctions(funcs.as_mut_ptr(), count, m) }.result().ok()?;
            for f in funcs {
                let mut name = std::ptr::null();
                unsafe { sys::cuFuncGetName(&mut name, f) }.result().ok()?;
                let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_str().ok()?;
                index.insert(name.to_string(), f);
            }
        }
        Some(index)
    };
    // cudarc panics when the driver library lacks a function (before CUDA 12.4).
    catch_unwind(std::panic::AssertUnwindSafe(list)).ok().flatten().unwrap_or_default()
}

fn probe() -> Result<()> {
    static PROBE: OnceLock<Result<()>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            find_libcuda()?;
            let init = catch_unwind(|| {
                result::init()?;
                result::device::get_count()
            });
            match init {
                Err(panic) => Err(Error::NoDriver(panic_text(panic))),
                Ok(Err(e)) if e.0 == CUresult::CUDA_ERROR_NO_DEVICE => Err(Error::NoGpu),
                Ok(Err(e)) if e.0 == CUresult::CUDA_ERROR_STUB_LIBRARY => Err(Error::NoDriver(format!("cuInit: {}", describe(e)))),
                // A driver that is there but fails is not "no GPU": say what failed.
                Ok(Err(e)) => Err(Error::Cuda(format!("cuInit: {}", describe(e)))),
                Ok(Ok(0)) => Err(Error::NoGpu),
                Ok(Ok(_)) => Ok(()),
            }
        })
        .clone()
}

/// Tries the same library names cudarc will; on failure says what the OS said.
fn find_libcuda() -> Result<()> {
    let mut last = String::from("no candidate names");
    for name in cudarc::get_lib_name_candidates("cuda") {
        // SAFETY: loading libcuda runs no user-visible initialisers.
        match unsafe { libloading::Library::new(&name) } {
            Ok(_) => return Ok(()),
            // libloading's own text is just "dlopen failed"; the reason is its source.
            Err(e) => last = std::error::Error::source(&e).map_or(e.to_string(), |s| s.to_string()),
        }
    }
    Err(Error::NoDriver(last))
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "the driver library panicked while loading".into())
}

/// Set RUSTILE_LAUNCH_BLOCKING=1 to wait after every launch, so a faulting
/// kernel is the one named in the error (like CUDA_LAUNCH_BLOCKING).
fn blocking_launches() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("RUSTILE_LAUNCH_BLOCKING").is_ok_and(|v| v == "1"))
}

impl Gpu {
    /// Opens device 0. Returns `NoDriver` or `NoGpu` (never panics) where
    /// there is no usable GPU.
    pub fn new() -> Result<Gpu> {
        probe()?;
        catch_unwind(Self::open).unwrap_or_else(|p| Err(Error::NoDriver(panic_text(p))))
    }

    /// Whether `Gpu::new` can succeed; tests use it to skip with a message.
    pub fn available() -> bool {
        probe().is_ok()
    }

    fn open() -> Result<Gpu> {
        let ctx = CudaContext::new(0).map_err(cuda("creating a context on device 0"))?;
        let attr = |a: Attr| ctx.attribute(a).map_err(cuda("reading a device attribute"));
        let cc = ctx.compute_capability().map_err(cuda("reading the compute capability"))?;
        Ok(Gpu {
            name: ctx.name().map_err(cuda("reading the device name"))?,
            cc: (cc.0 as u32, cc.1 as u32),
            sms: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            l2: attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as usize,
            smem_optin: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32,
            mem_total: ctx.total_mem().map_err(cuda("reading the memory size"))?,
            cuda: Some(Cuda {
                stream_alloc: ctx.has_async_alloc(),
                stream: ctx.new_stream().map_err(cuda("creating a stream"))?,
                side: OnceLock::new(),
                foreign: Mutex::new(Vec::new()),
                modules: Mutex::new(HashMap::new()),
                // Allocated here, never inside a capture: see `tma`.
                tensor_maps: Mutex::new(crate::tma::MapSlots::new(
                    unsafe { result::malloc_sync(crate::tma::MapSlots::bytes()) }.map_err(cuda("allocating the tensor maps' slots"))?,
                )),
                capturing: false.into(),
                profile: Mutex::new(None),
            }),
        })
    }

    /// The CPU interpreter as a device: tensors in host memory, each launch
    /// run by the kernel's CPU entry (every program, on a rayon pool, each
    /// access bounds-checked), in call order. It has every kernel, Hopper's
    /// too (`supported` says yes), so ops take the programs they take on an
    /// H100; it reports compute capability (0, 0), so no tuned table
    /// applies. A stand-in for tests and small runs, slow.
    pub fn interpreter() -> Gpu {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        Gpu { name: "CPU interpreter".into(), cc: (0, 0), sms: threads, l2: 0, mem_total: 0, smem_optin: 227 * 1024, cuda: None }
    }

    /// Whether this is [`Gpu::interpreter`].
    pub fn is_interpreter(&self) -> bool {
        self.cuda.is_none()
    }

    /// The device's state, or an error naming what needs a GPU.
    pub(crate) fn dev(&self, what: &str) -> Result<&Cuda> {
        self.cuda.as_ref().ok_or_else(|| Error::Invalid(format!("{what} needs a GPU; this is the CPU interpreter")))
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn compute_capability(&self) -> (u32, u32) {
        self.cc
    }
    pub fn sm_count(&self) -> u32 {
        self.sms
    }
    /// The most dynamic shared memory one program may opt into, in bytes.
    pub fn smem_per_block(&self) -> u32 {
        self.smem_optin
    }
    pub fn l2_bytes(&self) -> usize {
        self.l2
    }
    /// Total device memory in bytes; `mem_info` has the free amount.
    pub fn mem_bytes(&self) -> usize {
        self.mem_total
    }
    /// (free, total) device memory in bytes, right now.
    /// (0, 0) on the interpreter.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        if self.is_interpreter() {
            return Ok((0, 0));
        }
        self.bind()?;
        result::mem_get_info().map_err(cuda("reading free memory"))
    }

    /// The driver wants the context current on the calling thread; a Gpu may
    /// be shared between threads, so every entry point makes sure of it.
    pub(crate) fn bind(&self) -> Result<()> {
        match &self.cuda {
            Some(c) => c.stream.context().bind_to_thread().map_err(cuda("making the context current")),
            None => Ok(()),
        }
    }

    /// The stream all of this GPU's work goes to, for libraries that take a
    /// cudarc stream (cuBLAS in the bench, graph capture): their work is
    /// then ordered with ours. An error on the interpreter.
    pub fn cuda_stream(&self) -> Result<&Arc<CudaStream>> {
        Ok(&self.dev("a CUDA stream")?.stream)
    }

    /// Only called where `self.cuda` is known to be there.
    pub(crate) fn raw_stream(&self) -> sys::CUstream {
        self.queue().cu_stream()
    }

    /// Where this thread's work goes now: the side stream inside
    /// [`Gpu::concurrently`]'s second closure, the caller's inside
    /// [`Gpu::on_stream`], else the stream.
    fn queue(&self) -> &Arc<CudaStream> {
        let c = self.cuda.as_ref().expect("queue() is only used on a GPU");
        let me = self as *const Gpu as usize;
        match c.side.get() {
            Some(side) if ON_SIDE.with(|g| g.get()) == me => side,
            _ => self.main_queue(),
        }
    }

    /// [`Gpu::queue`] outside [`Gpu::concurrently`]'s second closure: the
    /// caller's stream inside [`Gpu::on_stream`], else the stream.
    fn main_queue(&self) -> &Arc<CudaStream> {
        let c = self.cuda.as_ref().expect("main_queue() is only used on a GPU");
        match ON_FOREIGN.with(|f| f.get()) {
            Some(on) if on.gpu == self as *const Gpu as usize => on.stream,
            _ => &c.stream,
        }
    }

    /// Runs `f` with this thread's work on this GPU (launches, copies,
    /// allocations and their frees, [`Gpu::sync`]) queued on `stream`, a
    /// `CUstream` of another library (PyTorch's current stream, as
    /// `torch.cuda.current_stream().cuda_stream`; 0 is the legacy default
    /// stream), so that it is ordered with that library's work. When `stream`
    /// is being captured into a CUDA graph as the call begins, its launches
    /// skip their error query, which would end the capture. On the
    /// interpreter, `f` just runs.
    ///
    /// # Safety
    /// `stream` must be a stream of this device's primary context (the one
    /// PyTorch and the CUDA runtime use), alive until `f`'s work is done.
    pub unsafe fn on_stream<R>(&self, stream: u64, f: impl FnOnce() -> Result<R>) -> Result<R> {
        let Some(c) = &self.cuda else { return f() };
        self.bind()?;
        let wrapped: &'static Arc<CudaStream> = {
            let mut known = c.foreign.lock().unwrap_or_else(|p| p.into_inner());
            match known.iter().find(|s| s.cu_stream() as u64 == stream) {
                Some(s) => s,
                None => {
                    let made = Box::leak(Box::new(unsafe { c.stream.context().wrap_borrowed_stream(stream as sys::CUstream) }));
                    known.push(made);
                    made
                }
            }
        };
        // Asked once a call, not a launch: a capture does not begin or end inside an op.
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let asked = unsafe { sys::cuStreamIsCapturing(wrapped.cu_stream(), &mut status) };
        let capturing = asked != CUresult::CUDA_SUCCESS || status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let on = Foreign { gpu: self as *const Gpu as usize, stream: wrapped, capturing };
        let _restore = OnForeign(ON_FOREIGN.with(|g| g.replace(Some(on))));
        f()
    }

    /// Whether this thread's queue is being captured into a CUDA graph
    /// (by [`Gpu::capture`], or by another library on its stream).
    pub fn capturing(&self) -> bool {
        let Some(c) = &self.cuda else { return false };
        let me = self as *const Gpu as usize;
        c.capturing.load(std::sync::atomic::Ordering::Relaxed) || ON_FOREIGN.with(|f| f.get()).is_some_and(|on| on.gpu == me && on.capturing)
    }

    /// Runs `a`, then `b`, whose GPU work may overlap: what `b` queues goes to
    /// a second stream that first waits for everything queued before this
    /// call, and what is queued after this call waits for both. For
    /// independent kernels that each leave part of the GPU idle at times
    /// (the attention backward's dK/dV and dQ: the second fills the first's
    /// last wave).
    pub fn concurrently(&self, a: impl FnOnce() -> Result<()>, b: impl FnOnce() -> Result<()>) -> Result<()> {
        let Some(c) = &self.cuda else {
            a()?;
            return b();
        };
        self.bind()?;
        let side = match c.side.get() {
            Some(side) => side,
            None => {
                let made = c.stream.fork().map_err(cuda("creating a second stream"))?;
                c.side.get_or_init(|| made)
            }
        };
        // The queue now (the caller's stream inside `on_stream`), not ours:
        // the side waits for that queue's work, and it waits for the side's,
        // which also keeps both inside a graph capture of that queue.
        let main = self.main_queue().clone();
        side.join(&main).map_err(cuda("ordering the second stream after the first"))?;
        a()?;
        let queued = {
            let _on_side = OnSide::enter(self);
            b()
        };
        main.join(side).map_err(cuda("ordering the stream after the second"))?;
        queued
    }

    fn free_bytes(&self) -> usize {
        self.mem_info().map(|(free, _)| free).unwrap_or(0)
    }

    /// Allocates uninitialised memory for a row-major tensor.
    pub fn alloc<T: Elem>(&self, shape: &[usize]) -> Result<Tensor<T>> {
        let numel = checked_numel(shape)?;
        let bytes = numel
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::Shape(format!("{shape:?} of {} overflows usize bytes", T::NAME)))?;
        let tensor = |buf: Buf| {
            let ptr = buf.ptr();
            Ok(Tensor { buf: Arc::new(buf), ptr, shape: shape.to_vec(), strides: row_major(shape), _elem: PhantomData })
        };
        if bytes == 0 {
            return tensor(Buf::Empty); // the driver refuses empty allocations
        }
        let Some(c) = &self.cuda else {
            // 16-byte words: every element type's alignment, and a chunk's.
            return tensor(Buf::Host(vec![0u128; bytes.div_ceil(16)]));
        };
        self.bind()?;
        if !c.stream_alloc && self.capturing() {
            // cuMemAlloc/cuMemFree would end the capture (and the free fails unseen, in a drop).
            return Err(Error::Cuda(format!(
                "allocating {bytes} bytes inside a CUDA graph capture needs CUDA's stream-ordered allocator, which this context does not offer"
            )));
        }
        let got = unsafe {
            if c.stream_alloc {
                result::malloc_async(self.raw_stream(), bytes)
            } else {
                result::malloc_sync(bytes)
            }
        };
        let ptr = got.map_err(|e| match e.0 {
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => Error::OutOfMemory { requested: bytes, free: self.free_bytes() },
            _ => cuda("allocating device memory")(e),
        })?;
        let (queue, main) = (self.queue(), self.main_queue());
        let main = (!Arc::ptr_eq(queue, main)).then(|| main.clone());
        tensor(Buf::Device { ptr, stream: queue.clone(), after: main, stream_ordered: c.stream_alloc })
    }

    pub fn upload<T: Elem>(&self, data: &[T], shape: &[usize]) -> Result<Tensor<T>> {
        if checked_numel(shape)? != data.len() {
            return Err(Error::Shape(format!("{} values do not fill shape {shape:?}", data.len())));
        }
        let mut t = self.alloc(shape)?;
        self.write(&mut t, data)?;
        Ok(t)
    }

    /// Copies `data` into `t` (of as many elements, contiguous), waiting
    /// until it is there: how a step's new inputs reach buffers allocated
    /// once (and read by a captured graph).
    pub fn write<T: Elem>(&self, t: &mut Tensor<T>, data: &[T]) -> Result<()> {
        t.require_contiguous("write")?;
        if t.numel() != data.len() {
            return Err(Error::Shape(format!("write: {} values into a tensor of shape {:?}", data.len(), t.shape)));
        }
        if data.is_empty() {
            return Ok(());
        }
        if self.is_interpreter() {
            t.host_mut("write").copy_from_slice(data);
            return Ok(());
        }
        self.bind()?;
        unsafe { result::memcpy_htod_async(t.device_ptr(), data, self.raw_stream()) }.map_err(cuda("copying to the GPU"))?;
        // `data` is pageable host memory the caller may drop right after.
        self.sync()
    }

    pub fn download<T: Elem>(&self, t: &Tensor<T>) -> Result<Vec<T>> {
        t.require_contiguous("download")?;
        let mut out = vec![T::default(); t.numel()];
        if self.is_interpreter() {
            out.copy_from_slice(t.host("download"));
            return Ok(out);
        }
        if !out.is_empty() {
            self.bind()?;
            unsafe { result::memcpy_dtoh_async(&mut out, t.device_ptr(), self.raw_stream()) }
                .map_err(cuda("copying from the GPU"))?;
            self.sync()?;
        }
        Ok(out)
    }

    /// Sets every byte of `t`, e.g. 0xFF to poison an output before a check.
    pub fn fill_bytes<T: Elem>(&self, t: &mut Tensor<T>, byte: u8) -> Result<()> {
        if t.bytes() == 0 {
            return Ok(());
        }
        if self.is_interpreter() {
            let bytes = t.bytes();
            unsafe { std::ptr::write_bytes(t.ptr as *mut u8, byte, bytes) };
            return Ok(());
        }
        self.bind()?;
        unsafe { result::memset_d8_async(t.device_ptr(), byte, t.bytes(), self.raw_stream()) }
            .map_err(cuda("filling device memory"))
    }

    pub fn copy_d2d<T: Elem>(&self, src: &Tensor<T>, dst: &mut Tensor<T>) -> Result<()> {
        src.require_contiguous("copy_d2d")?;
        dst.require_contiguous("copy_d2d")?;
        if src.numel() != dst.numel() {
            return Err(Error::Shape(format!(
                "copy_d2d from {:?} into {:?}: element counts differ",
                src.shape, dst.shape
            )));
        }
        if src.bytes() == 0 {
            return Ok(());
        }
        if self.is_interpreter() {
            // `copy` (memmove): a view may overlap its source.
            unsafe { std::ptr::copy(src.ptr as *const u8, dst.ptr as *mut u8, src.bytes()) };
            return Ok(());
        }
        self.bind()?;
        let stream = self.raw_stream();
        unsafe { result::memcpy_dtod_async(dst.device_ptr(), src.device_ptr(), src.bytes(), stream) }
            .map_err(cuda("copying on the GPU"))
    }

    /// Copies `rows` rows of `cols` elements from `src` (rows `ld[0]` elements
    /// apart) into `dst` (rows `ld[1]` apart), both from their first element,
    /// on the GPU: e.g. into a copy whose rows are padded to a 16-byte multiple.
    pub fn copy_rows<T: Elem>(&self, src: &Tensor<T>, dst: &mut Tensor<T>, [rows, cols]: [usize; 2], ld: [usize; 2]) -> Result<()> {
        src.require_contiguous("copy_rows")?;
        dst.require_contiguous("copy_rows")?;
        if rows == 0 || cols == 0 {
            return Ok(());
        }
        for (what, t, ld) in [("source", src, ld[0]), ("destination", &*dst, ld[1])] {
            if ld < cols || (rows - 1) * ld + cols > t.numel() {
                return Err(Error::Shape(format!(
                    "copy_rows: {rows} rows of {cols} elements, {ld} apart, do not fit the {what} of {:?}",
                    t.shape
                )));
            }
        }
        let size = std::mem::size_of::<T>();
        if self.is_interpreter() {
            for r in 0..rows {
                unsafe { std::ptr::copy((src.ptr as *const T).add(r * ld[0]), (dst.ptr as *mut T).add(r * ld[1]), cols) };
            }
            return Ok(());
        }
        let copy = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: src.device_ptr(),
            srcArray: std::ptr::null_mut(),
            srcPitch: ld[0] * size,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst.device_ptr(),
            dstArray: std::ptr::null_mut(),
            dstPitch: ld[1] * size,
            WidthInBytes: cols * size,
            Height: rows,
        };
        self.bind()?;
        unsafe { sys::cuMemcpy2DAsync_v2(&copy, self.raw_stream()) }.result().map_err(cuda("copying rows on the GPU"))
    }

    /// Waits for all work issued so far. A kernel that faulted earlier is
    /// reported here (run with RUSTILE_LAUNCH_BLOCKING=1 to pin it down).
    pub fn sync(&self) -> Result<()> {
        match &self.cuda {
            Some(_) => self.queue().synchronize().map_err(cuda("waiting for the GPU")),
            None => Ok(()),
        }
    }

    /// Launches `kernel` from the image of `cubins` that fits this GPU.
    pub fn launch(
        &self,
        cubins: &'static Cubins,
        kernel: &str,
        grid: [u32; 3],
        block: [u32; 3],
        smem_bytes: u32,
        params: &[Param],
    ) -> Result<()> {
        let fail = |msg: String| Error::Launch { kernel: kernel.to_string(), msg };
        if self.is_interpreter() {
            return Err(fail("the CPU interpreter runs a kernel's CPU entry (its `launch` does), not a cubin".into()));
        }
        if grid.contains(&0) || block.contains(&0) {
            return Err(fail(format!("grid {grid:?} and block {block:?} may not contain 0")));
        }
        if smem_bytes > self.smem_optin {
            return Err(fail(format!(
                "asks for {smem_bytes} bytes of dynamic shared memory; this GPU allows {} per block",
                self.smem_optin
            )));
        }
        self.bind()?;
        let func = self.function(cubins, kernel, smem_bytes)?;

        // The slots must stay alive across cuLaunchKernel, which reads them.
        let mut slots = pack_all(params);
        let mut args = arg_ptrs(&mut slots);
        let (g, b) = ((grid[0], grid[1], grid[2]), (block[0], block[1], block[2]));
        let timed = self.profile_event()?;
        let launched =
            unsafe { result::launch_kernel(func, g, b, smem_bytes, self.raw_stream(), &mut args) };
        launched.map_err(|e| self.launch_error(kernel, e))?;
        if let Some(start) = timed {
            self.profile_record(kernel, start)?;
        }

        if self.capturing() {
            return Ok(());
        }
        // Faults of earlier kernels only surface on a later call; a query
        // reports them near their cause without waiting for this launch.
        match unsafe { sys::cuStreamQuery(self.raw_stream()) } {
            CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_NOT_READY => {}
            e => return Err(self.launch_error(kernel, DriverError(e))),
        }
        if blocking_launches() {
            self.queue().synchronize().map_err(|e| self.launch_error(kernel, e))?;
        }
        Ok(())
    }

    fn launch_error(&self, kernel: &str, e: DriverError) -> Error {
        match e.0 {
            // The driver does not say how much it wanted (registers, local memory).
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => Error::OutOfMemory { requested: 0, free: self.free_bytes() },
            _ => Error::Launch { kernel: kernel.to_string(), msg: describe(e) },
        }
    }

    /// The function handle, loading the module on first use and raising the
    /// shared-memory limit when a launch needs more than the default 48 KiB.
    fn function(&self, cubins: &'static Cubins, kernel: &str, smem_bytes: u32) -> Result<sys::CUfunction> {
        let mut modules = self.dev("loading kernels")?.modules.lock().unwrap_or_else(|p| p.into_inner());
        let key = cubins as *const Cubins as usize;
        if !modules.contains_key(&key) {
            modules.insert(key, self.load_module(cubins)?);
        }
        let module = modules.get_mut(&key).expect("inserted above");

        let func = match module.funcs.get(kernel) {
            Some(f) => *f,
            None if !module.index.is_empty() => {
                let handle = *module.index.get(kernel).ok_or_else(|| Error::Launch {
                    kernel: kernel.into(),
                    msg: format!("no such kernel in the {} images of `{}` (rebuild with `cargo xtask build`?)", module.arch, module.crate_name),
                })?;
                Func { handle, smem_allowed: DEFAULT_SMEM }
            }
            None => {
                let name = CString::new(kernel)
                    .map_err(|_| Error::Launch { kernel: kernel.into(), msg: "name contains NUL".into() })?;
                let mut found = None;
                for &m in &module.handles {
                    match unsafe { result::module::get_function(m, name.clone()) } {
                        Ok(handle) => {
                            found = Some(handle);
                            break;
                        }
                        Err(e) if e.0 == CUresult::CUDA_ERROR_NOT_FOUND => {}
                        Err(e) => return Err(Error::Launch { kernel: kernel.into(), msg: describe(e) }),
                    }
                }
                let handle = found.ok_or_else(|| Error::Launch {
                    kernel: kernel.into(),
                    msg: format!("no such kernel in the {} images of `{}` (rebuild with `cargo xtask build`?)", module.arch, module.crate_name),
                })?;
                Func { handle, smem_allowed: DEFAULT_SMEM }
            }
        };
        let mut func = func;
        if smem_bytes > func.smem_allowed {
            let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            unsafe { result::function::set_function_attribute(func.handle, attr, smem_bytes as i32) }
                .map_err(|e| Error::Launch {
                    kernel: kernel.into(),
                    msg: format!("raising dynamic shared memory to {smem_bytes} bytes: {}", describe(e)),
                })?;
            func.smem_allowed = smem_bytes;
        }
        module.funcs.insert(kernel.to_string(), func);
        Ok(func.handle)
    }

    fn load_module(&self, cubins: &'static Cubins) -> Result<Module> {
        let image = pick_image(self.cc, cubins)?;
        if let Some(why) = cubins.stale {
            eprintln!("rustile: the kernel images of `{}` may be stale ({why}); run `cargo xtask build`", cubins.crate_name);
        }
        if let Image::Ptx { arch, .. } = image {
            eprintln!(
                "rustile: no cubin of `{}` for {} ({}); JIT-compiling its {arch} PTX instead",
                cubins.crate_name,
                self.name,
                crate::cubin::native_arch(self.cc)
            );
        }
        let mut handles = Vec::new();
        for part in parts(image, cubins) {
            let loaded = load_image(&part).map_err(|(e, log)| {
                let log = if log.is_empty() { String::new() } else { format!("; driver log: {log}") };
                Error::Cuda(format!("loading the {} image of `{}`: {}{log}", image.arch(), cubins.crate_name, describe(e)))
            });
            match loaded {
                Ok(h) => handles.push(h),
                Err(e) => {
                    for h in handles {
                        let _ = unsafe { result::module::unload(h) };
                    }
                    return Err(e);
                }
            }
        }
        let index = function_index(&handles);
        Ok(Module { handles, index, crate_name: cubins.crate_name, arch: image.arch(), funcs: HashMap::new() })
    }

    /// Records the work `f` queues on this GPU's stream as a CUDA graph
    /// instead of running it; [`Graph::replay`] then runs it all with one
    /// launch. Everything `f` uses must stay allocated while the graph
    /// lives, and `f` must not wait for the GPU (no `sync`, download or
    /// upload, nor a first use of a kernel module: run the work once before
    /// capturing it; TMA maps may be new, see [`Gpu::tensor_map`]). What
    /// would break the capture is an error.
    pub fn capture(&self, f: impl FnOnce() -> Result<()>) -> Result<Graph> {
        use std::sync::atomic::Ordering::Relaxed;
        let c = self.dev("capturing a CUDA graph")?;
        self.bind()?;
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        c.stream.begin_capture(mode).map_err(cuda("starting a graph capture"))?;
        c.capturing.store(true, Relaxed);
        let queued = f();
        c.capturing.store(false, Relaxed);
        let graph = c.stream.end_capture(sys::CUgraphInstantiate_flags(0)).map_err(cuda("ending the graph capture"));
        queued?;
        let graph = graph?.ok_or_else(|| Error::Cuda("the graph capture recorded nothing".into()))?;
        graph.upload().map_err(cuda("uploading the graph"))?;
        Ok(Graph(graph))
    }

    /// Starts (`true`) or stops timing every launch apart, for
    /// [`Gpu::profile_report`]: where a step's time goes, kernel by kernel.
    /// Each launch then records two events, which costs a little time.
    pub fn profile(&self, on: bool) -> Result<()> {
        let c = self.dev("profiling launches")?;
        *c.profile.lock().unwrap_or_else(|p| p.into_inner()) = on.then(Vec::new);
        Ok(())
    }

    /// The start event of a launch being profiled (on the queue it goes to).
    fn profile_event(&self) -> Result<Option<CudaEvent>> {
        let Some(c) = &self.cuda else { return Ok(None) };
        if c.profile.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return Ok(None);
        }
        let e = c.stream.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda("creating an event"))?;
        e.record(self.queue()).map_err(cuda("recording an event"))?;
        Ok(Some(e))
    }

    fn profile_record(&self, kernel: &str, start: CudaEvent) -> Result<()> {
        let c = self.dev("profiling launches")?;
        let end = c.stream.context().new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda("creating an event"))?;
        end.record(self.queue()).map_err(cuda("recording an event"))?;
        if let Some(list) = c.profile.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            list.push((kernel.to_string(), start, end));
        }
        Ok(())
    }

    /// The launches timed since [`Gpu::profile`] was turned on, summed by
    /// kernel entry: `(entry, launches, milliseconds)`, the longest first.
    /// Waits for them. (Launches that overlap on two streams each count
    /// their own time.)
    pub fn profile_report(&self) -> Result<Vec<(String, usize, f64)>> {
        let c = self.dev("profiling launches")?;
        self.sync()?;
        let list = c.profile.lock().unwrap_or_else(|p| p.into_inner()).replace(Vec::new()).unwrap_or_default();
        let mut by: HashMap<String, (usize, f64)> = HashMap::new();
        for (name, a, b) in list {
            let ms = a.elapsed_ms(&b).map_err(cuda("reading event times"))? as f64;
            let e = by.entry(name).or_default();
            e.0 += 1;
            e.1 += ms;
        }
        let mut out: Vec<(String, usize, f64)> = by.into_iter().map(|(k, (n, ms))| (k, n, ms)).collect();
        out.sort_by(|a, b| b.2.total_cmp(&a.2));
        Ok(out)
    }

    /// A timing event on this GPU's context (on the interpreter, a clock).
    pub fn event(&self) -> Result<Event> {
        let Some(c) = &self.cuda else {
            return Ok(Event::Host(Mutex::new(None)));
        };
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT); // timing enabled
        c.stream.context().new_event(flags).map(Event::Cuda).map_err(cuda("creating an event"))
    }

    pub fn event_pair(&self) -> Result<(Event, Event)> {
        Ok((self.event()?, self.event()?))
    }

    /// Records `e` on the stream, after all work issued so far.
    pub fn record(&self, e: &Event) -> Result<()> {
        match (e, &self.cuda) {
            (Event::Cuda(e), Some(c)) => e.record(&c.stream).map_err(cuda("recording an event")),
            (Event::Host(at), None) => {
                *at.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
                Ok(())
            }
            _ => Err(Error::Invalid("record: the event belongs to another device".into())),
        }
    }

    /// Milliseconds the GPU spent on the work `f` issues. Waits for it.
    pub fn time(&self, mut f: impl FnMut() -> Result<()>) -> Result<f32> {
        let (start, end) = self.event_pair()?;
        self.record(&start)?;
        f()?;
        self.record(&end)?;
        start.elapsed_ms(&end)
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // Nothing to report to from here; a failed unload leaks one module.
        if self.is_interpreter() || self.bind().is_err() {
            return;
        }
        let Some(c) = &mut self.cuda else { return };
        let modules = c.modules.get_mut().unwrap_or_else(|p| p.into_inner());
        for h in modules.drain().flat_map(|(_, m)| m.handles) {
            let _ = unsafe { result::module::unload(h) };
        }
        let _ = c.stream.synchronize();
        let _ = unsafe { result::free_sync(c.tensor_maps.get_mut().unwrap_or_else(|p| p.into_inner()).base()) };
    }
}

/// Loads a cubin or PTX, returning the JIT/loader log on failure.
fn load_image(image: &Image) -> std::result::Result<sys::CUmodule, (DriverError, String)> {
    // The loader reads an ELF cubin in place, so give it an 8-aligned copy;
    // PTX must be NUL-terminated.
    let data: Vec<u64> = match *image {
        Image::Cubin { bytes, .. } => {
            let mut words = vec![0u64; bytes.len().div_ceil(8)];
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast(), bytes.len()) };
            words
        }
        Image::Ptx { text, .. } => {
            let mut words = vec![0u64; (text.len() + 1).div_ceil(8)];
            unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), words.as_mut_ptr().cast(), text.len()) };
            words
        }
    };
    let mut log = vec![0u8; 16 * 1024];
    let mut opts = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    // Option values travel as pointers; the size is an integer in one.
    let mut vals: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
    let mut module = std::ptr::null_mut();
    let res = unsafe {
        sys::cuModuleLoadDataEx(&mut module, data.as_ptr().cast(), 2, opts.as_mut_ptr(), vals.as_mut_ptr())
    };
    match res.result() {
        Ok(()) => Ok(module),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err((e, String::from_utf8_lossy(&log[..end]).trim().to_string()))
        }
    }
}

/// Work captured by [`Gpu::capture`], replayed on the same stream.
pub struct Graph(cudarc::driver::CudaGraph);

impl Graph {
    /// Queues the whole captured work again (asynchronous, like a launch).
    pub fn replay(&self) -> Result<()> {
        self.0.launch().map_err(cuda("replaying a CUDA graph"))
    }
}

/// A CUDA event with timing, for measuring work on a `Gpu`'s stream (on
/// the interpreter, the time it was recorded: its launches run at once).
pub enum Event {
    Cuda(CudaEvent),
    Host(Mutex<Option<std::time::Instant>>),
}

impl Event {
    /// Milliseconds from `self` to `end`; waits for both to complete.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        match (self, end) {
            (Event::Cuda(a), Event::Cuda(b)) => a.elapsed_ms(b).map_err(cuda("reading event times")),
            (Event::Host(a), Event::Host(b)) => {
                let at = |m: &Mutex<Option<std::time::Instant>>| *m.lock().unwrap_or_else(|p| p.into_inner());
                match (at(a), at(b)) {
                    (Some(a), Some(b)) => Ok(b.saturating_duration_since(a).as_secs_f32() * 1e3),
                    _ => Err(Error::Invalid("elapsed_ms: an event was never recorded".into())),
                }
            }
            _ => Err(Error::Invalid("elapsed_ms: events of two devices".into())),
        }
    }
}

thread_local! {
    /// The `Gpu` (its address) whose work this thread queues on the side
    /// stream: inside `concurrently`'s second closure; 0 outside.
    static ON_SIDE: Cell<usize> = const { Cell::new(0) };
}

/// Inside [`Gpu::on_stream`]: the `Gpu` (its address), the caller's stream
/// it queues on, and whether that stream was being captured when the call began.
#[derive(Clone, Copy)]
struct Foreign {
    gpu: usize,
    stream: &'static Arc<CudaStream>,
    capturing: bool,
}

thread_local! {
    /// Where this thread's work goes inside [`Gpu::on_stream`]; `None` outside.
    static ON_FOREIGN: Cell<Option<Foreign>> = const { Cell::new(None) };
}

/// Restores the thread's previous foreign stream when dropped.
struct OnForeign(Option<Foreign>);

impl Drop for OnForeign {
    fn drop(&mut self) {
        ON_FOREIGN.with(|g| g.set(self.0));
    }
}

/// Sends this thread's work on a GPU to its side stream until dropped (so
/// also when `concurrently`'s second closure panics).
struct OnSide(usize);

impl OnSide {
    fn enter(gpu: &Gpu) -> OnSide {
        OnSide(ON_SIDE.with(|g| g.replace(gpu as *const Gpu as usize)))
    }
}

impl Drop for OnSide {
    fn drop(&mut self) {
        ON_SIDE.with(|g| g.set(self.0));
    }
}

/// The memory of one allocation, freed when the last tensor using it (the
/// allocation and its views) drops.
enum Buf {
    /// Device memory, freed in stream order after the work that uses it.
    Device {
        ptr: u64,
        /// The stream it was allocated on and is freed on.
        stream: Arc<CudaStream>,
        /// Allocated on the side stream: the main stream, whose later work may
        /// use it too, so the free waits for it first.
        after: Option<Arc<CudaStream>>,
        stream_ordered: bool,
    },
    /// The interpreter's memory.
    Host(Vec<u128>),
    /// Memory another owner (PyTorch, NumPy) keeps alive: on the device, or
    /// (`host`) the interpreter's host memory. Never freed by us.
    Borrowed { ptr: u64, host: bool },
    Empty,
}

impl Buf {
    fn ptr(&self) -> u64 {
        match self {
            Buf::Device { ptr, .. } => *ptr,
            Buf::Host(v) => v.as_ptr() as u64,
            Buf::Borrowed { ptr, .. } => *ptr,
            Buf::Empty => 0,
        }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let Buf::Device { ptr, stream, after, stream_ordered } = self else { return };
        // Errors here (usually a context already broken by a faulting kernel)
        // have nowhere to go, and the memory dies with the context anyway.
        let _ = stream.context().bind_to_thread();
        if let Some(main) = after {
            let _ = stream.join(main);
        }
        let _ = unsafe {
            if *stream_ordered {
                result::free_async(*ptr, stream.cu_stream())
            } else {
                result::free_sync(*ptr)
            }
        };
    }
}

/// A tensor in device memory (host memory on the interpreter): shape,
/// strides in elements, typed by its element. Views ([`Tensor::view`])
/// share an allocation, as PyTorch's do.
pub struct Tensor<T> {
    buf: Arc<Buf>,
    /// The first element's address.
    ptr: u64,
    shape: Vec<usize>,
    strides: Vec<usize>,
    _elem: PhantomData<T>,
}

// Device addresses are plain numbers, and the interpreter's memory is only
// touched through the `Gpu` that made it, like device memory.
unsafe impl<T> Send for Tensor<T> {}
unsafe impl<T> Sync for Tensor<T> {}

impl<T: Elem> Tensor<T> {
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn bytes(&self) -> usize {
        self.numel() * size_of::<T>()
    }
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }
    /// The tensor's address as a kernel argument.
    pub fn param(&self) -> Param {
        Param::Ptr(self.ptr)
    }

    /// Elements `start .. start + numel(shape)` of this contiguous tensor
    /// as a tensor of `shape` over the same memory (PyTorch's `view` of a
    /// flat range): one parameter of a model's flat parameter buffer. What
    /// a kernel writes into either is in both; the memory lives until the
    /// last of them drops.
    pub fn view(&self, start: usize, shape: &[usize]) -> Result<Tensor<T>> {
        self.require_contiguous("view")?;
        let n = checked_numel(shape)?;
        if start.checked_add(n).is_none_or(|end| end > self.numel()) {
            return Err(Error::Shape(format!("view of {n} elements from {start} does not fit a tensor of shape {:?}", self.shape)));
        }
        let ptr = if n == 0 { self.ptr } else { self.ptr + (start * size_of::<T>()) as u64 };
        Ok(Tensor { buf: self.buf.clone(), ptr, shape: shape.to_vec(), strides: row_major(shape), _elem: PhantomData })
    }

    /// This contiguous tensor's bytes as a tensor of `U` of `shape`, over
    /// the same memory (PyTorch's `view(dtype)`): packed FP4 pairs as 32-bit
    /// words of eight values, for a kernel that reads them a word at a time.
    /// The byte counts must match and the address suit `U`'s alignment.
    pub fn view_as<U: Elem>(&self, shape: &[usize]) -> Result<Tensor<U>> {
        self.require_contiguous("view_as")?;
        let bytes = checked_numel(shape)?.checked_mul(size_of::<U>());
        if bytes != Some(self.bytes()) {
            return Err(Error::Shape(format!("view_as: {:?} {} ({} bytes) is not {shape:?} {}", self.shape, T::NAME, self.bytes(), U::NAME)));
        }
        if self.ptr % core::mem::align_of::<U>() as u64 != 0 {
            return Err(Error::Misaligned(format!("view_as: a {} tensor at {:#x} is not aligned for {}", T::NAME, self.ptr, U::NAME)));
        }
        Ok(Tensor { buf: self.buf.clone(), ptr: self.ptr, shape: shape.to_vec(), strides: row_major(shape), _elem: PhantomData })
    }

    /// A tensor over memory another owner keeps alive (a PyTorch tensor's
    /// `data_ptr()`, a NumPy array's buffer): `ptr` is a device address on a
    /// GPU and a host address on the interpreter, `shape` and `strides` (in
    /// elements) as the owner states them. Ops read and write it as any
    /// tensor; dropping it frees nothing. Refused with an error: strides
    /// that are not row-major (ops take contiguous tensors; make the owner's
    /// copy contiguous first), a null or misaligned address, and on a GPU
    /// an address that is not device memory of this GPU.
    ///
    /// # Safety
    /// The memory must hold the whole tensor and outlive every use of the
    /// returned tensor, including GPU work queued with it.
    pub unsafe fn borrowed(gpu: &Gpu, ptr: u64, shape: &[usize], strides: &[usize]) -> Result<Tensor<T>> {
        if strides.len() != shape.len() {
            return Err(Error::Shape(format!("a borrowed tensor of shape {shape:?} needs one stride a dim, not {strides:?}")));
        }
        let numel = checked_numel(shape)?;
        let t = Tensor::<T> { buf: Arc::new(Buf::Empty), ptr, shape: shape.to_vec(), strides: strides.to_vec(), _elem: PhantomData };
        if numel == 0 {
            return Ok(Tensor { strides: row_major(shape), ..t });
        }
        t.require_contiguous("a borrowed tensor")?;
        let align = core::mem::align_of::<T>() as u64;
        if ptr == 0 || ptr % align != 0 {
            return Err(Error::Invalid(format!("a borrowed {} tensor at address {ptr:#x} is not aligned to its {align} bytes", T::NAME)));
        }
        if !gpu.is_interpreter() {
            gpu.bind()?;
            let mut kind = 0u32;
            let asked = unsafe {
                sys::cuPointerGetAttribute(&mut kind as *mut u32 as *mut c_void, sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
            };
            let device = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32;
            if asked != CUresult::CUDA_SUCCESS || kind != device {
                return Err(Error::Invalid(format!(
                    "a borrowed tensor at {ptr:#x} is not device memory of {} (a CPU tensor runs on the interpreter)",
                    gpu.name()
                )));
            }
        }
        Ok(Tensor { buf: Arc::new(Buf::Borrowed { ptr, host: gpu.is_interpreter() }), strides: row_major(shape), ..t })
    }

    /// The elements of a tensor of the interpreter ([`Gpu::interpreter`]);
    /// `None` for device memory.
    pub fn host_slice(&self) -> Option<&[T]> {
        matches!(*self.buf, Buf::Host(_) | Buf::Borrowed { host: true, .. })
            .then(|| unsafe { std::slice::from_raw_parts(self.ptr as *const T, self.numel()) })
    }

    fn host(&self, what: &str) -> &[T] {
        self.host_slice().unwrap_or_else(|| panic!("{what}: the interpreter holds this tensor in host memory"))
    }

    fn host_mut(&mut self, what: &str) -> &mut [T] {
        let n = self.numel();
        let _ = self.host(what);
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut T, n) }
    }
    pub fn is_contiguous(&self) -> bool {
        // Size-1 dimensions may carry any stride without changing the layout.
        let want = row_major(&self.shape);
        self.shape.iter().zip(&self.strides).zip(&want).all(|((&n, &s), &w)| n == 1 || s == w)
    }
    /// Same memory, new shape; only for contiguous tensors of equal size.
    pub fn reshape(mut self, shape: &[usize]) -> Result<Self> {
        self.require_contiguous("reshape")?;
        if checked_numel(shape)? != self.numel() {
            return Err(Error::Shape(format!("cannot reshape {:?} into {shape:?}", self.shape)));
        }
        self.shape = shape.to_vec();
        self.strides = row_major(shape);
        Ok(self)
    }

    fn require_contiguous(&self, what: &str) -> Result<()> {
        if self.is_contiguous() {
            Ok(())
        } else {
            Err(Error::Shape(format!(
                "{what} needs a contiguous tensor; got shape {:?} strides {:?}",
                self.shape, self.strides
            )))
        }
    }
}

impl<T: Elem> std::fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor<{}>{:?} @ {:#x}", T::NAME, self.shape, self.ptr)
    }
}

fn checked_numel(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| Error::Shape(format!("{shape:?} has more elements than fit in usize")))
}

pub(crate) fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_gpu_is_an_error_not_a_panic() {
        match Gpu::new() {
            Ok(gpu) => eprintln!("a GPU is present ({}); nothing to check", gpu.name()),
            Err(e @ (Error::NoDriver(_) | Error::NoGpu)) => {
                assert!(!Gpu::available());
                eprintln!("as expected here: {e}");
            }
            Err(e) => panic!("unexpected error without a GPU: {e}"),
        }
    }

    #[test]
    fn borrowed_memory_is_read_and_written_in_place() {
        let gpu = Gpu::interpreter();
        let mut owner: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let mut t = unsafe { Tensor::<f32>::borrowed(&gpu, owner.as_mut_ptr() as u64, &[3, 4], &[4, 1]) }.unwrap();
        assert_eq!(gpu.download(&t).unwrap(), owner);
        gpu.write(&mut t, &[7.0; 12]).unwrap();
        drop(t); // frees nothing: the owner's memory is still there
        assert_eq!(owner, vec![7.0; 12]);
        // Size-1 dims may carry any stride; empty tensors any address.
        assert!(unsafe { Tensor::<f32>::borrowed(&gpu, owner.as_ptr() as u64, &[1, 12], &[99, 1]) }.is_ok());
        assert!(unsafe { Tensor::<f32>::borrowed(&gpu, 0, &[0, 4], &[4, 1]) }.is_ok());
        let refused = |ptr: u64, shape: &[usize], strides: &[usize], what: &str| {
            let e = unsafe { Tensor::<f32>::borrowed(&gpu, ptr, shape, strides) }.err().expect(what).to_string();
            assert!(e.contains(what), "{e}");
        };
        let at = owner.as_ptr() as u64;
        refused(at, &[4, 3], &[1, 4], "contiguous");
        refused(at, &[3, 4], &[4], "one stride a dim");
        refused(at + 2, &[3, 4], &[4, 1], "aligned");
        refused(0, &[3, 4], &[4, 1], "aligned");
    }

    #[test]
    fn strides_and_sizes() {
        assert_eq!(row_major(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(row_major(&[5]), vec![1]);
        assert!(row_major(&[]).is_empty());
        assert_eq!(checked_numel(&[]).unwrap(), 1);
        assert!(matches!(checked_numel(&[usize::MAX, 2]), Err(Error::Shape(_))));
    }

    #[test]
    fn gpu_is_shareable() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Gpu>();
        send_sync::<Tensor<f32>>();
        send_sync::<Event>();
    }
}

#[cfg(test)]
mod interpreter_tests {
    use super::*;

    /// The interpreter holds tensors in host memory: writes, views, copies,
    /// fills and row copies behave as on a GPU.
    #[test]
    fn tensors_views_and_copies() {
        let gpu = Gpu::interpreter();
        assert!(gpu.is_interpreter() && gpu.cuda_stream().is_err());
        let flat = gpu.upload(&(0..20).map(|i| i as f32).collect::<Vec<_>>(), &[20]).unwrap();
        let mut v = flat.view(4, &[2, 3]).unwrap();
        assert_eq!(gpu.download(&v).unwrap(), [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        gpu.write(&mut v, &[-1.0; 6]).unwrap();
        assert_eq!(&gpu.download(&flat).unwrap()[3..11], [3.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 10.0]);
        assert!(flat.view(15, &[6]).unwrap_err().to_string().contains("does not fit"));
        drop(flat); // the view keeps the memory
        assert_eq!(gpu.download(&v).unwrap(), [-1.0; 6]);

        let mut dst = gpu.alloc::<f32>(&[3, 4]).unwrap();
        gpu.fill_bytes(&mut dst, 0).unwrap();
        gpu.copy_rows(&v, &mut dst, [2, 2], [3, 4]).unwrap();
        assert_eq!(gpu.download(&dst).unwrap(), [-1.0, -1.0, 0.0, 0.0, -1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let t = gpu.time(|| gpu.sync()).unwrap();
        assert!(t >= 0.0);
        static NONE: Cubins = Cubins { crate_name: "t", images: &[], ptx: &[], stale: None };
        assert!(gpu.launch(&NONE, "k", [1; 3], [32, 1, 1], 0, &[]).unwrap_err().to_string().contains("CPU entry"));
    }
}
