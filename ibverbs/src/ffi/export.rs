//! The exported names: each a one-instruction entry point (`jmp`) to the
//! Rust function that implements it, made global here so that
//! `libibverbs.map` can give it rdma-core's version (see `build.rs` for why
//! not `#[no_mangle]`; an alias with `.set` would not do: the function may
//! sit in another codegen unit, and ELF has no alias of an undefined
//! symbol).
//! `tests/symbols.rs` checks the library's dynamic symbol table against
//! `libibverbs.map`.

use super::*;

macro_rules! export {
    ($($name:literal => $f:path),* $(,)?) => {
        $(
            core::arch::global_asm!(
                concat!(
                    ".pushsection .text.", $name, ",\"ax\",@progbits\n",
                    ".globl ", $name, "\n",
                    ".type ", $name, ",@function\n",
                    ".p2align 4\n",
                    $name, ":\n",
                    "    jmp {0}\n",
                    ".size ", $name, ", . - ", $name, "\n",
                    ".popsection\n",
                ),
                sym $f,
            );
        )*
    };
}

export! {
    // IBVERBS_1.0
    "ibv_create_comp_channel" => create_comp_channel,
    "ibv_destroy_comp_channel" => destroy_comp_channel,
    "ibv_rate_to_mult" => rate_to_mult,
    "mult_to_ibv_rate" => mult_to_rate,
    "ibv_get_sysfs_path" => get_sysfs_path,
    "ibv_read_sysfs_file" => read_sysfs_file,
    // IBVERBS_1.1
    "ibv_ack_async_event" => ack_async_event,
    "ibv_ack_cq_events" => ack_cq_events,
    "ibv_alloc_pd" => alloc_pd,
    "ibv_attach_mcast" => attach_mcast,
    "ibv_close_device" => close_device,
    "ibv_create_ah" => create_ah,
    "ibv_create_ah_from_wc" => create_ah_from_wc,
    "ibv_create_cq" => create_cq,
    "ibv_create_qp" => create_qp,
    "ibv_create_srq" => create_srq,
    "ibv_dealloc_pd" => dealloc_pd,
    "ibv_dereg_mr" => dereg_mr,
    "ibv_destroy_ah" => destroy_ah,
    "ibv_destroy_cq" => destroy_cq,
    "ibv_destroy_qp" => destroy_qp,
    "ibv_destroy_srq" => destroy_srq,
    "ibv_detach_mcast" => detach_mcast,
    "ibv_dofork_range" => dontfork_range,
    "ibv_dontfork_range" => dontfork_range,
    "ibv_event_type_str" => event_type_str,
    "ibv_fork_init" => fork_init,
    "ibv_free_device_list" => free_device_list,
    "ibv_get_async_event" => get_async_event,
    "ibv_get_cq_event" => get_cq_event,
    "ibv_get_device_guid" => get_device_guid,
    "ibv_get_device_list" => get_device_list,
    "ibv_get_device_name" => get_device_name,
    "ibv_init_ah_from_wc" => init_ah_from_wc,
    "ibv_modify_qp" => modify_qp,
    "ibv_modify_srq" => modify_srq,
    "ibv_node_type_str" => node_type_str,
    "ibv_open_device" => open_device,
    "ibv_port_state_str" => port_state_str,
    "ibv_query_device" => query_device,
    "ibv_query_gid" => query_gid,
    "ibv_query_pkey" => query_pkey,
    "ibv_query_port" => query_port,
    "ibv_query_qp" => query_qp,
    "ibv_query_srq" => query_srq,
    "ibv_rate_to_mbps" => rate_to_mbps,
    "ibv_reg_mr" => reg_mr,
    "ibv_rereg_mr" => rereg_mr,
    "ibv_resize_cq" => resize_cq,
    "ibv_resolve_eth_l2_from_gid" => resolve_eth_l2_from_gid,
    "ibv_wc_status_str" => wc_status_str,
    "mbps_to_ibv_rate" => mbps_to_rate,
    // IBVERBS_1.5 ... 1.14
    "ibv_get_pkey_index" => get_pkey_index,
    "ibv_qp_to_qp_ex" => qp_to_qp_ex,
    "ibv_reg_mr_iova" => reg_mr_iova,
    "ibv_reg_mr_iova2" => reg_mr_iova2,
    "ibv_get_device_index" => get_device_index,
    "ibv_import_device" => import_device,
    "ibv_import_mr" => import_obj,
    "ibv_import_pd" => import_obj,
    "ibv_query_ece" => query_ece,
    "ibv_set_ece" => set_ece,
    "ibv_unimport_mr" => unimport_obj,
    "ibv_unimport_pd" => unimport_obj,
    "_ibv_query_gid_ex" => query_gid_ex,
    "_ibv_query_gid_table" => query_gid_table,
    "ibv_reg_dmabuf_mr" => reg_dmabuf_mr,
    "ibv_import_dm" => import_obj,
    "ibv_is_fork_initialized" => is_fork_initialized,
    "ibv_unimport_dm" => unimport_obj,
    "ibv_query_qp_data_in_order" => query_qp_data_in_order,
    // IBVERBS_PRIVATE_34
    "ibv_query_gid_type" => query_gid_type,
}
