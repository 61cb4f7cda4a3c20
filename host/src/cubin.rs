//! Kernel images embedded in a binary, and which one a given GPU should load.

use crate::{Error, Result};

/// Every compiled image of one kernel crate. Generated code declares one
/// `static` of this per crate; `Gpu::launch` caches modules by its address.
#[derive(Debug)]
pub struct Cubins {
    pub crate_name: &'static str,
    /// (arch such as "sm_80" or "sm_90a", cubin bytes from ptxas). An arch
    /// may have several: the build assembles one cubin per kernel family in
    /// parallel, and a launch finds its kernel in whichever holds it.
    pub images: &'static [(&'static str, &'static [u8])],
    /// (arch, PTX text): only used when no cubin fits, since the driver's JIT
    /// is slow and has crashed on arch-specific (`a`) PTX.
    pub ptx: &'static [(&'static str, &'static str)],
    /// Why the images may not match the sources (an image older than a
    /// kernel source), or `None`.
    pub stale: Option<&'static str>,
}

/// The image chosen for one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Image {
    Cubin { arch: &'static str, bytes: &'static [u8] },
    Ptx { arch: &'static str, text: &'static str },
}

impl Image {
    pub fn arch(&self) -> &'static str {
        match self {
            Image::Cubin { arch, .. } | Image::Ptx { arch, .. } => arch,
        }
    }
}

/// The arch we would build for this compute capability: the `a` variants
/// where they exist, since those unlock wgmma/TMA (9.0) and tcgen05 (10.0).
pub fn native_arch(cc: (u32, u32)) -> String {
    match cc {
        (9, 0) | (10, 0) => format!("sm_{}{}a", cc.0, cc.1),
        _ => format!("sm_{}{}", cc.0, cc.1),
    }
}

/// Picks the image to load on a GPU of compute capability `cc`.
///
/// Cubins first: 9.0 takes sm_90a then sm_90; 8.x takes its exact sm_8x then
/// sm_80; 10.0 takes sm_100a then sm_100. Otherwise the PTX of the highest
/// arch not above the device (an `a` PTX only for its exact device).
pub fn pick_image(cc: (u32, u32), cubins: &Cubins) -> Result<Image> {
    let cubin_order: Vec<String> = match cc {
        (9, 0) => vec!["sm_90a".into(), "sm_90".into()],
        (8, m) => vec![format!("sm_8{m}"), "sm_80".into()],
        (10, 0) => vec!["sm_100a".into(), "sm_100".into()],
        _ => vec![],
    };
    for want in &cubin_order {
        if let Some(&(arch, bytes)) = cubins.images.iter().find(|(a, _)| a == want) {
            return Ok(Image::Cubin { arch, bytes });
        }
    }

    let device = cc.0 * 10 + cc.1;
    let best_ptx = cubins
        .ptx
        .iter()
        .filter_map(|&(arch, text)| {
            let (num, specific) = parse_arch(arch)?;
            let fits = if specific { num == device } else { num <= device };
            // At equal numbers, the portable PTX wins over the `a` one.
            fits.then_some(((num, !specific), arch, text))
        })
        .max_by_key(|(rank, _, _)| *rank);
    if let Some((_, arch, text)) = best_ptx {
        return Ok(Image::Ptx { arch, text });
    }

    let mut available: Vec<String> = cubins.images.iter().map(|(a, _)| format!("{a} (cubin)")).collect();
    available.extend(cubins.ptx.iter().map(|(a, _)| format!("{a} (ptx)")));
    Err(Error::NoCubin { arch: native_arch(cc), available })
}

/// Every image to load for `image`: all cubins of its arch, or the PTX.
pub fn parts(image: Image, cubins: &Cubins) -> Vec<Image> {
    match image {
        Image::Cubin { arch, .. } => cubins.images.iter().filter(|(a, _)| *a == arch).map(|&(arch, bytes)| Image::Cubin { arch, bytes }).collect(),
        ptx => vec![ptx],
    }
}

/// "sm_90a" -> (90, true); "sm_80" -> (80, false).
fn parse_arch(arch: &str) -> Option<(u32, bool)> {
    let digits = arch.strip_prefix("sm_")?;
    let (digits, specific) = match digits.strip_suffix('a') {
        Some(d) => (d, true),
        None => (digits, false),
    };
    Some((digits.parse().ok()?, specific))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A80: &[u8] = b"cubin80";
    const A86: &[u8] = b"cubin86";
    const A90: &[u8] = b"cubin90";
    const A90A: &[u8] = b"cubin90a";
    const A100A: &[u8] = b"cubin100a";

    static ALL: Cubins = Cubins {
        crate_name: "t",
        images: &[("sm_80", A80), ("sm_86", A86), ("sm_90", A90), ("sm_90a", A90A), ("sm_100a", A100A)],
        ptx: &[("sm_80", "ptx80"), ("sm_90a", "ptx90a"), ("sm_90", "ptx90")],
        stale: None,
    };
    static ONLY_80: Cubins = Cubins { crate_name: "t", images: &[("sm_80", A80)], ptx: &[], stale: None };
    static PTX_ONLY: Cubins =
        Cubins { crate_name: "t", images: &[], ptx: &[("sm_80", "ptx80"), ("sm_90a", "ptx90a")], stale: None };

    fn cubin_arch(cc: (u32, u32), c: &Cubins) -> &'static str {
        match pick_image(cc, c).unwrap() {
            Image::Cubin { arch, .. } => arch,
            other => panic!("wanted a cubin for {cc:?}, got {other:?}"),
        }
    }

    #[test]
    fn cubins_by_family() {
        assert_eq!(cubin_arch((9, 0), &ALL), "sm_90a");
        assert_eq!(cubin_arch((8, 6), &ALL), "sm_86");
        assert_eq!(cubin_arch((8, 9), &ALL), "sm_80");
        assert_eq!(cubin_arch((8, 0), &ALL), "sm_80");
        assert_eq!(cubin_arch((10, 0), &ALL), "sm_100a");
        assert_eq!(pick_image((9, 0), &ALL).unwrap(), Image::Cubin { arch: "sm_90a", bytes: A90A });
        static NO_A: Cubins = Cubins { crate_name: "t", images: &[("sm_90", A90)], ptx: &[], stale: None };
        assert_eq!(cubin_arch((9, 0), &NO_A), "sm_90");
    }

    #[test]
    fn every_cubin_of_the_chosen_arch_is_loaded() {
        static SHARDS: Cubins = Cubins { crate_name: "t", images: &[("sm_80", A80), ("sm_90a", A90A), ("sm_90a", A90)], ptx: &[], stale: None };
        let parts = parts(pick_image((9, 0), &SHARDS).unwrap(), &SHARDS);
        assert_eq!(parts, [Image::Cubin { arch: "sm_90a", bytes: A90A }, Image::Cubin { arch: "sm_90a", bytes: A90 }]);
    }

    #[test]
    fn ptx_fallback() {
        // 12.0 has no cubin rule: highest portable PTX below it.
        assert_eq!(pick_image((12, 0), &ALL).unwrap(), Image::Ptx { arch: "sm_90", text: "ptx90" });
        // sm_90a PTX is not portable: 10.0 without a cubin falls back to sm_80.
        assert_eq!(pick_image((10, 0), &PTX_ONLY).unwrap().arch(), "sm_80");
        // ...but on exactly 9.0 it is allowed.
        assert_eq!(pick_image((9, 0), &PTX_ONLY).unwrap().arch(), "sm_90a");
        assert_eq!(pick_image((8, 9), &PTX_ONLY).unwrap().arch(), "sm_80");
    }

    #[test]
    fn nothing_fits() {
        match pick_image((7, 5), &ALL) {
            Err(Error::NoCubin { arch, available }) => {
                assert_eq!(arch, "sm_75");
                assert!(available.contains(&"sm_90a (cubin)".to_string()));
                assert!(available.contains(&"sm_80 (ptx)".to_string()));
            }
            other => panic!("{other:?}"),
        }
        match pick_image((9, 0), &ONLY_80) {
            Err(Error::NoCubin { arch, .. }) => assert_eq!(arch, "sm_90a"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn arch_names() {
        assert_eq!(parse_arch("sm_90a"), Some((90, true)));
        assert_eq!(parse_arch("sm_100a"), Some((100, true)));
        assert_eq!(parse_arch("sm_80"), Some((80, false)));
        assert_eq!(parse_arch("compute_80"), None);
        assert_eq!(native_arch((9, 0)), "sm_90a");
        assert_eq!(native_arch((8, 9)), "sm_89");
    }
}
