//! The `#[repr(C)]` structures of `roce_ibverbs::ffi::types` against
//! rdma-core's header: a C program compiled against the installed
//! `/usr/include/infiniband/verbs.h` (libibverbs-dev) prints every size,
//! alignment, field offset and enum value used, and each must equal the
//! Rust one. The oracle is the C compiler reading rdma-core's header.

use std::collections::HashMap;
use std::mem::{align_of, offset_of, size_of};
use std::process::Command;

use roce_ibverbs::ffi::types::*;

/// (key, Rust value); the key is also the C expression's label.
fn rust_side() -> Vec<(String, String, usize)> {
    let mut v: Vec<(String, String, usize)> = Vec::new();
    macro_rules! st {
        ($c:literal, $t:ty, [$($cf:literal => $rf:ident),* $(,)?]) => {
            v.push((format!("sizeof {}", $c), format!("sizeof(struct {})", $c), size_of::<$t>()));
            v.push((format!("alignof {}", $c), format!("_Alignof(struct {})", $c), align_of::<$t>()));
            $(
                v.push((
                    format!("{}.{}", $c, $cf),
                    format!("offsetof(struct {}, {})", $c, $cf),
                    offset_of!($t, $rf),
                ));
            )*
        };
    }
    st!("ibv_device", ibv_device, [
        "node_type" => node_type, "transport_type" => transport_type, "name" => name,
        "dev_name" => dev_name, "dev_path" => dev_path, "ibdev_path" => ibdev_path,
    ]);
    st!("ibv_context_ops", ibv_context_ops, [
        "alloc_mw" => alloc_mw, "bind_mw" => bind_mw, "dealloc_mw" => dealloc_mw,
        "poll_cq" => poll_cq, "req_notify_cq" => req_notify_cq,
        "post_srq_recv" => post_srq_recv, "post_send" => post_send, "post_recv" => post_recv,
        "_compat_async_event" => _compat_async_event,
    ]);
    st!("ibv_context", ibv_context, [
        "device" => device, "ops" => ops, "cmd_fd" => cmd_fd, "async_fd" => async_fd,
        "num_comp_vectors" => num_comp_vectors, "mutex" => mutex, "abi_compat" => abi_compat,
    ]);
    st!("ibv_device_attr", ibv_device_attr, [
        "fw_ver" => fw_ver, "node_guid" => node_guid, "sys_image_guid" => sys_image_guid,
        "max_mr_size" => max_mr_size, "page_size_cap" => page_size_cap,
        "vendor_id" => vendor_id, "vendor_part_id" => vendor_part_id, "hw_ver" => hw_ver,
        "max_qp" => max_qp, "max_qp_wr" => max_qp_wr, "device_cap_flags" => device_cap_flags,
        "max_sge" => max_sge, "max_sge_rd" => max_sge_rd, "max_cq" => max_cq,
        "max_cqe" => max_cqe, "max_mr" => max_mr, "max_pd" => max_pd,
        "max_qp_rd_atom" => max_qp_rd_atom, "max_ee_rd_atom" => max_ee_rd_atom,
        "max_res_rd_atom" => max_res_rd_atom, "max_qp_init_rd_atom" => max_qp_init_rd_atom,
        "max_ee_init_rd_atom" => max_ee_init_rd_atom, "atomic_cap" => atomic_cap,
        "max_ee" => max_ee, "max_rdd" => max_rdd, "max_mw" => max_mw,
        "max_raw_ipv6_qp" => max_raw_ipv6_qp, "max_raw_ethy_qp" => max_raw_ethy_qp,
        "max_mcast_grp" => max_mcast_grp, "max_mcast_qp_attach" => max_mcast_qp_attach,
        "max_total_mcast_qp_attach" => max_total_mcast_qp_attach, "max_ah" => max_ah,
        "max_fmr" => max_fmr, "max_map_per_fmr" => max_map_per_fmr, "max_srq" => max_srq,
        "max_srq_wr" => max_srq_wr, "max_srq_sge" => max_srq_sge, "max_pkeys" => max_pkeys,
        "local_ca_ack_delay" => local_ca_ack_delay, "phys_port_cnt" => phys_port_cnt,
    ]);
    // The compat port attributes are a prefix of struct ibv_port_attr.
    macro_rules! port {
        ($($f:ident),*) => {
            $(
                v.push((
                    format!("ibv_port_attr.{}", stringify!($f)),
                    format!("offsetof(struct ibv_port_attr, {})", stringify!($f)),
                    offset_of!(_compat_ibv_port_attr, $f),
                ));
            )*
        };
    }
    port!(
        state,
        max_mtu,
        active_mtu,
        gid_tbl_len,
        port_cap_flags,
        max_msg_sz,
        bad_pkey_cntr,
        qkey_viol_cntr,
        pkey_tbl_len,
        lid,
        sm_lid,
        lmc,
        max_vl_num,
        sm_sl,
        subnet_timeout,
        init_type_reply,
        active_width,
        active_speed,
        phys_state,
        link_layer,
        flags
    );
    st!("ibv_port_attr", ibv_port_attr, ["port_cap_flags2" => port_cap_flags2]);
    st!("ibv_gid_entry", ibv_gid_entry, [
        "gid" => gid, "gid_index" => gid_index, "port_num" => port_num,
        "gid_type" => gid_type, "ndev_ifindex" => ndev_ifindex,
    ]);
    st!("ibv_pd", ibv_pd, ["context" => context, "handle" => handle]);
    st!("ibv_mr", ibv_mr, [
        "context" => context, "pd" => pd, "addr" => addr, "length" => length,
        "handle" => handle, "lkey" => lkey, "rkey" => rkey,
    ]);
    st!("ibv_comp_channel", ibv_comp_channel, ["context" => context, "fd" => fd, "refcnt" => refcnt]);
    st!("ibv_cq", ibv_cq, [
        "context" => context, "channel" => channel, "cq_context" => cq_context,
        "handle" => handle, "cqe" => cqe, "mutex" => mutex, "cond" => cond,
        "comp_events_completed" => comp_events_completed,
        "async_events_completed" => async_events_completed,
    ]);
    st!("ibv_srq", ibv_srq, [
        "context" => context, "srq_context" => srq_context, "pd" => pd, "handle" => handle,
        "mutex" => mutex, "cond" => cond, "events_completed" => events_completed,
    ]);
    st!("ibv_qp", ibv_qp, [
        "context" => context, "qp_context" => qp_context, "pd" => pd, "send_cq" => send_cq,
        "recv_cq" => recv_cq, "srq" => srq, "handle" => handle, "qp_num" => qp_num,
        "state" => state, "qp_type" => qp_type, "mutex" => mutex, "cond" => cond,
        "events_completed" => events_completed,
    ]);
    st!("ibv_ah", ibv_ah, ["context" => context, "pd" => pd, "handle" => handle]);
    st!("ibv_global_route", ibv_global_route, [
        "dgid" => dgid, "flow_label" => flow_label, "sgid_index" => sgid_index,
        "hop_limit" => hop_limit, "traffic_class" => traffic_class,
    ]);
    st!("ibv_ah_attr", ibv_ah_attr, [
        "grh" => grh, "dlid" => dlid, "sl" => sl, "src_path_bits" => src_path_bits,
        "static_rate" => static_rate, "is_global" => is_global, "port_num" => port_num,
    ]);
    st!("ibv_grh", ibv_grh, [
        "version_tclass_flow" => version_tclass_flow, "paylen" => paylen,
        "next_hdr" => next_hdr, "hop_limit" => hop_limit, "sgid" => sgid, "dgid" => dgid,
    ]);
    st!("ibv_qp_cap", ibv_qp_cap, [
        "max_send_wr" => max_send_wr, "max_recv_wr" => max_recv_wr,
        "max_send_sge" => max_send_sge, "max_recv_sge" => max_recv_sge,
        "max_inline_data" => max_inline_data,
    ]);
    st!("ibv_qp_init_attr", ibv_qp_init_attr, [
        "qp_context" => qp_context, "send_cq" => send_cq, "recv_cq" => recv_cq,
        "srq" => srq, "cap" => cap, "qp_type" => qp_type, "sq_sig_all" => sq_sig_all,
    ]);
    st!("ibv_qp_attr", ibv_qp_attr, [
        "qp_state" => qp_state, "cur_qp_state" => cur_qp_state, "path_mtu" => path_mtu,
        "path_mig_state" => path_mig_state, "qkey" => qkey, "rq_psn" => rq_psn,
        "sq_psn" => sq_psn, "dest_qp_num" => dest_qp_num, "qp_access_flags" => qp_access_flags,
        "cap" => cap, "ah_attr" => ah_attr, "alt_ah_attr" => alt_ah_attr,
        "pkey_index" => pkey_index, "alt_pkey_index" => alt_pkey_index,
        "en_sqd_async_notify" => en_sqd_async_notify, "sq_draining" => sq_draining,
        "max_rd_atomic" => max_rd_atomic, "max_dest_rd_atomic" => max_dest_rd_atomic,
        "min_rnr_timer" => min_rnr_timer, "port_num" => port_num, "timeout" => timeout,
        "retry_cnt" => retry_cnt, "rnr_retry" => rnr_retry, "alt_port_num" => alt_port_num,
        "alt_timeout" => alt_timeout, "rate_limit" => rate_limit,
    ]);
    st!("ibv_srq_attr", ibv_srq_attr, ["max_wr" => max_wr, "max_sge" => max_sge, "srq_limit" => srq_limit]);
    st!("ibv_srq_init_attr", ibv_srq_init_attr, ["srq_context" => srq_context, "attr" => attr]);
    st!("ibv_sge", ibv_sge, ["addr" => addr, "length" => length, "lkey" => lkey]);
    st!("ibv_send_wr", ibv_send_wr, [
        "wr_id" => wr_id, "next" => next, "sg_list" => sg_list, "num_sge" => num_sge,
        "opcode" => opcode, "send_flags" => send_flags, "imm_data" => imm_data,
        "wr" => wr, "qp_type.xrc.remote_srqn" => remote_srqn, "bind_mw" => tail,
    ]);
    st!("ibv_recv_wr", ibv_recv_wr, ["wr_id" => wr_id, "next" => next, "sg_list" => sg_list, "num_sge" => num_sge]);
    st!("ibv_wc", ibv_wc, [
        "wr_id" => wr_id, "status" => status, "opcode" => opcode, "vendor_err" => vendor_err,
        "byte_len" => byte_len, "imm_data" => imm_data, "qp_num" => qp_num, "src_qp" => src_qp,
        "wc_flags" => wc_flags, "pkey_index" => pkey_index, "slid" => slid, "sl" => sl,
        "dlid_path_bits" => dlid_path_bits,
    ]);
    st!("ibv_async_event", ibv_async_event, ["element" => element, "event_type" => event_type]);
    st!("ibv_ece", ibv_ece, ["vendor_id" => vendor_id, "options" => options, "comp_mask" => comp_mask]);
    // Union members of ibv_send_wr.wr.
    for (c, r) in [
        ("wr.rdma.remote_addr", offset_of!(ibv_wr_rdma, remote_addr)),
        ("wr.rdma.rkey", offset_of!(ibv_wr_rdma, rkey)),
        (
            "wr.atomic.remote_addr",
            offset_of!(ibv_wr_atomic, remote_addr),
        ),
        (
            "wr.atomic.compare_add",
            offset_of!(ibv_wr_atomic, compare_add),
        ),
        ("wr.atomic.swap", offset_of!(ibv_wr_atomic, swap)),
        ("wr.atomic.rkey", offset_of!(ibv_wr_atomic, rkey)),
        ("wr.ud.ah", offset_of!(ibv_wr_ud, ah)),
        ("wr.ud.remote_qpn", offset_of!(ibv_wr_ud, remote_qpn)),
        ("wr.ud.remote_qkey", offset_of!(ibv_wr_ud, remote_qkey)),
    ] {
        v.push((
            format!("ibv_send_wr.{c}"),
            format!("offsetof(struct ibv_send_wr, {c}) - offsetof(struct ibv_send_wr, wr)"),
            r,
        ));
    }
    v.push((
        "sizeof wr".into(),
        "sizeof(((struct ibv_send_wr *)0)->wr)".into(),
        size_of::<ibv_send_wr_wr>(),
    ));
    // Enum values the library uses.
    for (name, val) in [
        ("IBV_NODE_CA", IBV_NODE_CA as i64),
        ("IBV_TRANSPORT_IB", IBV_TRANSPORT_IB as i64),
        ("IBV_PORT_ACTIVE", IBV_PORT_ACTIVE as i64),
        ("IBV_LINK_LAYER_ETHERNET", IBV_LINK_LAYER_ETHERNET as i64),
        ("IBV_ATOMIC_HCA", IBV_ATOMIC_HCA as i64),
        ("IBV_GID_TYPE_ROCE_V2", IBV_GID_TYPE_ROCE_V2 as i64),
        ("IBV_QPT_RC", IBV_QPT_RC as i64),
        ("IBV_QPT_UC", IBV_QPT_UC as i64),
        ("IBV_QPT_UD", IBV_QPT_UD as i64),
        ("IBV_WR_RDMA_WRITE", IBV_WR_RDMA_WRITE as i64),
        (
            "IBV_WR_RDMA_WRITE_WITH_IMM",
            IBV_WR_RDMA_WRITE_WITH_IMM as i64,
        ),
        ("IBV_WR_SEND", IBV_WR_SEND as i64),
        ("IBV_WR_SEND_WITH_IMM", IBV_WR_SEND_WITH_IMM as i64),
        ("IBV_WR_RDMA_READ", IBV_WR_RDMA_READ as i64),
        (
            "IBV_WR_ATOMIC_CMP_AND_SWP",
            IBV_WR_ATOMIC_CMP_AND_SWP as i64,
        ),
        (
            "IBV_WR_ATOMIC_FETCH_AND_ADD",
            IBV_WR_ATOMIC_FETCH_AND_ADD as i64,
        ),
        ("IBV_WR_SEND_WITH_INV", IBV_WR_SEND_WITH_INV as i64),
        ("IBV_WC_SEND", IBV_WC_SEND as i64),
        ("IBV_WC_RDMA_WRITE", IBV_WC_RDMA_WRITE as i64),
        ("IBV_WC_RDMA_READ", IBV_WC_RDMA_READ as i64),
        ("IBV_WC_COMP_SWAP", IBV_WC_COMP_SWAP as i64),
        ("IBV_WC_FETCH_ADD", IBV_WC_FETCH_ADD as i64),
        ("IBV_WC_RECV", IBV_WC_RECV as i64),
        (
            "IBV_WC_RECV_RDMA_WITH_IMM",
            IBV_WC_RECV_RDMA_WITH_IMM as i64,
        ),
        ("IBV_EVENT_CQ_ERR", IBV_EVENT_CQ_ERR as i64),
        ("IBV_EVENT_QP_FATAL", IBV_EVENT_QP_FATAL as i64),
        ("IBV_EVENT_SQ_DRAINED", IBV_EVENT_SQ_DRAINED as i64),
        (
            "IBV_EVENT_SRQ_LIMIT_REACHED",
            IBV_EVENT_SRQ_LIMIT_REACHED as i64,
        ),
        ("IBV_SRQ_LIMIT", IBV_SRQ_LIMIT as i64),
        ("IBV_SRQ_MAX_WR", IBV_SRQ_MAX_WR as i64),
    ] {
        v.push((
            format!("enum {name}"),
            format!("(long)({name})"),
            val as usize,
        ));
    }
    v
}

#[test]
fn structures_match_the_installed_verbs_h() {
    let header = "/usr/include/infiniband/verbs.h";
    assert!(
        std::path::Path::new(header).exists(),
        "{header} missing: run scripts/test.sh --deps-only (installs libibverbs-dev)"
    );
    let rust = rust_side();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for (key, expr, _) in &rust {
        c.push_str(&format!(
            "  printf(\"%s=%ld\\n\", \"{key}\", (long)({expr}));\n"
        ));
    }
    c.push_str("  return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("roce-ibverbs-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, &c).unwrap();
    let cc = Command::new("cc")
        .arg("-std=gnu11")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(
        cc.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().expect("run layout");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(out.stdout).unwrap();
    let c_side: HashMap<&str, i64> = text
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            Some((k, v.parse().ok()?))
        })
        .collect();
    let mut bad = Vec::new();
    for (key, _, r) in &rust {
        match c_side.get(key.as_str()) {
            Some(&c) if c == *r as i64 => {}
            other => bad.push(format!("{key}: C {other:?}, Rust {r}")),
        }
    }
    assert!(
        bad.is_empty(),
        "layout differs from verbs.h:\n{}",
        bad.join("\n")
    );
    assert!(rust.len() > 200, "{} checks", rust.len());
}
