//! Build script: find the system DPDK (>= 22.11) with pkg-config, compile the
//! C shim that exports DPDK's static-inline functions, and generate bindings.
//!
//! The FULL `pkg-config --cflags libdpdk` output goes to both the C compiler
//! and bindgen: it carries `-include rte_config.h` and `-march=...`, without
//! which DPDK's headers do not compile (or compile to a different layout).

use std::env;
use std::path::PathBuf;
use std::process::Command;

const MIN_VERSION: &str = "22.11";

fn main() {
    println!("cargo:rerun-if-changed=shim.c");
    println!("cargo:rerun-if-changed=shim.h");
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");

    // Fail early, with the install hint, when DPDK is missing or too old.
    probe(false);
    let cflags = full_cflags();
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));

    // The shim: always optimised (it holds the inlined fast path of
    // rte_pktmbuf_free, rte_eth_rx_burst, ...), whatever the profile.
    let mut build = cc::Build::new();
    build.file(manifest.join("shim.c")).include(&manifest);
    for f in &cflags {
        build.flag(f);
    }
    build
        .opt_level(2)
        .flag_if_supported("-Wno-unused-parameter")
        .compile("dpdk_sys_shim");

    // Link flags (-L, -l) for the shared DPDK libraries, emitted AFTER the
    // shim archive: with `--as-needed` a shared library listed before the
    // only object that uses it (the shim uses librte_mempool's ops table,
    // librte_ethdev's fast-path ops) would be dropped.
    let lib = probe(true);
    println!("cargo:version={}", lib.version);

    let bindings = bindgen::Builder::default()
        .header(manifest.join("wrapper.h").to_string_lossy())
        .clang_args(&cflags)
        .clang_arg(format!("-I{}", manifest.display()))
        .allowlist_function("rte_eal_.*")
        .allowlist_function("rte_eth_.*")
        .allowlist_function("rte_pktmbuf_.*")
        .allowlist_function("rte_mempool_.*")
        .allowlist_function("rte_dev_.*")
        .allowlist_function("rte_strerror")
        .allowlist_function("rte_lcore_count")
        .allowlist_function("rte_thread_register")
        .allowlist_function("rte_thread_unregister")
        .allowlist_function("rte_mem_virt2iova")
        .allowlist_function("rte_extmem_.*")
        .allowlist_function("shim_.*")
        .allowlist_type("rte_eth_.*")
        .allowlist_type("rte_mbuf_ext_shared_info")
        .allowlist_type("rte_iova_mode")
        .allowlist_var("RTE_MAX_ETHPORTS")
        .allowlist_var("RTE_ETH_NAME_MAX_LEN")
        .allowlist_var("RTE_MEMPOOL_CACHE_MAX_SIZE")
        .allowlist_var("RTE_PKTMBUF_HEADROOM")
        .allowlist_var("RTE_ETH_LINK_.*")
        .allowlist_var("RTE_ETHER_.*")
        .allowlist_var("SOCKET_ID_ANY")
        .layout_tests(false)
        .generate_comments(false)
        .derive_default(true)
        .derive_debug(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate();
    let bindings = match bindings {
        Ok(b) => b,
        Err(e) => {
            eprintln!("dpdk-sys: bindgen failed ({e}); is libclang-dev installed?");
            std::process::exit(1);
        }
    };
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("bindings.rs");
    if let Err(e) = bindings.write_to_file(&out) {
        eprintln!("dpdk-sys: cannot write {}: {e}", out.display());
        std::process::exit(1);
    }
}

/// Every word of `pkg-config --cflags libdpdk`, unfiltered.
fn full_cflags() -> Vec<String> {
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(&pkg_config)
        .args(["--cflags", "libdpdk"])
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        Ok(o) => {
            eprintln!(
                "dpdk-sys: `{pkg_config} --cflags libdpdk` failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("dpdk-sys: cannot run `{pkg_config}`: {e}");
            std::process::exit(1);
        }
    }
}

/// pkg-config's view of libdpdk >= [`MIN_VERSION`]; `metadata` prints the
/// link flags for cargo. Exits with an install hint when it is missing.
fn probe(metadata: bool) -> pkg_config::Library {
    match pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .cargo_metadata(metadata)
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!(
                "dpdk-sys: libdpdk >= {MIN_VERSION} not found by pkg-config ({e}).\n\
                 On Debian/Ubuntu: apt-get install libdpdk-dev libclang-dev pkg-config"
            );
            std::process::exit(1);
        }
    }
}
