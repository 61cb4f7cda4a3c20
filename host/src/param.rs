//! Kernel arguments as `cuLaunchKernel` wants them: one pointer per argument,
//! each pointing at the argument's bytes.

/// One kernel argument. Device pointers are plain `u64` addresses.
#[derive(Clone, Copy, Debug)]
pub enum Param {
    Ptr(u64),
    U64(u64),
    I64(i64),
    U32(u32),
    I32(i32),
    F32(f32),
}

/// Storage for one argument. 8-aligned so any of the widths above can be
/// read from its start, whatever the driver does with the pointer.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C, align(8))]
pub(crate) struct Slot(pub [u8; 8]);

impl Param {
    /// Size in bytes of the kernel parameter this fills.
    pub fn width(self) -> usize {
        match self {
            Param::Ptr(_) | Param::U64(_) | Param::I64(_) => 8,
            Param::U32(_) | Param::I32(_) | Param::F32(_) => 4,
        }
    }

    /// The argument's bytes at the start of a slot, native byte order.
    pub(crate) fn pack(self) -> Slot {
        let mut s = Slot::default();
        match self {
            Param::Ptr(v) | Param::U64(v) => s.0.copy_from_slice(&v.to_ne_bytes()),
            Param::I64(v) => s.0.copy_from_slice(&v.to_ne_bytes()),
            Param::U32(v) => s.0[..4].copy_from_slice(&v.to_ne_bytes()),
            Param::I32(v) => s.0[..4].copy_from_slice(&v.to_ne_bytes()),
            Param::F32(v) => s.0[..4].copy_from_slice(&v.to_ne_bytes()),
        }
        s
    }
}

/// Packs `params` into slots. The slots must outlive the launch call,
/// because the pointer array handed to the driver points into them.
pub(crate) fn pack_all(params: &[Param]) -> Vec<Slot> {
    params.iter().map(|p| p.pack()).collect()
}

/// The pointer array for `cuLaunchKernel`, one entry per slot.
pub(crate) fn arg_ptrs(slots: &mut [Slot]) -> Vec<*mut std::ffi::c_void> {
    slots.iter_mut().map(|s| s.0.as_mut_ptr().cast()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_and_bytes() {
        let p = Param::I32(-2);
        assert_eq!(p.width(), 4);
        assert_eq!(&p.pack().0[..4], &(-2i32).to_ne_bytes());
        assert_eq!(&p.pack().0[4..], &[0; 4]);

        let f = Param::F32(1.5);
        assert_eq!(f32::from_ne_bytes(f.pack().0[..4].try_into().unwrap()), 1.5);

        let ptr = Param::Ptr(0x7f00_dead_beef_0000);
        assert_eq!(ptr.width(), 8);
        assert_eq!(u64::from_ne_bytes(ptr.pack().0), 0x7f00_dead_beef_0000);
        assert_eq!(i64::from_ne_bytes(Param::I64(-9).pack().0), -9);
        assert_eq!(u32::from_ne_bytes(Param::U32(7).pack().0[..4].try_into().unwrap()), 7);
    }

    #[test]
    fn pointers_point_at_the_slots() {
        let params = [Param::Ptr(1), Param::U32(2), Param::F32(3.0)];
        let mut slots = pack_all(&params);
        let ptrs = arg_ptrs(&mut slots);
        assert_eq!(ptrs.len(), 3);
        for (p, s) in ptrs.iter().zip(&slots) {
            assert_eq!(*p as usize, s as *const Slot as usize);
            assert_eq!(*p as usize % 8, 0);
        }
        let second = unsafe { *(ptrs[1] as *const u32) };
        assert_eq!(second, 2);
    }
}
