//! The host runtime on a real GPU, with hand-written PTX kernels (loaded
//! through the PTX fallback, so no cubins are needed). Skips with a message
//! where there is no GPU.

use half::bf16;
use rustile_host::{Cubins, Error, Gpu, Param};

/// `add_f32`: out[i] = x[i] + y[i] for i < n.
/// `mix`: every argument width at once, through >48 KiB of dynamic shared
/// memory: out[t] = s * (a + k + b + t), staged at smem[off + 4t].
const KERNELS: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.extern .shared .align 16 .b8 dyn[];

.visible .entry add_f32(.param .u64 x, .param .u64 y, .param .u64 out, .param .u32 n)
{
    .reg .pred %p;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.u64 %rd3, [out];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.u32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p, %r5, %r1;
    @%p bra DONE;
    mul.wide.u32 %rd4, %r5, 4;
    add.s64 %rd5, %rd1, %rd4;
    add.s64 %rd6, %rd2, %rd4;
    add.s64 %rd7, %rd3, %rd4;
    ld.global.f32 %f1, [%rd5];
    ld.global.f32 %f2, [%rd6];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd7], %f3;
DONE:
    ret;
}

.visible .entry mix(.param .u64 out, .param .s64 a, .param .f32 s, .param .s32 k, .param .u32 off, .param .u64 b)
{
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [out];
    ld.param.s64 %rd2, [a];
    ld.param.f32 %f1, [s];
    ld.param.s32 %r1, [k];
    ld.param.u32 %r2, [off];
    ld.param.u64 %rd3, [b];
    mov.u32 %r3, %tid.x;
    cvt.s64.s32 %rd4, %r1;
    add.s64 %rd5, %rd2, %rd4;
    add.s64 %rd5, %rd5, %rd3;
    cvt.u64.u32 %rd6, %r3;
    add.s64 %rd5, %rd5, %rd6;
    cvt.rn.f32.s64 %f2, %rd5;
    mul.f32 %f3, %f2, %f1;
    mov.u32 %r4, dyn;
    shl.b32 %r5, %r3, 2;
    add.u32 %r6, %r2, %r5;
    add.u32 %r6, %r6, %r4;
    st.shared.f32 [%r6], %f3;
    bar.sync 0;
    ld.shared.f32 %f3, [%r6];
    mul.wide.u32 %rd7, %r3, 4;
    add.s64 %rd8, %rd1, %rd7;
    st.global.f32 [%rd8], %f3;
    ret;
}
"#;

static TEST_KERNELS: Cubins = Cubins { crate_name: "host-tests", images: &[], ptx: &[("sm_80", KERNELS)], stale: None };

/// The GPU; `None` (skip, said on the terminal: the harness captures
/// `eprintln!`) only where there is none. A GPU that fails to open fails the test.
fn gpu() -> Option<Gpu> {
    match Gpu::new() {
        Ok(g) => Some(g),
        Err(e) if e.is_no_gpu() => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED: no GPU ({e})");
            None
        }
        Err(e) => panic!("a GPU is present but could not be opened: {e}"),
    }
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn device_properties() {
    let Some(gpu) = gpu() else { return };
    let (major, _) = gpu.compute_capability();
    assert!(major >= 7, "{:?}", gpu.compute_capability());
    assert!(!gpu.name().is_empty() && gpu.sm_count() > 0 && gpu.l2_bytes() > 0);
    let (free, total) = gpu.mem_info().unwrap();
    assert!(free > 0 && free <= total && total == gpu.mem_bytes());
    eprintln!("{} cc {:?}, {} SMs, L2 {} MiB", gpu.name(), gpu.compute_capability(), gpu.sm_count(), gpu.l2_bytes() >> 20);
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn memory_round_trips() {
    let Some(gpu) = gpu() else { return };
    let data: Vec<bf16> = (0..1000).map(|i| bf16::from_f32(i as f32 - 500.0)).collect();
    let t = gpu.upload(&data, &[10, 100]).unwrap();
    assert_eq!((t.shape(), t.strides(), t.numel()), (&[10, 100][..], &[100, 1][..], 1000));
    assert!(t.is_contiguous() && t.device_ptr() % 256 == 0);
    assert_eq!(gpu.download(&t).unwrap(), data);

    let mut copy = gpu.alloc::<bf16>(&[1000]).unwrap();
    gpu.copy_d2d(&t, &mut copy).unwrap();
    assert_eq!(gpu.download(&copy).unwrap(), data);

    gpu.fill_bytes(&mut copy, 0xFF).unwrap();
    assert!(gpu.download(&copy).unwrap().iter().all(|x| x.to_bits() == 0xFFFF));

    let t = t.reshape(&[1000]).unwrap();
    assert!(matches!(t.reshape(&[3, 3]), Err(Error::Shape(_))));
    assert!(matches!(gpu.upload(&data, &[3]), Err(Error::Shape(_))));
    let empty = gpu.alloc::<f32>(&[0, 4]).unwrap();
    assert!(gpu.download(&empty).unwrap().is_empty());
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn out_of_memory_is_reported() {
    let Some(gpu) = gpu() else { return };
    let too_much = gpu.mem_bytes() * 2;
    match gpu.alloc::<f32>(&[too_much / 4]) {
        Err(Error::OutOfMemory { requested, free }) => assert!(requested == too_much / 4 * 4 && free > 0),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn launches_and_times() {
    let Some(gpu) = gpu() else { return };
    let n = 100_003u32;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| 0.25 * i as f32).collect();
    let (x, y) = (gpu.upload(&x, &[n as usize]).unwrap(), gpu.upload(&y, &[n as usize]).unwrap());
    let mut out = gpu.alloc::<f32>(&[n as usize]).unwrap();
    gpu.fill_bytes(&mut out, 0xFF).unwrap();
    let params = [x.param(), y.param(), out.param(), Param::U32(n)];
    let grid = [n.div_ceil(256), 1, 1];
    let ms = gpu.time(|| gpu.launch(&TEST_KERNELS, "add_f32", grid, [256, 1, 1], 0, &params)).unwrap();
    assert!(ms > 0.0);
    let got = gpu.download(&out).unwrap();
    assert!(got.iter().enumerate().all(|(i, &v)| v == 1.25 * i as f32), "{:?}", &got[..4]);

    // Every parameter width, and more shared memory than the 48 KiB default.
    let smem = 100 * 1024;
    let threads = 256u32;
    let mut mixed = gpu.alloc::<f32>(&[threads as usize]).unwrap();
    let params = [
        mixed.param(),
        Param::I64(-5_000_000_000),
        Param::F32(0.5),
        Param::I32(-3),
        Param::U32(smem - 4 * threads),
        Param::U64(5_000_000_010),
    ];
    gpu.launch(&TEST_KERNELS, "mix", [1, 1, 1], [threads, 1, 1], smem, &params).unwrap();
    let got = gpu.download(&mixed).unwrap();
    assert!(got.iter().enumerate().all(|(t, &v)| v == 0.5 * (7 + t) as f32), "{:?}", &got[..4]);
    gpu.fill_bytes(&mut mixed, 0).unwrap();
    gpu.sync().unwrap();
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn launch_errors_name_the_kernel() {
    let Some(gpu) = gpu() else { return };
    match gpu.launch(&TEST_KERNELS, "no_such_kernel", [1, 1, 1], [32, 1, 1], 0, &[]) {
        Err(Error::Launch { kernel, msg }) => {
            assert_eq!(kernel, "no_such_kernel");
            assert!(msg.contains("host-tests"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    let too_big = gpu.launch(&TEST_KERNELS, "add_f32", [1, 1, 1], [2048, 1, 1], 0, &[Param::U32(0); 4]);
    assert!(matches!(too_big, Err(Error::Launch { .. })), "{too_big:?}");
    let too_much_smem = gpu.launch(&TEST_KERNELS, "mix", [1, 1, 1], [32, 1, 1], 1 << 30, &[]);
    assert!(matches!(too_much_smem, Err(Error::Launch { .. })), "{too_much_smem:?}");
    // The stream is still usable after refused launches.
    gpu.sync().unwrap();
}

#[test]
#[cfg_attr(rustile_no_gpu, ignore = "no GPU where this was built; on a GPU machine run with --include-ignored")]
fn shared_between_threads() {
    let Some(gpu) = gpu() else { return };
    let t = gpu.upload(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(gpu.download(&t).unwrap(), [1.0, 2.0, 3.0]));
    });
}
