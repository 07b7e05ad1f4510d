//! Link the cdylib with rdma-core's symbol versions (libibverbs.map).
//!
//! The exported names are defined in `src/ffi/export.rs` with
//! `global_asm!`, not `#[no_mangle]`: rustc hands the linker an anonymous
//! version script that lists every `#[no_mangle]` symbol, and a name listed
//! there could not get a version of ours. rust-lld (the default linker of
//! x86_64 Linux since Rust 1.90) then lets the named version nodes of this
//! script version the `global_asm!` names while rustc's `local: *` hides the
//! rest; GNU ld refuses the two scripts together ("anonymous version tag
//! cannot be combined with other version tags").
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
}
