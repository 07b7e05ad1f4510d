//! The library's dynamic symbol table (read by binutils' `objdump -T`, not
//! by us) against `libibverbs.map` and against what Debian's programs
//! import; and the two ways of loading it: `LD_PRELOAD` (the other tests)
//! and a copy named `libibverbs.so.1` found on `LD_LIBRARY_PATH`, as
//! `dlopen` + `dlvsym(..., "IBVERBS_1.1")` users (NCCL) load it.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

/// (name, version) of every symbol `path` defines (or, `undefined`,
/// imports) in the IBVERBS namespaces.
fn dynsyms(path: &std::path::Path, undefined: bool) -> BTreeSet<(String, String)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(path)
        .output()
        .expect("objdump (binutils)");
    assert!(out.status.success(), "objdump -T {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("*UND*") == undefined)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ver, name) = (f.get(f.len().checked_sub(2)?)?, f.last()?);
            let ver = ver.trim_matches(|c| c == '(' || c == ')');
            ver.starts_with("IBVERBS")
                .then(|| (name.to_string(), ver.to_string()))
        })
        .collect()
}

/// (name, version) pairs `libibverbs.map` declares.
fn map_file() -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/libibverbs.map"))
        .expect("libibverbs.map");
    let mut node = String::new();
    let mut out = BTreeSet::new();
    let mut in_comment = false;
    for raw in text.lines() {
        let l = raw.trim();
        if in_comment || l.starts_with("/*") {
            in_comment = !l.contains("*/");
            continue;
        }
        if let Some(n) = l.strip_suffix('{') {
            node = n.trim().to_string();
        } else if let Some(sym) = l.strip_suffix(';') {
            if !sym.contains(':') && !sym.starts_with('}') && !sym.is_empty() {
                out.insert((sym.trim().to_string(), node.clone()));
            }
        }
    }
    out
}

#[test]
fn exports_exactly_the_map_with_rdma_core_versions() {
    let lib = common::lib();
    let got = dynsyms(&lib, false);
    let want = map_file();
    assert_eq!(got, want, "exported symbols differ from libibverbs.map");
    // And nothing else: no Rust or helper symbol leaks.
    let out = Command::new("objdump")
        .arg("-T")
        .arg(&lib)
        .output()
        .unwrap();
    let leaked: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains("*UND*") && l.contains(" g "))
        .filter(|l| !l.contains("IBVERBS"))
        .map(str::to_string)
        .collect();
    assert!(leaked.is_empty(), "unversioned exports: {leaked:?}");
}

#[test]
fn every_symbol_the_debian_programs_import_is_exported() {
    let ours = dynsyms(&common::lib(), false);
    let mut checked = 0;
    for prog in [
        "ibv_devices",
        "ibv_devinfo",
        "ibv_rc_pingpong",
        "ibv_uc_pingpong",
        "ibv_ud_pingpong",
        "ibv_srq_pingpong",
        "ib_write_bw",
        "ib_read_bw",
        "ib_send_bw",
        "ib_atomic_bw",
        "ib_write_lat",
        "ib_read_lat",
        "ib_send_lat",
        "ib_atomic_lat",
    ] {
        let need = dynsyms(&common::program(prog), true);
        assert!(!need.is_empty(), "{prog} imports no IBVERBS symbol?");
        let missing: Vec<_> = need.difference(&ours).collect();
        assert!(missing.is_empty(), "{prog} needs {missing:?}");
        checked += need.len();
    }
    assert!(checked > 200);
}

/// A directory holding the library as `libibverbs.so.1`.
fn replacement_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("roce-ibverbs-so1-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(common::lib(), dir.join("libibverbs.so.1")).unwrap();
    dir
}

#[test]
fn loads_as_libibverbs_so_1_on_the_library_path() {
    let dir = replacement_dir();
    let ld = dir.to_string_lossy().to_string();
    // ibv_devices linked against libibverbs.so.1 finds ours first.
    let out = Command::new(common::program("ibv_devices"))
        .env("LD_LIBRARY_PATH", &ld)
        .env("ROCE_LOCAL_IP", "127.0.0.1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("roce0"), "{text}");
    // ldd confirms which file the loader chose.
    let ldd = Command::new("ldd")
        .arg(common::program("ibv_rc_pingpong"))
        .env("LD_LIBRARY_PATH", &ld)
        .output()
        .unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(ldd.contains(&format!("{ld}/libibverbs.so.1")), "{ldd}");

    // A pingpong pair loads it the same way.
    let r = common::run_pair(
        "ibv_rc_pingpong",
        &["-g", "0", "-n", "200"],
        Duration::from_secs(60),
        &[("LD_LIBRARY_PATH", &ld), ("LD_PRELOAD", "")],
    );
    r.assert_ok("ibv_rc_pingpong via LD_LIBRARY_PATH");
    assert!(r.client.out.contains("200 iters in "), "{}", r.client.out);

    // dlopen + dlvsym with rdma-core's version names (NCCL's way).
    let src = dir.join("dl.c");
    std::fs::write(
        &src,
        r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
    void *h = dlopen("libibverbs.so.1", RTLD_NOW);
    if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
    const char *v11[] = {"ibv_get_device_list", "ibv_open_device", "ibv_alloc_pd",
        "ibv_reg_mr", "ibv_create_cq", "ibv_create_qp", "ibv_modify_qp", "ibv_query_port", 0};
    for (int i = 0; v11[i]; i++)
        if (!dlvsym(h, v11[i], "IBVERBS_1.1")) { printf("missing %s\n", v11[i]); return 1; }
    if (!dlvsym(h, "ibv_reg_mr_iova2", "IBVERBS_1.8")) { printf("missing iova2\n"); return 1; }
    if (!dlvsym(h, "_ibv_query_gid_ex", "IBVERBS_1.11")) { printf("missing gid_ex\n"); return 1; }
    if (dlvsym(h, "ibv_get_device_list", "IBVERBS_9.9")) { printf("bogus version found\n"); return 1; }
    typedef void **(*gdl)(int *);
    typedef const char *(*gdn)(void *);
    int n = 0;
    void **l = ((gdl)dlvsym(h, "ibv_get_device_list", "IBVERBS_1.1"))(&n);
    if (!l || n != 1) { printf("no device\n"); return 1; }
    printf("device %s\n", ((gdn)dlvsym(h, "ibv_get_device_name", "IBVERBS_1.1"))(l[0]));
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.join("dl");
    let cc = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-ldl")
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &ld)
        .env("ROCE_LOCAL_IP", "127.0.0.1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success() && text.contains("device roce0"),
        "{text}"
    );
}
