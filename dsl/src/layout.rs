//! How an `R×C` tile is spread over the `TH` threads of a program on the GPU.
//!
//! One rule for every tile, chosen so loads are 16-byte and coalesced and so
//! that row reductions need no layout change:
//!
//! * a row is cut into *chunks* of [`V`] = 8 consecutive columns; a thread
//!   always holds whole chunks (one 16-byte access for bf16);
//! * `TC = min(TH, C/V)` consecutive threads share a row, taking its chunks
//!   round-robin (thread `l` holds chunks `l, l+TC, l+2·TC, …`);
//! * the `TR = TH/TC` groups of threads take rows round-robin
//!   (group `g` holds rows `g, g+TR, …`).
//!
//! So thread `t = g·TC + l` holds `RPT = R/TR` rows × `CPT = C/(TC·V)` chunks.
//! Its fragment index `(i·CPT + j)·V + v` is row `g + i·TR`, column
//! `l·V + j·TC·V + v`. The threads of one row are one warp or whole warps, so
//! a row reduction is warp shuffles plus, past 32 threads, one shared-memory
//! step. A per-row vector ([`Col`](crate::Col)) keeps the `RPT` values of the
//! rows a thread holds; a per-column vector ([`Row`](crate::Row)) keeps the
//! `CPT·V` columns it holds: broadcasting either back over the tile is free.
//!
//! The CPU interpreter holds whole tiles and ignores all of this, but checks
//! the same rules, so a shape that cannot run on the GPU fails on the CPU too.

/// Columns per chunk.
pub const V: usize = 8;

/// Threads sharing one row.
pub const fn tc(c: usize, th: usize) -> usize {
    let chunks = c / V;
    // Never 0, so that a bad shape reaches `check`'s message, not a division by zero.
    if chunks == 0 { 1 } else if chunks < th { chunks } else { th }
}
/// Row groups.
pub const fn tr(c: usize, th: usize) -> usize {
    let t = th / tc(c, th);
    if t == 0 { 1 } else { t }
}
/// Rows held per thread.
pub const fn rpt(r: usize, c: usize, th: usize) -> usize {
    r / tr(c, th)
}
/// Chunks held per thread in each of its rows.
pub const fn cpt(c: usize, th: usize) -> usize {
    c / (tc(c, th) * V)
}
/// Columns held per thread (in each of its rows).
pub const fn cols_held(c: usize, th: usize) -> usize {
    cpt(c, th) * V
}
/// Elements held per thread.
pub const fn frag(r: usize, c: usize, th: usize) -> usize {
    rpt(r, c, th) * cols_held(c, th)
}

/// Why a tile shape cannot be laid out over a program, or `None` if it can.
pub const fn check(r: usize, c: usize, th: usize) -> Option<&'static str> {
    if let Some(why) = check_shared(r, c, th) {
        return Some(why);
    }
    if r % tr(c, th) != 0 {
        return Some("tile too small for the program: R·C/8 chunks must cover all 32·WARPS threads (use fewer WARPS or a larger tile)");
    }
    None
}

/// Threads that copy a shared tile: all `th`, or the first `r·c/8` (one
/// chunk each) when the tile has fewer chunks than the program has threads,
/// as a 16-column tail of 64 rows over two warpgroups. Only register tiles
/// need every thread to hold a part.
pub const fn copy_threads(r: usize, c: usize, th: usize) -> usize {
    let chunks = r * c / V;
    if chunks < th { chunks } else { th }
}

/// Why a shared tile shape cannot be copied by a program, or `None` if it
/// can: [`check`] without its rule that every thread holds a part (a
/// shared tile is copied by [`copy_threads`] of them).
pub const fn check_shared(r: usize, c: usize, th: usize) -> Option<&'static str> {
    if th == 0 || th % 32 != 0 || !th.is_power_of_two() || th > 1024 {
        return Some("a program has 32·WARPS threads, a power of two from 32 to 1024");
    }
    if r == 0 || c == 0 || c % V != 0 || !c.is_power_of_two() || !r.is_power_of_two() {
        return Some("tile dimensions must be powers of two, with at least 8 columns (one 8-column chunk)");
    }
    None
}

/// Compile-time check: evaluated when a tile shape is first used on either
/// backend, so a bad shape is a build error, never a wrong result.
pub struct Shape<const R: usize, const C: usize, const TH: usize>;
impl<const R: usize, const C: usize, const TH: usize> Shape<R, C, TH> {
    pub const OK: () = match check(R, C, TH) {
        None => (),
        Some(msg) => panic!("{}", msg),
    };
}

/// [`Shape`] for a shared tile ([`check_shared`]).
pub struct SharedShape<const R: usize, const C: usize, const TH: usize>;
impl<const R: usize, const C: usize, const TH: usize> SharedShape<R, C, TH> {
    pub const OK: () = match check_shared(R, C, TH) {
        None => (),
        Some(msg) => panic!("{}", msg),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_long_row_is_split_across_all_threads() {
        // 1×8192 over 256 threads: every thread holds 4 chunks of one row.
        assert_eq!((tc(8192, 256), tr(8192, 256)), (256, 1));
        assert_eq!((rpt(1, 8192, 256), cpt(8192, 256), frag(1, 8192, 256)), (1, 4, 32));
        assert_eq!(check(1, 8192, 256), None);
    }

    #[test]
    fn narrow_tiles_put_several_rows_on_a_warp() {
        // 16×64 over 128 threads: 8 threads a row, 16 row groups, one row each.
        assert_eq!((tc(64, 128), tr(64, 128), rpt(16, 64, 128), cpt(64, 128)), (8, 16, 1, 1));
        assert_eq!(frag(16, 64, 128) * 128, 16 * 64);
    }

    #[test]
    fn shapes_that_leave_threads_idle_are_rejected() {
        assert!(check(1, 1024, 256).is_some()); // 128 chunks for 256 threads
        assert!(check(1, 1000, 128).is_some()); // not a power of two
        assert!(check(4, 4, 32).is_some()); // narrower than a chunk
        assert!(check(1, 1024, 96).is_some()); // 3 warps
    }

    #[test]
    fn small_shared_tiles_are_copied_by_the_first_threads() {
        // A 16-column tail of 64 rows over two warpgroups: 128 chunks, one
        // for each of the first 128 threads.
        assert!(check(64, 16, 256).is_some());
        assert_eq!((check_shared(64, 16, 256), copy_threads(64, 16, 256)), (None, 128));
        assert_eq!((tc(16, 128), tr(16, 128), rpt(64, 16, 128), cpt(16, 128)), (2, 64, 1, 1));
        // Big enough tiles are copied by every thread, as register tiles are laid out.
        assert_eq!(copy_threads(64, 64, 256), 256);
        assert!(check_shared(64, 24, 128).is_some());
    }
}
