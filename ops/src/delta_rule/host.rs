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
    /// Each segment's map `[M | B]` (`[64, 128]` f32) and start state (`[64, 64]`).
    maps: Tensor<f32>,
    starts: Tensor<f32>,
    cu: Tensor<u32>,
    spare_in: Tensor<f32>,
    spare_out: Tensor<f32>,
}

impl<T: Elem> Workspace<T> {
    /// A workspace for inputs of `shape` (`[batch, tokens, heads, 64]`),
    /// with room for the segments [`segments_for`] picks for a fixed-length
    /// batch (packed sequences or a forced count may grow it on first use).
    pub fn new(gpu: &Gpu, shape: &[usize]) -> Result<Self> {
        let programs = shape.first().unwrap_or(&1) * shape.get(2).unwrap_or(&1);
        let segments = segments_for(gpu, programs, shape.get(1).unwrap_or(&0).div_ceil(CHUNK));
        let (maps, starts) = Self::segment_buffers(gpu, programs * segments)?;
        Ok(Workspace { tri: gpu.alloc::<T>(shape)?, maps, starts, cu: gpu.upload(&[0u32], &[1])?, spare_in: gpu.alloc::<f32>(&[1])?, spare_out: gpu.alloc::<f32>(&[1])? })
    }

    fn segment_buffers(gpu: &Gpu, n: usize) -> Result<(Tensor<f32>, Tensor<f32>)> {
        Ok((gpu.alloc::<f32>(&[n.max(1), D, 2 * D])?, gpu.alloc::<f32>(&[n.max(1), D, D])?))
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
    expect_shape("o", o, &shape)?;
    expect_shape("beta", beta, &[heads])?;
    if ws.tri.shape() != shape {
        return Err(Error::Shape(format!("delta_rule: the workspace is for inputs of {:?}, not {shape:?}", ws.tri.shape())));
    }
    let (seqs, longest, mut flags) = match opt.varlen {
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
    let state_shape = [seqs, heads, D, D];
    if let Some(s0) = opt.initial {
        expect_shape("the initial state", s0, &state_shape)?;
        flags |= HAS_S0;
    }
    // Launches take every pointer: absent ones are the workspace's one-element stand-ins, never read or written.
    let cu = opt.varlen.map_or(&ws.cu, |vl| &vl.cu);
    let s0 = opt.initial.unwrap_or(&ws.spare_in);
    let s_out = match final_state {
        Some(s) => {
            expect_shape("the final state", s, &state_shape)?;
            flags |= HAS_S_OUT;
            s
        }
        None => &mut ws.spare_out,
    };
    if opt.recurrent {
        return delta_rule_recurrent_kernel::launch(gpu, 0, q, k, v, beta, cu, s0, o, s_out, tokens, seqs, heads, flags);
    }
    let chunks = longest.div_ceil(CHUNK);
    let segments = match opt.segments {
        Some(0) => return Err(Error::Invalid("delta_rule: a sequence takes at least one segment".into())),
        Some(n) => n.min(chunks).max(1),
        None => segments_for(gpu, seqs * heads, chunks),
    };
    // Every segment but the last of the longest sequence holds `seg_chunks` chunks.
    let seg_chunks = chunks.div_ceil(segments).max(1);
    let segments = chunks.div_ceil(seg_chunks).max(1);
    if chunks > 0 {
        delta_rule_chunk_kernel::launch(gpu, 0, k, beta, cu, &mut ws.tri, tokens, longest, seqs, heads, flags)?;
    }
    if segments == 1 {
        return delta_rule_scan_kernel::launch(gpu, 0, q, k, v, &ws.tri, cu, s0, o, s_out, tokens, 1, seg_chunks, seqs, heads, flags);
    }
    if ws.starts.shape()[0] < seqs * heads * segments {
        (ws.maps, ws.starts) = Workspace::<T>::segment_buffers(gpu, seqs * heads * segments)?;
    }
    delta_rule_map_kernel::launch(gpu, 0, k, v, &ws.tri, cu, &mut ws.maps, tokens, segments, seg_chunks, seqs, heads, flags)?;
    delta_rule_combine_kernel::launch::<T>(gpu, 0, &ws.maps, s0, &mut ws.starts, s_out, segments, seqs, heads, flags)?;
    // Each segment from its start state; the final state came from the combine (no HAS_S_OUT).
    let seg_flags = (flags & VARLEN) | HAS_S0;
    delta_rule_scan_kernel::launch(gpu, 0, q, k, v, &ws.tri, cu, &ws.starts, o, s_out, tokens, segments, seg_chunks, seqs, heads, seg_flags)
}
