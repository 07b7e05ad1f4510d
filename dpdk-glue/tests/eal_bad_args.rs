//! `rte_eal_init` failing is reported with `rte_errno`, its text and the
//! arguments. Its own binary (process): after a failed init, DPDK's getopt
//! state does not allow a clean second attempt.

mod common;

use dpdk_glue::{DpdkError, Eal};

#[test]
fn eal_init_failure_reports_errno_text_and_arguments() {
    let mut bad = common::eal_args();
    bad.push("--no-such-eal-option".to_string());
    match Eal::init(&bad) {
        Err(DpdkError::EalInit { errno, text, args }) => {
            assert_eq!(errno, 22, "EINVAL");
            assert_eq!(text, "Invalid argument");
            assert!(args.contains("--no-such-eal-option"));
        }
        other => panic!("expected EalInit, got {other:?}"),
    }
    assert!(Eal::get().is_none());
    // An argument with a NUL byte never reaches DPDK.
    assert!(matches!(
        Eal::init(&["-l\0".to_string()]),
        Err(DpdkError::InvalidArgument { .. })
    ));
}
