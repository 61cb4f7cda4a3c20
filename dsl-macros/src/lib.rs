//! `#[kernel]`: one tile program in, three things out.
//!
//! ```ignore
//! #[kernel(configs = [(BLOCK = 2048, WARPS = 4), (BLOCK = 4096, WARPS = 8)],
//!          grid = [cdiv(n, BLOCK)], dtypes = [f32, bf16])]
//! pub fn add<T: Elem>(x: Ptr<T>, y: Ptr<T>, out: PtrMut<T>, n: usize) { ... }
//! ```
//! expands to a module `add` holding, for every config `cN`:
//! * a module `add::cN` with the config's values as `usize` consts, the
//!   shaped types (`Tile<T, R, C>`, `BlockPtr`, …) specialised to its thread
//!   count, and the body as `fn body`;
//! * on nvptx64, one `extern "ptx-kernel"` entry per dtype, named
//!   `add__BLOCK2048_WARPS4__bf16`;
//!
//! and, on the host, `add::launch(gpu, cfg, &x, &y, &mut out, n)` (device
//! tensors in, the grid computed from the scalars) and `add::cpu(cfg, &x, &y,
//! &mut out, n)` (the same program on the CPU interpreter), plus `CONFIGS`
//! and `DTYPES` tables for tuners and benches.
//!
//! A kernel may have a second type parameter, its output's element type
//! (`fn gemm<T: Elem, C: Elem>(a: Ptr<T>, .., c: PtrMut<C>)`): then each
//! `dtypes` item is `bf16` (both bf16) or a pair `(bf16, f32)`, and a pair's
//! entries are named `…__bf16_f32`. With three (`<TA, TB, C>`: operands of
//! two types, as FP8 GEMMs of e5m2 gradients by e4m3 weights), an item may
//! also be a triple `(F8E5M2, F8E4M3, bf16)`, named `…__e5m2_e4m3_bf16`.
//!
//! `arch = sm_90a` marks a kernel that uses Hopper-only instructions
//! (`rustile::wgmma`): its entries exist in the sm_90a build only, and
//! `launch` refuses other GPUs with a message (`supported(gpu)` asks first).
//!
//! Names the macro knows: `WARPS` (threads = 32·WARPS), `SMEM` (extra dynamic
//! shared memory in bytes) and `OCC` (programs that must fit one SM at once;
//! the device build caps registers at 64K / (threads·OCC), like CUDA's
//! `__launch_bounds__` minimum blocks). Every other name is the kernel's own.
//!
//! Mistakes that can be seen here are errors on the user's tokens: a config
//! without `WARPS`, a thread count that is not 32·2^k up to 1024, shared
//! memory over the Hopper limit, an unknown dtype, an argument type the
//! launcher cannot pass. Tile shapes are checked when the body is
//! instantiated (`rustile::layout::check`).
use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{bracketed, parenthesized, Error, Expr, FnArg, Ident, ItemFn, LitInt, Pat, Token, Type};

/// Shared memory a Hopper program may use (227 KiB); the launcher checks the
/// running GPU's own limit.
const MAX_SMEM: u64 = 227 * 1024;

struct Config {
    span: Span,
    values: Vec<(Ident, LitInt)>,
}

struct Args {
    configs: Vec<Config>,
    grid: Vec<Expr>,
    /// One item per entry: an element type, or a pair (operands, output).
    dtypes: Vec<Vec<Ident>>,
    cubins: Option<syn::Path>,
    /// `Some` for kernels that only exist on sm_90a (`arch = sm_90a`).
    sm90a: Option<Span>,
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let (mut configs, mut grid, mut dtypes, mut cubins, mut sm90a) = (None, None, Vec::new(), None, None);
        while !input.is_empty() {
            let key: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            match key.to_string().as_str() {
                "configs" => {
                    let list;
                    bracketed!(list in input);
                    let mut out = Vec::new();
                    while !list.is_empty() {
                        let one;
                        let paren = parenthesized!(one in list);
                        let mut values = Vec::new();
                        for pair in Punctuated::<(Ident, LitInt), Token![,]>::parse_terminated_with(&one, |p| {
                            let k: Ident = p.parse()?;
                            p.parse::<Token![=]>()?;
                            Ok((k, p.parse::<LitInt>()?))
                        })? {
                            values.push(pair);
                        }
                        out.push(Config { span: paren.span.join(), values });
                        if !list.is_empty() {
                            list.parse::<Token![,]>()?;
                        }
                    }
                    configs = Some((key, out));
                }
                "grid" => {
                    let list;
                    bracketed!(list in input);
                    grid = Some((key, Punctuated::<Expr, Token![,]>::parse_terminated(&list)?.into_iter().collect::<Vec<_>>()));
                }
                "dtypes" => {
                    let list;
                    bracketed!(list in input);
                    while !list.is_empty() {
                        if list.peek(syn::token::Paren) {
                            let pair;
                            parenthesized!(pair in list);
                            dtypes.push(Punctuated::<Ident, Token![,]>::parse_terminated(&pair)?.into_iter().collect());
                        } else {
                            dtypes.push(vec![list.parse::<Ident>()?]);
                        }
                        if !list.is_empty() {
                            list.parse::<Token![,]>()?;
                        }
                    }
                }
                "cubins" => cubins = Some(input.parse()?),
                "arch" => {
                    let arch: Ident = input.parse()?;
                    if arch != "sm_90a" {
                        return Err(Error::new(arch.span(), "the only arch a kernel can require is `sm_90a` (Hopper's wgmma); without `arch` it runs on sm_80 and up"));
                    }
                    sm90a = Some(arch.span());
                }
                other => {
                    return Err(Error::new(key.span(), format!("unknown #[kernel] argument `{other}`: expected configs, grid, dtypes, arch or cubins")))
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        let (ckey, configs) = configs.ok_or_else(|| input.error("#[kernel] needs `configs = [(NAME = value, WARPS = n), ...]`"))?;
        if configs.is_empty() {
            return Err(Error::new(ckey.span(), "#[kernel] needs at least one config"));
        }
        let (gkey, grid) = grid.ok_or_else(|| input.error("#[kernel] needs `grid = [programs along x, (y), (z)]`"))?;
        if grid.is_empty() || grid.len() > 3 {
            return Err(Error::new(gkey.span(), "grid has one to three dimensions"));
        }
        Ok(Args { configs, grid, dtypes, cubins, sm90a })
    }
}

/// How a kernel argument crosses from host to device.
enum ArgKind {
    /// `Ptr<T>` (read) or `PtrMut<T>` (write), with its element type.
    Tensor { mutable: bool, elem: Type },
    /// A scalar and the `rustile_host::Param` variant it travels as.
    Scalar(&'static str),
}

fn classify(ty: &Type) -> Option<ArgKind> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    let name = last.ident.to_string();
    if name == "Ptr" || name == "PtrMut" {
        let syn::PathArguments::AngleBracketed(a) = &last.arguments else { return None };
        let Some(syn::GenericArgument::Type(elem)) = a.args.first() else { return None };
        return Some(ArgKind::Tensor { mutable: name == "PtrMut", elem: elem.clone() });
    }
    let variant = match name.as_str() {
        "usize" | "u64" => "U64",
        "isize" | "i64" => "I64",
        "u32" => "U32",
        "i32" => "I32",
        "f32" => "F32",
        _ => return None,
    };
    Some(ArgKind::Scalar(variant))
}

const DTYPES: &[&str] = &["f32", "bf16", "f16", "F8E4M3", "F8E5M2"];

/// An entry's dtype tag, the shortest form of its `dtypes` item: `bf16`;
/// `bf16_f32` when the output's type differs; `e4m3_e5m2_bf16` when the
/// operands' types differ too.
fn instance_tag(types: &[Ident]) -> String {
    let (ops, out) = types.split_at(types.len().saturating_sub(1).max(1));
    let short: Vec<&Ident> = if ops.iter().all(|t| t == &ops[0]) {
        std::iter::once(&ops[0]).chain(out.iter().filter(|o| *o != &ops[0])).collect()
    } else {
        types.iter().collect()
    };
    short.into_iter().map(dtype_tag).collect::<Vec<_>>().join("_")
}

fn dtype_tag(d: &Ident) -> &'static str {
    match d.to_string().as_str() {
        "f32" => "f32",
        "bf16" => "bf16",
        "f16" => "f16",
        "F8E4M3" => "e4m3",
        _ => "e5m2",
    }
}

#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    let args = syn::parse_macro_input!(attr as Args);
    let func = syn::parse_macro_input!(item as ItemFn);
    match expand(args, func) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(args: Args, func: ItemFn) -> syn::Result<TokenStream2> {
    let name = &func.sig.ident;
    let vis = &func.vis;
    let docs: Vec<_> = func.attrs.iter().filter(|a| a.path().is_ident("doc")).collect();
    if let syn::ReturnType::Type(_, ty) = &func.sig.output {
        return Err(Error::new(ty.span(), "a kernel returns nothing: it writes its results through PtrMut arguments"));
    }

    // ---- the dtype parameter --------------------------------------------------------------
    let tparams: Vec<Ident> = func.sig.generics.type_params().map(|t| t.ident.clone()).collect();
    if tparams.len() > 3 {
        return Err(Error::new(func.sig.generics.span(), "a kernel has at most three type parameters (its operands' element types and its output's)"));
    }
    if func.sig.generics.lifetimes().next().is_some() || func.sig.generics.const_params().next().is_some() {
        return Err(Error::new(func.sig.generics.span(), "a kernel's only generic parameters are element types; sizes go in `configs`"));
    }
    match (tparams.first(), args.dtypes.first()) {
        (Some(t), None) => return Err(Error::new(t.span(), "a generic kernel needs `dtypes = [f32, bf16, ...]` to know which entries to build")),
        (None, Some(d)) => return Err(Error::new(d[0].span(), "`dtypes` is for kernels with an element type parameter")),
        _ => {}
    }
    // Each item as one type per parameter: `bf16` is bf16 for both.
    let mut instances_types: Vec<Vec<Ident>> = Vec::new();
    for item in &args.dtypes {
        for d in item {
            if !DTYPES.contains(&d.to_string().as_str()) {
                return Err(Error::new(d.span(), format!("unknown dtype `{d}`: expected one of {}", DTYPES.join(", "))));
            }
        }
        instances_types.push(match (item.len(), tparams.len()) {
            (1, n) => vec![item[0].clone(); n],
            (2, 2) | (3, 3) => item.clone(),
            (2, 3) => vec![item[0].clone(), item[0].clone(), item[1].clone()],
            _ => {
                let what = match tparams.len() {
                    3 => "an element type, a pair (operands, output) or a triple (A, B, output)",
                    2 => "an element type, or a pair (operands, output)",
                    _ => "one element type (the kernel has one type parameter)",
                };
                return Err(Error::new(item[0].span(), format!("each `dtypes` item is {what}")));
            }
        });
    }

    // ---- arguments ------------------------------------------------------------------------
    let mut params = Vec::new(); // (ident, type, kind)
    for arg in &func.sig.inputs {
        let FnArg::Typed(pt) = arg else { return Err(Error::new(arg.span(), "a kernel is a free function")) };
        let Pat::Ident(pi) = &*pt.pat else { return Err(Error::new(pt.pat.span(), "kernel arguments need plain names")) };
        let kind = classify(&pt.ty).ok_or_else(|| {
            Error::new(pt.ty.span(), "kernel arguments are Ptr<T>, PtrMut<T> or scalars (usize, isize, u64, i64, u32, i32, f32)")
        })?;
        params.push((pi.ident.clone(), (*pt.ty).clone(), kind));
    }

    // ---- configs --------------------------------------------------------------------------
    let keys: Vec<String> = args.configs[0].values.iter().map(|(k, _)| k.to_string()).collect();
    let mut cfg_mods = Vec::new();
    let mut cfg_table = Vec::new();
    let mut grid_arms = Vec::new();
    let mut launch_names = Vec::new();
    let mut cpu_arms = Vec::new();
    let scalar_idents: Vec<_> = params.iter().filter(|p| matches!(p.2, ArgKind::Scalar(_))).map(|p| p.0.clone()).collect();
    let scalar_types: Vec<_> = params.iter().filter(|p| matches!(p.2, ArgKind::Scalar(_))).map(|p| p.1.clone()).collect();
    let all_idents: Vec<_> = params.iter().map(|p| p.0.clone()).collect();
    let all_types: Vec<_> = params.iter().map(|p| p.1.clone()).collect();

    for (ci, cfg) in args.configs.iter().enumerate() {
        let these: Vec<String> = cfg.values.iter().map(|(k, _)| k.to_string()).collect();
        if these != keys {
            return Err(Error::new(cfg.span, format!("every config sets the same names in the same order: ({})", keys.join(", "))));
        }
        let mut warps = None;
        let mut occ = None;
        let mut smem_extra = 0u64;
        let mut consts = Vec::new();
        let mut label = Vec::new();
        for (k, v) in &cfg.values {
            let val: u64 = v.base10_parse()?;
            match k.to_string().as_str() {
                "WARPS" => warps = Some((val, v.span())),
                "SMEM" => smem_extra = val,
                "OCC" => occ = Some((val, v.span())),
                "THREADS" => return Err(Error::new(k.span(), "THREADS is derived (32·WARPS); set WARPS")),
                _ => {}
            }
            let lit = proc_macro2::Literal::usize_unsuffixed(val as usize);
            consts.push(quote_spanned! {v.span()=> pub const #k: usize = #lit; });
            label.push(format!("{k}{val}"));
        }
        let (warps, wspan) = warps.ok_or_else(|| Error::new(cfg.span, "each config needs WARPS (the program has 32·WARPS threads)"))?;
        // Row reductions split a tile over a power of two of warps; a
        // warp-specialized program is whole warpgroups (e.g. 12: two that
        // multiply and one that copies).
        if !(1..=32).contains(&warps) || !(warps.is_power_of_two() || warps % 4 == 0) {
            return Err(Error::new(wspan, "WARPS must be a power of two or a multiple of 4, from 1 to 32 (a program has at most 1024 threads)"));
        }
        let threads = warps * 32;
        if let Some((occ, span)) = occ {
            if occ == 0 || threads * occ > 2048 {
                return Err(Error::new(span, format!("OCC = {occ} programs of {threads} threads cannot share one SM (at most 2048 threads)")));
            }
        }
        // One f32 of reduction scratch per thread, plus what the config asks for.
        let smem = threads * 4 + smem_extra;
        if smem > MAX_SMEM {
            return Err(Error::new(cfg.span, format!("this config needs {smem} bytes of shared memory; the most a program can have is {MAX_SMEM}")));
        }
        let label = label.join("_");
        let m = format_ident!("c{}", ci);
        let body = &func.block;
        let threads_lit = proc_macro2::Literal::usize_unsuffixed(threads as usize);

        // One non-generic body per dtype, with `T` a local alias: const
        // arguments inside a generic function would count as generic and the
        // tile types' size bounds could not be proven. Then one GPU entry each.
        let mut bodies = Vec::new();
        let mut entries = Vec::new();
        // (the types bound to the type parameters, entry name) of each entry.
        let instances: Vec<(&[Ident], String)> = if tparams.is_empty() {
            vec![(&[][..], format!("{name}__{label}"))]
        } else {
            instances_types.iter().map(|d| (&d[..], format!("{name}__{label}__{}", instance_tag(d)))).collect()
        };
        for (dt, entry) in &instances {
            let entry_ident = Ident::new(entry, name.span());
            let body_ident = body_name(dt);
            let paths: Vec<TokenStream2> = dt.iter().map(dtype_path).collect();
            let alias = quote!(#(#[allow(dead_code)] type #tparams = #paths;)*);
            let tys: Vec<TokenStream2> = all_types.iter().map(|t| substitute(t, &tparams, &paths)).collect();
            let stmts = &body.stmts;
            // An sm_90a kernel's body uses instructions the other device builds
            // do not have; the interpreter runs it everywhere.
            let only_sm90a = if args.sm90a.is_some() {
                quote!(#[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_90a"))])
            } else {
                quote!()
            };
            let entry_cfg = if args.sm90a.is_some() {
                quote!(#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))])
            } else {
                quote!(#[cfg(target_arch = "nvptx64")])
            };
            bodies.push(quote! {
                #only_sm90a
                // Inlined into its GPU entry; on the host it stays one function of the
                // kernel's crate (inlining tile code across crates trips the const-generics checker).
                #[cfg_attr(target_arch = "nvptx64", inline(always))]
                #[cfg_attr(not(target_arch = "nvptx64"), inline(never))]
                #[allow(clippy::too_many_arguments)]
                pub fn #body_ident(#(#all_idents: #tys),*) {
                    #alias
                    #(#stmts)*
                }
            });
            entries.push(quote! {
                #entry_cfg
                #[unsafe(no_mangle)]
                pub unsafe extern "ptx-kernel" fn #entry_ident(#(#all_idents: #tys),*) {
                    #body_ident(#(#all_idents),*)
                }
            });
        }

        cfg_mods.push(quote! {
            #[allow(non_snake_case, unused_imports, dead_code)]
            pub mod #m {
                use super::*;
                #(#consts)*
                pub const THREADS: usize = #threads_lit;
                pub type Tile<T, const R: usize, const C: usize> = ::rustile::Tile<T, R, C, THREADS>;
                pub type Col<T, const R: usize, const C: usize> = ::rustile::Col<T, R, C, THREADS>;
                pub type Row<T, const R: usize, const C: usize> = ::rustile::Row<T, R, C, THREADS>;
                pub type BlockPtr<T, const R: usize, const C: usize> = ::rustile::BlockPtr<T, R, C, THREADS>;
                pub type OnlineSoftmax<const R: usize, const C: usize> = ::rustile::OnlineSoftmax<R, C, THREADS>;
                pub type Acc<const M: usize, const N: usize> = ::rustile::Acc<M, N, THREADS>;
                pub type Shared<T, const R: usize, const C: usize> = ::rustile::Shared<T, R, C, THREADS>;
                pub type SharedF32<const R: usize, const C: usize> = ::rustile::SharedF32<R, C, THREADS>;
                #(#bodies)*
                #(#entries)*
            }
        });
        let key_strs = keys.iter();
        let key_vals = cfg.values.iter().map(|(_, v)| v);
        let smem32 = smem as u32;
        let threads32 = threads as u32;
        cfg_table.push(quote! {
            ::rustile::KernelConfig { name: #label, params: &[#((#key_strs, #key_vals)),*], threads: #threads32, smem_bytes: #smem32 }
        });
        let grid = &args.grid;
        grid_arms.push(quote! { #ci => { use #m::*; [#((#grid) as usize),*] } });
        let names: Vec<_> = instances.iter().map(|(_, e)| e.clone()).collect();
        launch_names.push(quote! { &[#(#names),*] });
        let smem_lit = proc_macro2::Literal::usize_unsuffixed(smem as usize);
        let runs = instances.iter().map(|(dt, _)| {
            let body_ident = body_name(dt);
            if dt.is_empty() {
                return quote!(return ::rustile::__private::run_grid(__grid, #smem_lit, || #m::#body_ident(#(#all_idents),*)););
            }
            let paths: Vec<TokenStream2> = dt.iter().map(dtype_path).collect();
            // The caller's types are this entry's: reinterpret the arguments as them.
            let casts = params.iter().map(|(id, ty, kind)| match kind {
                ArgKind::Tensor { .. } => {
                    let ty = substitute(ty, &tparams, &paths);
                    quote!(let #id: #ty = unsafe { ::core::mem::transmute(#id) };)
                }
                ArgKind::Scalar(_) => quote!(),
            });
            quote! {
                if true #(&& ::core::any::TypeId::of::<#tparams>() == ::core::any::TypeId::of::<#paths>())* {
                    #(#casts)*
                    return ::rustile::__private::run_grid(__grid, #smem_lit, || #m::#body_ident(#(#all_idents),*));
                }
            }
        });
        cpu_arms.push(quote! { #ci => { #(#runs)* } });
    }

    // ---- host side ------------------------------------------------------------------------
    let generics = &func.sig.generics;
    let where_clause = &func.sig.generics.where_clause;
    let mut launch_args = Vec::new();
    let mut params_pack = Vec::new();
    let mut cpu_args = Vec::new();
    let mut cpu_wrap = Vec::new();
    let mut interp_wrap = Vec::new();
    for (id, _, kind) in &params {
        match kind {
            ArgKind::Tensor { mutable: true, elem } => {
                launch_args.push(quote!(#id: &mut ::rustile_host::Tensor<#elem>));
                params_pack.push(quote!(::rustile_host::Param::Ptr(#id.device_ptr())));
                cpu_args.push(quote!(#id: &mut [#elem]));
                cpu_wrap.push(quote!(let #id = ::rustile::PtrMut::from_slice(#id);));
                interp_wrap.push(quote!(let #id = unsafe { ::rustile::PtrMut::<#elem>::from_raw(#id.device_ptr() as *mut #elem, #id.numel()) };));
            }
            ArgKind::Tensor { mutable: false, elem } => {
                launch_args.push(quote!(#id: &::rustile_host::Tensor<#elem>));
                params_pack.push(quote!(::rustile_host::Param::Ptr(#id.device_ptr())));
                cpu_args.push(quote!(#id: &[#elem]));
                cpu_wrap.push(quote!(let #id = ::rustile::Ptr::from_slice(#id);));
                interp_wrap.push(quote!(let #id = unsafe { ::rustile::Ptr::<#elem>::from_raw(#id.device_ptr() as *const #elem, #id.numel()) };));
            }
            ArgKind::Scalar(variant) => {
                let ty = &params.iter().find(|p| &p.0 == id).unwrap().1;
                let v = Ident::new(variant, Span::call_site());
                let cast = match *variant {
                    "U64" => quote!(as u64),
                    "I64" => quote!(as i64),
                    _ => quote!(),
                };
                launch_args.push(quote!(#id: #ty));
                params_pack.push(quote!(::rustile_host::Param::#v(#id #cast)));
                cpu_args.push(quote!(#id: #ty));
            }
        }
    }
    let cubins = args.cubins.map(|p| quote!(#p)).unwrap_or(quote!(crate::CUBINS));
    let name_str = name.to_string();
    let dtype_tags: Vec<String> = instances_types.iter().map(|d| instance_tag(d)).collect();
    // Each entry's types by their `Elem::NAME` (which is `dtype_tag`), so that
    // a launch finds its entry by comparing names, with nothing built at run time.
    let entry_types = instances_types.iter().map(|d| {
        let names = d.iter().map(dtype_tag);
        quote!(&[#(#names),*])
    });
    let dtype_pick = if tparams.is_empty() {
        quote!(let __entry = 0usize;)
    } else {
        quote! {
            let __names: &[&str] = &[#(<#tparams as ::rustile::Elem>::NAME),*];
            let Some(__entry) = ENTRY_TYPES.iter().position(|t| *t == __names) else {
                return Err(::rustile_host::Error::DType(format!(
                    "kernel `{}` has no entry for {} (built for: {})", #name_str, __names.join(" → "), DTYPES.join(", "))));
            };
        }
    };
    let n_cfg = args.configs.len();
    let (arch_name, arch_check) = if args.sm90a.is_some() {
        (
            quote!("sm_90a"),
            quote! {
                if !supported(gpu) {
                    let (major, minor) = gpu.compute_capability();
                    return Err(::rustile_host::Error::Launch { kernel: #name_str.into(),
                        msg: format!("needs an sm_90a GPU (Hopper, compute capability 9.0); this one ({}) is {}.{}", gpu.name(), major, minor) });
                }
            },
        )
    } else {
        (quote!("sm_80"), quote!())
    };

    Ok(quote! {
        #(#docs)*
        #[allow(non_snake_case)]
        #vis mod #name {
            #[allow(unused_imports)]
            use super::*;

            /// Every config this kernel was built with, in `cfg` index order.
            pub const CONFIGS: &[::rustile::KernelConfig] = &[#(#cfg_table),*];
            /// The element types it was built for (`bf16`, or `bf16_f32` where
            /// the output's type differs).
            pub const DTYPES: &[&str] = &[#(#dtype_tags),*];
            /// Each entry's types (`T`, then the output's where the kernel has
            /// one), in `DTYPES` order.
            #[allow(dead_code)]
            const ENTRY_TYPES: &[&[&str]] = &[#(#entry_types),*];
            const ENTRIES: [&[&str]; #n_cfg] = [#(#launch_names),*];
            /// The oldest GPU arch with this kernel's entries ("sm_80" or "sm_90a").
            pub const ARCH: &str = #arch_name;

            /// Whether `gpu` has this kernel's entries (the CPU interpreter has them all).
            #[cfg(not(target_arch = "nvptx64"))]
            pub fn supported(gpu: &::rustile_host::Gpu) -> bool {
                ARCH != "sm_90a" || gpu.compute_capability() == (9, 0) || gpu.is_interpreter()
            }

            #(#cfg_mods)*

            /// Programs launched for config `cfg` at these sizes.
            #[cfg(not(target_arch = "nvptx64"))]
            #[allow(unused_variables, clippy::too_many_arguments)]
            pub fn grid(cfg: usize, #(#scalar_idents: #scalar_types),*) -> [usize; 3] {
                let g: &[usize] = &match cfg { #(#grid_arms)* _ => panic!("{}: no config {}", #name_str, cfg) };
                [g[0], *g.get(1).unwrap_or(&1), *g.get(2).unwrap_or(&1)]
            }

            /// Launches config `cfg` on the GPU's stream (asynchronous).
            #[cfg(not(target_arch = "nvptx64"))]
            #[allow(clippy::too_many_arguments)]
            pub fn launch #generics (gpu: &::rustile_host::Gpu, cfg: usize, #(#launch_args),*) -> ::rustile_host::Result<()> #where_clause {
                let Some(__config) = CONFIGS.get(cfg) else {
                    return Err(::rustile_host::Error::Launch { kernel: #name_str.into(), msg: format!("config {} does not exist (there are {})", cfg, CONFIGS.len()) });
                };
                #dtype_pick
                if gpu.is_interpreter() {
                    // The CPU entry, on the tensors' host memory.
                    let __grid = grid(cfg, #(#scalar_idents),*);
                    if __grid.contains(&0) {
                        return Ok(());
                    }
                    #(#interp_wrap)*
                    (|| {
                        match cfg { #(#cpu_arms)* _ => {} }
                        #[allow(unreachable_code)]
                        { panic!("{}: no entry for this element type (built for: {})", #name_str, DTYPES.join(", ")) }
                    })();
                    return Ok(());
                }
                #arch_check
                let __grid = grid(cfg, #(#scalar_idents),*);
                if __grid.contains(&0) {
                    return Ok(()); // nothing to do: an empty tensor
                }
                let __limits = [u32::MAX as usize / 2, 65535, 65535];
                if __grid.iter().zip(__limits).any(|(n, max)| *n > max) {
                    return Err(::rustile_host::Error::Launch { kernel: #name_str.into(), msg: format!("grid {:?} exceeds the GPU's limits", __grid) });
                }
                gpu.launch(&#cubins, ENTRIES[cfg][__entry], [__grid[0] as u32, __grid[1] as u32, __grid[2] as u32], [__config.threads, 1, 1], __config.smem_bytes,
                    &[#(#params_pack),*])
            }

            /// Runs config `cfg` in the CPU interpreter (every program of the grid, in parallel).
            #[cfg(not(target_arch = "nvptx64"))]
            #[allow(clippy::too_many_arguments)]
            pub fn cpu #generics (cfg: usize, #(#cpu_args),*) #where_clause {
                let __grid = grid(cfg, #(#scalar_idents),*);
                #(#cpu_wrap)*
                match cfg { #(#cpu_arms)* _ => panic!("{}: no config {}", #name_str, cfg) }
                #[allow(unreachable_code)]
                { panic!("{}: no entry for this element type (built for: {})", #name_str, DTYPES.join(", ")) }
            }
        }
    })
}

fn body_name(types: &[Ident]) -> Ident {
    if types.is_empty() { format_ident!("body") } else { format_ident!("body_{}", instance_tag(types)) }
}

fn dtype_path(d: &Ident) -> TokenStream2 {
    if d == "f32" { quote!(f32) } else { quote!(::rustile::#d) }
}

/// The type `ty` with each type parameter in `from` replaced by its type in
/// `to` (for one entry point: `Ptr<T>` becomes `Ptr<bf16>`).
fn substitute(ty: &Type, from: &[Ident], to: &[TokenStream2]) -> TokenStream2 {
    from.iter().zip(to).fold(quote!(#ty), |ts, (f, t)| replace_ident(ts, f, t))
}

fn replace_ident(ts: TokenStream2, from: &Ident, to: &TokenStream2) -> TokenStream2 {
    ts.into_iter()
        .flat_map(|tt| -> TokenStream2 {
            match tt {
                proc_macro2::TokenTree::Ident(i) if &i == from => to.clone(),
                proc_macro2::TokenTree::Group(g) => {
                    let mut ng = proc_macro2::Group::new(g.delimiter(), replace_ident(g.stream(), from, to));
                    ng.set_span(g.span());
                    quote!(#ng)
                }
                other => quote!(#other),
            }
        })
        .collect()
}
