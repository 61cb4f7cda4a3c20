//! The host API of the delta rule: [`delta_rule`] runs the chunked form (or,
//! asked, the recurrence) on a [`Gpu`], the CPU interpreter included. Host-only.
use super::*;
use crate::check::expect_shape;
use rustile_host::{Error, Gpu, Result, Tensor};

/// Variable-length sequences packed into one batch row: their offsets as
/// the kernels read them (on the device). Build it once per batch layout.
pub struct VarLens {
    cu: Tensor<u32>,
    seqs: usize,
    longest: usize,
    total: usize,
}

impl VarLens {
    /// The layout of sequences of `lens` tokens, one after another.
    pub fn new(gpu: &Gpu, lens: &[usize]) -> Result<VarLens> {
        if lens.is_empty() {
            return Err(Error::Shape("delta_rule: a variable-length batch needs at least one sequence".into()));
        }
        let total: usize = lens.iter().sum();
        if total > u32::MAX as usize {
            return Err(Error::Shape(format!("delta_rule: {total} tokens are past the u32 offsets the kernels read")));
        }
        let cu: Vec<u32> = std::iter::once(0).chain(lens.iter().scan(0, |at, &n| {
            *at += n;
            Some(*at as u32)
        })).collect();
        Ok(VarLens { cu: gpu.upload(&cu, &[cu.len()])?, seqs: lens.len(), longest: lens.iter().copied().max().unwrap_or(0), total })
    }

    /// The layout as offsets already on the device (`cu_seqlens`, `[seqs +
    /// 1]` u32: sequence `i` is tokens `cu[i] .. cu[i+1]`), `longest` the
    /// longest sequence's tokens and `total` all of them. Nothing is
    /// uploaded or read back, so a CUDA graph can capture the calls.
    ///
    /// The offsets are the caller's word: they start at 0, do not decrease
    /// and no sequence is longer than `longest` (tokens of a longer one past
    /// it are not computed); offsets past `total` are cut to it in the
    /// kernels, so wrong ones give wrong rows, never accesses outside the tensors.
    pub fn from_offsets(cu: Tensor<u32>, longest: usize, total: usize) -> Result<VarLens> {
        let seqs = match cu.shape() {
            &[n] if n > 1 && cu.is_contiguous() => n - 1,
            other => return Err(Error::Shape(format!("delta_rule: cu_seqlens must be contiguous [seqs + 1] with a sequence at least; it is {other:?}"))),
        };
        if total > u32::MAX as usize {
            return Err(Error::Shape(format!("delta_rule: {total} tokens are past the u32 offsets the kernels read")));
        }
        Ok(VarLens { cu, seqs, longest, total })
    }
}

/// Options of [`delta_rule`].
#[derive(Clone, Copy, Default)]
pub struct DeltaRule<'a> {
    /// The state each sequence starts from, `[seqs, heads, 64, 64]` f32 (`S[k][v]`); `None`: zeros.
    pub initial: Option<&'a Tensor<f32>>,
    /// Packed variable-length sequences (then `q`, `k`, `v` are `[1, total, heads, 64]`).
    pub varlen: Option<&'a VarLens>,
    /// Run the per-token recurrence instead of the chunked form.
    pub recurrent: bool,
    /// Cut each sequence into this many segments, scanned at once (at most
    /// one a chunk); `None`: [`segments_for`]'s choice. For sweeps and tests.
    pub segments: Option<usize>,
}

/// Segments are at least this many chunks.
pub const MIN_SEGMENT_CHUNKS: usize = 4;

/// The segments each sequence is cut into when `programs` (sequences ×
/// heads) scan `chunks` chunks each on `gpu`: about two programs an SM,
/// none under [`MIN_SEGMENT_CHUNKS`] chunks. (Measured on the H100 at 8
/// heads from 4096 to a million tokens, bench/RESULTS.md: within a few per
/// cent of the best count at every length; four an SM was up to 10 % slower.)
pub fn segments_for(gpu: &Gpu, programs: usize, chunks: usize) -> usize {
    let wanted = (2 * gpu.sm_count() as usize).div_ceil(programs.max(1));
    wanted.min(chunks / MIN_SEGMENT_CHUNKS).max(1)
}

/// What the chunked form keeps between its launches (`Tα` of every chunk,
/// `[batch, tokens, heads, 64]`: the size of `k`; the segments' maps and
/// start states), and stand-ins for the pointers a call leaves out. Reused across calls of one shape, so
/// that a timed or captured call allocates nothing.
pub struct Workspace<T: Elem> {
    tri: Tensor<T>,
    /// Each segment's map `[B | M]` (`[64, 128]` f32) and start state (`[64, 64]`).
    maps: Tensor<f32>,
    starts: Tensor<f32>,
    cu: Tensor<u32>,
    spare_in: Tensor<f32>,
    spare_out: Tensor<f32>,
    /// The backward's, made on its first call: every chunk's start state
    /// (`Sᵀ` in `T`) and the gradient of its end state (`dS`), each
    /// segment's `B'` and end gradient (`[64, 64]` f32), and each chunk's
    /// per-token shares of `dβ`.
    states: Tensor<T>,
    dstates: Tensor<T>,
    back_maps: Tensor<f32>,
    ends: Tensor<f32>,
    dbeta_parts: Tensor<f32>,
    spare_t: Tensor<T>,
}

impl<T: Elem> Workspace<T> {
    /// A workspace for inputs of `shape` (`[batch, tokens, heads, 64]`),
    /// with room for the segments [`segments_for`] picks for a fixed-length
    /// batch (packed sequences or a forced count may grow it on first use).
    pub fn new(gpu: &Gpu, shape: &[usize]) -> Result<Self> {
        let programs = shape.first().unwrap_or(&1) * shape.get(2).unwrap_or(&1);
        let segments = segments_for(gpu, programs, shape.get(1).unwrap_or(&0).div_ceil(CHUNK));
        let (maps, starts) = Self::segment_buffers(gpu, programs * segments)?;
        let one = || gpu.alloc::<f32>(&[1]);
        Ok(Workspace {
            tri: gpu.alloc::<T>(shape)?,
            maps,
            starts,
            // Read only with packed sequences, which bring their own.
            cu: gpu.alloc::<u32>(&[1])?,
            spare_in: one()?,
            spare_out: one()?,
            states: gpu.alloc::<T>(&[1])?,
            dstates: gpu.alloc::<T>(&[1])?,
            back_maps: one()?,
            ends: one()?,
            dbeta_parts: one()?,
            spare_t: gpu.alloc::<T>(&[1])?,
        })
    }

    /// Bytes it holds now (the backward's buffers once it has run).
    pub fn bytes(&self) -> usize {
        let t = [&self.tri, &self.states, &self.dstates, &self.spare_t].iter().map(|x| x.numel()).sum::<usize>() * core::mem::size_of::<T>();
        let f = [&self.maps, &self.starts, &self.back_maps, &self.ends, &self.dbeta_parts].iter().map(|x| x.numel()).sum::<usize>() * 4;
        t + f
    }

    /// Room for the backward of `programs` sequences and heads cut into `segments` of `seg_chunks` chunks.
    fn grow_backward(&mut self, gpu: &Gpu, programs: usize, segments: usize, seg_chunks: usize) -> Result<()> {
        let (n, chunks) = (programs * segments, programs * segments * seg_chunks);
        if self.states.shape()[0] < chunks * D {
            (self.states, self.dstates) = (gpu.alloc::<T>(&[chunks * D, D])?, gpu.alloc::<T>(&[chunks * D, D])?);
            self.dbeta_parts = gpu.alloc(&[chunks * CHUNK])?;
        }
        if self.ends.numel() < n * D * D {
            (self.back_maps, self.ends) = (gpu.alloc(&[n, D, D])?, gpu.alloc(&[n, D, D])?);
        }
        Ok(())
    }

    fn segment_buffers(gpu: &Gpu, n: usize) -> Result<(Tensor<f32>, Tensor<f32>)> {
        Ok((gpu.alloc::<f32>(&[n.max(1), D, 2 * D])?, gpu.alloc::<f32>(&[n.max(1), D, D])?))
    }

    /// Room for `n` segments' maps and start states.
    fn grow_segments(&mut self, gpu: &Gpu, n: usize) -> Result<()> {
        if self.starts.shape()[0] < n {
            (self.maps, self.starts) = Self::segment_buffers(gpu, n)?;
        }
        Ok(())
    }
}

/// The delta rule's outputs `o` (`[batch, tokens, heads, 64]`, like `q`)
/// and, if asked, each sequence's final state (`[seqs, heads, 64, 64]` f32)
/// for inputs `q`, `k`, `v` (`[batch, tokens, heads, 64]` bf16) and the
/// heads' `beta` (`[heads]` f32, `softplus` of the layer's parameter). See
/// the module docs for the math. Allocates its [`Workspace`]; [`delta_rule_in`] takes one.
pub fn delta_rule<T: Elem>(
    gpu: &Gpu,
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    beta: &Tensor<f32>,
    o: &mut Tensor<T>,
    final_state: Option<&mut Tensor<f32>>,
    opt: DeltaRule,
) -> Result<()> {
    let mut ws = Workspace::new(gpu, q.shape())?;
    delta_rule_in(gpu, &mut ws, q, k, v, beta, o, final_state, opt)
}

/// [`delta_rule`] in a workspace made for `q`'s shape.
#[allow(clippy::too_many_arguments)]
pub fn delta_rule_in<T: Elem>(
    gpu: &Gpu,
    ws: &mut Workspace<T>,
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    beta: &Tensor<f32>,
    o: &mut Tensor<T>,
    final_state: Option<&mut Tensor<f32>>,
    opt: DeltaRule,
) -> Result<()> {
    let lay = Layout::of(q, k, v, beta, ws, &opt)?;
    let mut flags = lay.flags;
    if let Some(s0) = opt.initial {
        expect_shape("the initial state", s0, &lay.state_shape())?;
        flags |= HAS_S0;
    }
    expect_shape("o", o, q.shape())?;
    let (seqs, heads, tokens) = (lay.seqs, lay.heads, lay.tokens);
    let (segments, seg_chunks) = lay.segments(gpu, &opt)?;
    ws.grow_segments(gpu, seqs * heads * segments)?;
    // Launches take every pointer: absent ones are the workspace's one-element stand-ins, never read or written.
    let cu = opt.varlen.map_or(&ws.cu, |vl| &vl.cu);
    let s0 = opt.initial.unwrap_or(&ws.spare_in);
    let s_out = match final_state {
        Some(s) => {
            expect_shape("the final state", s, &lay.state_shape())?;
            flags |= HAS_S_OUT;
            s
        }
        None => &mut ws.spare_out,
    };
    if opt.recurrent {
        return delta_rule_recurrent_kernel::launch(gpu, 0, q, k, v, beta, cu, s0, o, s_out, tokens, seqs, heads, flags);
    }
    if lay.chunks > 0 {
        delta_rule_chunk_kernel::launch(gpu, 0, k, beta, cu, &mut ws.tri, tokens, lay.longest, seqs, heads, flags)?;
    }
    if segments == 1 {
        return delta_rule_scan_kernel::launch(gpu, 0, q, k, v, &ws.tri, cu, s0, o, s_out, &mut ws.spare_t, tokens, 1, seg_chunks, seqs, heads, flags);
    }
    starts_of_segments(gpu, &ws.tri, &mut ws.maps, &mut ws.starts, k, v, cu, s0, s_out, &lay, segments, seg_chunks, flags)?;
    // Each segment from its start state; the final state came from the combine (no HAS_S_OUT).
    let seg_flags = (flags & VARLEN) | HAS_S0;
    delta_rule_scan_kernel::launch(gpu, 0, q, k, v, &ws.tri, cu, &ws.starts, o, s_out, &mut ws.spare_t, tokens, segments, seg_chunks, seqs, heads, seg_flags)
}

/// The segments' maps (`ws.maps`), the states they start from
/// (`ws.starts`) and, with [`HAS_S_OUT`], the final state.
#[allow(clippy::too_many_arguments)]
fn starts_of_segments<T: Elem>(
    gpu: &Gpu, tri: &Tensor<T>, maps: &mut Tensor<f32>, starts: &mut Tensor<f32>, k: &Tensor<T>, v: &Tensor<T>, cu: &Tensor<u32>, s0: &Tensor<f32>,
    s_out: &mut Tensor<f32>, lay: &Layout, segments: usize, seg_chunks: usize, flags: u32,
) -> Result<()> {
    let (seqs, heads, tokens) = (lay.seqs, lay.heads, lay.tokens);
    delta_rule_map_kernel::launch(gpu, 0, k, v, tri, cu, maps, tokens, segments, seg_chunks, seqs, heads, flags)?;
    delta_rule_combine_kernel::launch::<T>(gpu, 0, maps, s0, starts, s_out, segments, seqs, heads, flags)
}

/// What the forward and the backward check and derive from their inputs.
struct Layout {
    tokens: usize,
    heads: usize,
    seqs: usize,
    longest: usize,
    chunks: usize,
    /// [`VARLEN`] or nothing.
    flags: u32,
}

impl Layout {
    fn of<T: Elem>(q: &Tensor<T>, k: &Tensor<T>, v: &Tensor<T>, beta: &Tensor<f32>, ws: &Workspace<T>, opt: &DeltaRule) -> Result<Layout> {
        if T::NAME != "bf16" {
            return Err(Error::Invalid(format!("delta_rule: inputs must be bf16, not {}", T::NAME)));
        }
        let &[batch, tokens, heads, d] = q.shape() else {
            return Err(Error::Shape(format!("delta_rule: q must be [batch, tokens, heads, {D}]; it has shape {:?}", q.shape())));
        };
        if d != D {
            return Err(Error::Shape(format!("delta_rule: the head dim must be {D}; q has shape {:?}", q.shape())));
        }
        if heads == 0 {
            return Err(Error::Shape("delta_rule: q has no heads".into()));
        }
        let shape = [batch, tokens, heads, D];
        for (what, t) in [("q", q), ("k", k), ("v", v)] {
            expect_shape(what, t, &shape)?;
        }
        expect_shape("beta", beta, &[heads])?;
        if ws.tri.shape() != shape {
            return Err(Error::Shape(format!("delta_rule: the workspace is for inputs of {:?}, not {shape:?}", ws.tri.shape())));
        }
        let (seqs, longest, flags) = match opt.varlen {
            Some(vl) => {
                if batch != 1 || tokens != vl.total {
                    return Err(Error::Shape(format!(
                        "delta_rule: packed sequences of {} tokens in all take q of [1, {}, heads, {D}], not {:?}",
                        vl.total,
                        vl.total,
                        q.shape()
                    )));
                }
                (vl.seqs, vl.longest, VARLEN)
            }
            None => (batch, tokens, 0),
        };
        Ok(Layout { tokens, heads, seqs, longest, chunks: longest.div_ceil(CHUNK), flags })
    }

    /// `[seqs, heads, 64, 64]`.
    fn state_shape(&self) -> [usize; 4] {
        [self.seqs, self.heads, D, D]
    }

    /// `(segments, chunks a segment)`: the option's count or [`segments_for`]'s.
    fn segments(&self, gpu: &Gpu, opt: &DeltaRule) -> Result<(usize, usize)> {
        let chunks = self.chunks;
        let segments = match opt.segments {
            Some(0) => return Err(Error::Invalid("delta_rule: a sequence takes at least one segment".into())),
            Some(n) => n.min(chunks).max(1),
            None => segments_for(gpu, self.seqs * self.heads, chunks),
        };
        // Every segment but the last of the longest sequence holds `seg_chunks` chunks.
        let seg_chunks = chunks.div_ceil(segments).max(1);
        Ok((chunks.div_ceil(seg_chunks).max(1), seg_chunks))
    }
}

/// Where [`delta_rule_backward`] writes the gradients.
pub struct DeltaRuleGrads<'a, T: Elem> {
    /// Of `q`, `k` and `v`: like them.
    pub dq: &'a mut Tensor<T>,
    pub dk: &'a mut Tensor<T>,
    pub dv: &'a mut Tensor<T>,
    /// Of `beta`: `[heads]` f32.
    pub dbeta: &'a mut Tensor<f32>,
    /// Of the initial state (`[seqs, heads, 64, 64]` f32), if wanted; zeros
    /// were the initial state when none was given.
    pub d_initial: Option<&'a mut Tensor<f32>>,
}

/// The gradients of [`delta_rule`]'s inputs (`q`, `k`, `v`, `beta` and the
/// initial state) from those of its outputs (`d_o` like `o`; `d_final` of
/// the final state, or none), for the same inputs and options. Runs the
/// chunked form's backward (see the kernels' notes), after the forward
/// again to record each chunk's start state; sequence-parallel like the
/// forward. Allocates its [`Workspace`]; [`delta_rule_backward_in`] takes one.
#[allow(clippy::too_many_arguments)]
pub fn delta_rule_backward<T: Elem>(
    gpu: &Gpu,
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    beta: &Tensor<f32>,
    d_o: &Tensor<T>,
    d_final: Option<&Tensor<f32>>,
    grads: DeltaRuleGrads<T>,
    opt: DeltaRule,
) -> Result<()> {
    let mut ws = Workspace::new(gpu, q.shape())?;
    delta_rule_backward_in(gpu, &mut ws, q, k, v, beta, d_o, d_final, grads, opt)
}

/// [`delta_rule_backward`] in a workspace made for `q`'s shape.
#[allow(clippy::too_many_arguments)]
pub fn delta_rule_backward_in<T: Elem>(
    gpu: &Gpu,
    ws: &mut Workspace<T>,
    q: &Tensor<T>,
    k: &Tensor<T>,
    v: &Tensor<T>,
    beta: &Tensor<f32>,
    d_o: &Tensor<T>,
    d_final: Option<&Tensor<f32>>,
    grads: DeltaRuleGrads<T>,
    opt: DeltaRule,
) -> Result<()> {
    let lay = Layout::of(q, k, v, beta, ws, &opt)?;
    if opt.recurrent {
        return Err(Error::Invalid("delta_rule_backward: the backward runs the chunked form only (recurrent: false)".into()));
    }
    for (what, t) in [("d_o", d_o), ("dq", &*grads.dq), ("dk", &*grads.dk), ("dv", &*grads.dv)] {
        expect_shape(what, t, q.shape())?;
    }
    expect_shape("dbeta", grads.dbeta, &[lay.heads])?;
    let (seqs, heads, tokens) = (lay.seqs, lay.heads, lay.tokens);
    let (segments, seg_chunks) = lay.segments(gpu, &opt)?;
    ws.grow_segments(gpu, seqs * heads * segments)?;
    ws.grow_backward(gpu, seqs * heads, segments, seg_chunks)?;
    let mut flags = lay.flags;
    if let Some(s0) = opt.initial {
        expect_shape("the initial state", s0, &lay.state_shape())?;
        flags |= HAS_S0;
    }
    let mut back_flags = lay.flags;
    if let Some(d) = d_final {
        expect_shape("the final state's gradient", d, &lay.state_shape())?;
        back_flags |= HAS_D_FINAL;
    }
    let cu = opt.varlen.map_or(&ws.cu, |vl| &vl.cu);
    let s0 = opt.initial.unwrap_or(&ws.spare_in);
    let d_final = d_final.unwrap_or(&ws.spare_in);
    let d_s0 = match grads.d_initial {
        Some(d) => {
            expect_shape("the initial state's gradient", d, &lay.state_shape())?;
            back_flags |= HAS_D_S0;
            d
        }
        None => &mut ws.spare_out,
    };

    // The forward again, recording each chunk's start state.
    if lay.chunks > 0 {
        delta_rule_chunk_kernel::launch(gpu, 0, k, beta, cu, &mut ws.tri, tokens, lay.longest, seqs, heads, flags)?;
    }
    let (starts, scan_flags) = if segments == 1 {
        (s0, flags | STATES)
    } else {
        // No final state (`ends` stands in for it, not written).
        starts_of_segments(gpu, &ws.tri, &mut ws.maps, &mut ws.starts, k, v, cu, s0, &mut ws.ends, &lay, segments, seg_chunks, flags)?;
        (&ws.starts, (flags & VARLEN) | HAS_S0 | STATES)
    };
    // With STATES, neither `o` nor the final state is written (stand-ins).
    delta_rule_scan_kernel::launch(gpu, 0, q, k, v, &ws.tri, cu, starts, &mut ws.spare_t, &mut ws.ends, &mut ws.states, tokens, segments, seg_chunks, seqs, heads, scan_flags)?;

    // Backwards: each segment's end gradient, every chunk's dS, then every chunk's gradients at once.
    let record = lay.flags | STATES;
    if segments == 1 {
        delta_rule_back_scan_kernel::launch(gpu, 0, q, k, d_o, &ws.tri, cu, d_final, d_s0, &mut ws.dstates, tokens, 1, seg_chunks, seqs, heads, back_flags | STATES)?;
    } else {
        delta_rule_back_scan_kernel::launch(gpu, 0, q, k, d_o, &ws.tri, cu, d_final, &mut ws.back_maps, &mut ws.dstates, tokens, segments, seg_chunks, seqs, heads, lay.flags | HAS_D_S0)?;
        delta_rule_back_combine_kernel::launch::<T>(gpu, 0, &ws.maps, &ws.back_maps, d_final, &mut ws.ends, d_s0, segments, seqs, heads, back_flags)?;
        // From each segment's end gradient (the start's came from the combine; `back_maps` stands in, not written).
        delta_rule_back_scan_kernel::launch(gpu, 0, q, k, d_o, &ws.tri, cu, &ws.ends, &mut ws.back_maps, &mut ws.dstates, tokens, segments, seg_chunks, seqs, heads, record | HAS_D_FINAL)?;
    }
    let chunks = segments * seg_chunks;
    delta_rule_grads_kernel::launch(gpu, 0, q, k, v, d_o, &ws.tri, &ws.states, &ws.dstates, beta, cu, grads.dq, grads.dk, grads.dv, &mut ws.dbeta_parts, tokens, chunks, seqs, heads, lay.flags)?;
    delta_rule_dbeta_kernel::launch(gpu, 0, &ws.dbeta_parts, grads.dbeta, chunks * CHUNK, seqs, heads)
}
