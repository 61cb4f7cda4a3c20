fn main() {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("cubins.rs");
    std::fs::write(out, "pub static CUBINS: rustile_host::Cubins = rustile_host::Cubins { crate_name: \"rustile_ops\", images: &[], ptx: &[] };\n").unwrap();
}
