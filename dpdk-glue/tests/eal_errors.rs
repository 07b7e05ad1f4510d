//! What the EAL reports only in its log becomes an error: a `--vdev` that
//! did not probe, and a process without ports. Its own binary (process),
//! because it needs an EAL with no ports at all. Needs root.

mod common;

use dpdk_glue::{DpdkError, Eal, Mempool, DEFAULT_DATA_ROOM};

#[test]
fn eal_init_reports_a_failed_vdev_and_zero_ports() {
    // Before init, DPDK objects are refused.
    assert_eq!(
        Mempool::new("early", 511, 0, DEFAULT_DATA_ROOM).unwrap_err(),
        DpdkError::NotInitialized
    );
    // net_pcap without rx/tx arguments fails to probe; rte_eal_init itself
    // succeeds and only logs it.
    let name = format!("net_pcap{}", common::seq());
    let mut args = common::eal_args();
    args.push(format!("--vdev={name}"));
    match Eal::init(&args) {
        Err(DpdkError::VdevProbe {
            name: n, detail, ..
        }) => {
            assert_eq!(n, name);
            assert!(detail.contains("no ethdev port"), "{detail}");
        }
        other => panic!("expected VdevProbe, got {other:?}"),
    }
    // The EAL is up nevertheless, with no port.
    let eal = Eal::get().expect("EAL up after the vdev error");
    assert_eq!(eal.available_ports(), Err(DpdkError::NoPorts));
    assert!(eal.ports().is_empty());
    assert!(DpdkError::NoPorts
        .to_string()
        .contains("rte_eth_dev_count_avail() == 0"));
    // And it cannot be initialised again.
    assert_eq!(
        Eal::init(&common::eal_args()).unwrap_err(),
        DpdkError::AlreadyInitialized
    );
    // Objects work now.
    assert!(Mempool::new("late", 511, 0, DEFAULT_DATA_ROOM).is_ok());
}
