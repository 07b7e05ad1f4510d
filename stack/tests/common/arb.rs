//! proptest strategies and settings shared by the property tests of the
//! wire, `stack/tests/proptest_wire.rs` and `tests/icrc_reference.rs`
//! (both include this file with `#[path]`).
// Each test binary uses a part of it.
#![allow(dead_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use roce_stack::wire::grh::GrhRepr;
use roce_stack::wire::{Ipv4Repr, Ipv6Repr, NetRepr};

/// Cases per property: `$PROPTEST_CASES`, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Any IPv4 header (DSCP, ECN, TTL, identification, DF random).
pub fn arb_ipv4() -> impl Strategy<Value = NetRepr> {
    (
        any::<u32>(),
        any::<u32>(),
        0u8..64,
        0u8..4,
        any::<u8>(),
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(|(s, d, dscp, ecn, ttl, ident, df)| {
            NetRepr::Ipv4(Ipv4Repr {
                src: Ipv4Addr::from(s),
                dst: Ipv4Addr::from(d),
                dscp,
                ecn,
                ttl,
                ident,
                dont_frag: df,
            })
        })
}

/// Any IPv6 header (flow label 20 bits).
pub fn arb_ipv6() -> impl Strategy<Value = NetRepr> {
    (
        any::<u128>(),
        any::<u128>(),
        0u8..64,
        0u8..4,
        0u32..(1 << 20),
        any::<u8>(),
    )
        .prop_map(|(s, d, dscp, ecn, fl, hl)| {
            NetRepr::Ipv6(Ipv6Repr {
                src: Ipv6Addr::from(s),
                dst: Ipv6Addr::from(d),
                dscp,
                ecn,
                flow_label: fl,
                hop_limit: hl,
            })
        })
}

/// Any RoCEv1 GRH (next header 0x1B, payload length left to the builder).
pub fn arb_grh() -> impl Strategy<Value = NetRepr> {
    (
        any::<u128>(),
        any::<u128>(),
        any::<u8>(),
        0u32..(1 << 20),
        any::<u8>(),
    )
        .prop_map(|(s, d, tc, fl, hl)| {
            NetRepr::Grh(GrhRepr {
                traffic_class: tc,
                flow_label: fl,
                payload_len: 0,
                next_header: 0x1B,
                hop_limit: hl,
                sgid: Ipv6Addr::from(s),
                dgid: Ipv6Addr::from(d),
            })
        })
}

/// IPv4, IPv6 or RoCEv1, one in three each.
pub fn arb_net() -> impl Strategy<Value = NetRepr> {
    prop_oneof![arb_ipv4(), arb_ipv6(), arb_grh()]
}
