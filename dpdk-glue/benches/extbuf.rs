//! Zero-copy transmit (`tx_chain_extbuf`: header mbuf + external-buffer mbuf
//! pointing at the payload + tail mbuf) against copying the payload into one
//! mbuf (`tx_copy`), per payload size; each iteration builds the frame and
//! frees it (the free callback releases the pinned region).
//!
//! "hot": the payload is the same cache-resident bytes every time; "cold":
//! successive payloads walk a 64 MiB region, as a large RDMA message from
//! memory would. Needs root (EAL): `cargo bench -p dpdk-glue --bench extbuf`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dpdk_glue::extbuf::{tx_chain_extbuf, tx_copy};
use dpdk_glue::{Eal, Mempool, DEFAULT_DATA_ROOM};

const SIZES: [usize; 6] = [256, 512, 1024, 2048, 4096, 8192];
const COLD_REGION: usize = 64 << 20;
const HEADER: [u8; 58] = [0x5A; 58];
const TAIL: [u8; 7] = [0, 0, 0xA1, 0xB2, 0xC3, 0xD4, 0];

fn eal_args() -> Vec<String> {
    [
        "--no-huge",
        "-m",
        "512",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        "-l",
        "0",
        "--log-level=*:error",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(std::iter::once(format!(
        "--file-prefix=extbuf-bench-{}",
        std::process::id()
    )))
    .collect()
}

fn bench(c: &mut Criterion) {
    if let Err(e) = Eal::init(&eal_args()) {
        eprintln!("extbuf bench: EAL init failed ({e}); the bench needs root");
        return;
    }
    let hdr_pool = Mempool::new("bench_hdr", 8191, 256, DEFAULT_DATA_ROOM).expect("hdr pool");
    let ext_pool = Mempool::new("bench_ext", 8191, 256, 0).expect("ext pool");
    let jumbo = Mempool::new("bench_jumbo", 4095, 256, 9216 + 128).expect("jumbo pool");
    let region: Arc<[u8]> = (0..COLD_REGION).map(|i| (i % 251) as u8).collect();

    for (label, cold) in [("hot", false), ("cold", true)] {
        let mut g = c.benchmark_group(format!("tx_build_free_{label}"));
        g.sample_size(30)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for &len in &SIZES {
            g.throughput(Throughput::Bytes(len as u64));
            let step = if cold { (len + 4096 + 64) & !63 } else { 0 };
            let mut off = 0usize;
            let mut next = move || {
                let o = off;
                off += step;
                if off + len > COLD_REGION {
                    off = 0;
                }
                o
            };
            g.bench_with_input(BenchmarkId::new("copy", len), &len, |b, &len| {
                b.iter(|| {
                    let o = next();
                    let m = tx_copy(&jumbo, &HEADER, &region[o..o + len], &TAIL).unwrap();
                    black_box(&m);
                })
            });
            g.bench_with_input(BenchmarkId::new("extbuf", len), &len, |b, &len| {
                b.iter(|| {
                    let o = next();
                    let m = tx_chain_extbuf(&hdr_pool, &ext_pool, &HEADER, &region, o, len, &TAIL)
                        .unwrap();
                    black_box(&m);
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
