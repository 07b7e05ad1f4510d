//! The C ABI: every exported verb, and the only `unsafe` code of the crate.
//!
//! Each object the library hands out is a Rust allocation whose first field
//! is the C structure the program sees (`#[repr(C)]`), so the pointer the
//! program holds converts back to the allocation. Every function checks its
//! pointers for NULL and fails with the errno rdma-core returns (`EINVAL`,
//! `EOPNOTSUPP`) instead of crashing; a pointer that is not NULL is trusted
//! to be what ibverbs' contract says it is (an object this library returned
//! and the program has not destroyed), as every provider trusts it.
//!
//! The verbs themselves are safe calls into [`crate::engine`].

pub mod sys;
pub mod types;

mod export;

use core::ffi::{c_char, c_int, c_uint, c_void};
use std::net::IpAddr;
use std::ptr;
use std::sync::{Arc, OnceLock};

use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, MrBuffer, Mtu, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, SendFlags,
    Sge, UdDest, Wc, WcFlags, WcOpcode, WrOpcode,
};

use crate::config::Config;
use crate::engine::{Channel, Context, CqShared, Errno, RecvOwned, SendOwned, MAX_INLINE, MAX_SGE};
use types::*;

// ---- helpers ------------------------------------------------------------

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // valid for writes for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// Fail a pointer-returning verb: errno `e`, NULL.
fn fail<T>(e: c_int) -> *mut T {
    set_errno(e);
    ptr::null_mut()
}

fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    if let Some(z) = dst.get_mut(n) {
        *z = 0;
    }
}

/// The configuration, read once.
fn config() -> &'static Result<Config, String> {
    static CFG: OnceLock<Result<Config, String>> = OnceLock::new();
    CFG.get_or_init(|| {
        let c = Config::from_env();
        if let Ok(c) = &c {
            let filter = c.log.clone().unwrap_or_else(|| "warn".into());
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .try_init();
        }
        c
    })
}

/// The one device, allocated once and never freed (programs may keep the
/// pointer after `ibv_free_device_list`).
struct DeviceBox(*mut ibv_device);
// SAFETY: the device structure is written once, before the pointer is
// published through the OnceLock, and only read afterwards.
unsafe impl Send for DeviceBox {}
// SAFETY: as above: read-only after initialisation.
unsafe impl Sync for DeviceBox {}

fn device() -> Option<*mut ibv_device> {
    static DEV: OnceLock<Option<DeviceBox>> = OnceLock::new();
    DEV.get_or_init(|| {
        let cfg = config().as_ref().ok()?;
        // SAFETY: ibv_device is integers and byte arrays; all-zero is valid.
        let mut d: Box<ibv_device> = Box::new(unsafe { std::mem::zeroed() });
        d.node_type = IBV_NODE_CA;
        d.transport_type = IBV_TRANSPORT_IB;
        copy_cstr(&mut d.name, &cfg.dev_name);
        copy_cstr(&mut d.dev_name, &format!("u{}", cfg.dev_name));
        copy_cstr(
            &mut d.dev_path,
            &format!("/sys/class/infiniband_verbs/u{}", cfg.dev_name),
        );
        copy_cstr(
            &mut d.ibdev_path,
            &format!("/sys/class/infiniband/{}", cfg.dev_name),
        );
        Some(DeviceBox(Box::into_raw(d)))
    })
    .as_ref()
    .map(|d| d.0)
}

/// The node GUID: EUI-64 of the device's MAC (as rxe derives it).
fn node_guid(mac: [u8; 6]) -> u64 {
    let b = [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ];
    // The C field is __be64: its bytes in memory are the GUID's, in order.
    u64::from_ne_bytes(b)
}

/// The GUID of an unopened device (from the configured address).
fn config_guid() -> u64 {
    match config() {
        Ok(c) => node_guid(roce_io::mac_for_ip(c.local_ip)),
        Err(_) => 0,
    }
}

// ---- objects --------------------------------------------------------------

#[repr(C)]
struct Ctx {
    ctx: ibv_context,
    inner: Arc<Context>,
}

#[repr(C)]
struct Pd {
    pd: ibv_pd,
}

#[repr(C)]
struct Mr {
    mr: ibv_mr,
}

#[repr(C)]
struct Cq {
    cq: ibv_cq,
    shared: Arc<CqShared>,
}

#[repr(C)]
struct Chan {
    ch: ibv_comp_channel,
    inner: Arc<Channel>,
}

#[repr(C)]
struct Qp {
    qp: ibv_qp,
    qp_type: QpType,
    sq_sig_all: bool,
    cap: ibv_qp_cap,
}

#[repr(C)]
struct Ah {
    ah: ibv_ah,
    av: AddressVector,
}

#[repr(C)]
struct Srq {
    srq: ibv_srq,
    id: u32,
    max_sge: u32,
}

/// The context behind an `ibv_context` this library returned.
///
/// # Safety
/// `c` is NULL or a live context from [`ibv_open_device`].
unsafe fn ctx_of<'a>(c: *mut ibv_context) -> Option<&'a Ctx> {
    // SAFETY: per the contract, a non-NULL `c` points at the `ctx` field,
    // the first of a live `Ctx` (repr(C)).
    unsafe { c.cast::<Ctx>().as_ref() }
}

/// The context of a PD.
///
/// # Safety
/// `pd` is NULL or a live PD from [`ibv_alloc_pd`].
unsafe fn pd_ctx<'a>(pd: *mut ibv_pd) -> Option<(&'a Ctx, u32)> {
    // SAFETY: a non-NULL `pd` is a live ibv_pd whose context is a live Ctx.
    unsafe {
        let p = pd.as_ref()?;
        Some((ctx_of(p.context)?, p.handle))
    }
}

/// Lent application memory: the region `[ptr, ptr + len)` the program
/// registered. See [`ibv_reg_mr_iova2`] for why the views are sound to
/// hand out.
#[derive(Debug)]
struct AppMem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the memory belongs to the process, not to a thread; the stack
// touches it from whichever thread drives the engine, which the ibverbs
// contract allows (a NIC writes it from outside every thread).
unsafe impl Send for AppMem {}

impl MrBuffer for AppMem {
    fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is non-NULL and `len` bytes from it were mapped when
        // registered (checked with mincore); ibverbs requires the program to
        // keep them mapped until ibv_dereg_mr, which drops this view first.
        // The program may write the bytes concurrently (as it may under a
        // NIC's DMA); the stack only copies them out.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for `as_slice`; the stack writes only the ranges its
        // bounds and access checks allow (a LOCAL_WRITE or REMOTE_WRITE MR).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Whether every page of `[addr, addr + len)` is mapped (mincore(2) fails
/// with ENOMEM otherwise).
fn mapped(addr: usize, len: usize) -> bool {
    const PAGE: usize = 4096;
    let start = addr & !(PAGE - 1);
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let pages = (end - start).div_ceil(PAGE);
    let mut vec = vec![0u8; pages];
    // SAFETY: `vec` holds one byte per page of the range, as mincore writes;
    // mincore reads no memory of the range itself.
    let rc = unsafe { libc::mincore(start as *mut c_void, end - start, vec.as_mut_ptr()) };
    rc == 0
}

// ---- device -------------------------------------------------------------

unsafe extern "C" fn get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    let dev = match config() {
        Ok(_) => device(),
        Err(e) => {
            eprintln!("roce-ibverbs: {e}");
            None
        }
    };
    let Some(dev) = dev else {
        if !num.is_null() {
            // SAFETY: a non-NULL `num` is the caller's int.
            unsafe { *num = 0 };
        }
        return fail(libc::EINVAL);
    };
    let list: Box<[*mut ibv_device; 2]> = Box::new([dev, ptr::null_mut()]);
    if !num.is_null() {
        // SAFETY: as above.
        unsafe { *num = 1 };
    }
    Box::into_raw(list).cast()
}

unsafe extern "C" fn free_device_list(list: *mut *mut ibv_device) {
    if !list.is_null() {
        // SAFETY: `list` came from get_device_list's Box<[_; 2]>.
        drop(unsafe { Box::from_raw(list.cast::<[*mut ibv_device; 2]>()) });
    }
}

unsafe extern "C" fn get_device_name(dev: *mut ibv_device) -> *const c_char {
    if dev.is_null() {
        return fail::<c_char>(libc::EINVAL);
    }
    // SAFETY: a non-NULL `dev` is our device, which lives forever.
    unsafe { (*dev).name.as_ptr() }
}

unsafe extern "C" fn get_device_guid(_dev: *mut ibv_device) -> u64 {
    config_guid()
}

unsafe extern "C" fn get_device_index(_dev: *mut ibv_device) -> c_int {
    -1
}

/// The exit hook: held ACKs go out ([`crate::engine::flush_held_at_exit`]).
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(crate::engine::flush_held_at_exit);
}

unsafe extern "C" fn open_device(dev: *mut ibv_device) -> *mut ibv_context {
    let Ok(cfg) = config() else {
        return fail(libc::EINVAL);
    };
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: `at_exit` takes nothing and never unwinds (catch_unwind).
        // glibc's atexit from a shared object runs the handler at that
        // object's dlclose too, so it never outlives the library's code.
        unsafe { libc::atexit(at_exit) };
    });
    if dev.is_null() || Some(dev) != device() {
        return fail(libc::EINVAL);
    }
    let inner = match Context::new(cfg) {
        Ok(c) => Arc::new(c),
        Err(e) => return fail(e.raw_os_error().unwrap_or(libc::ENOMEM)),
    };
    inner.open_early();
    let async_fd = inner.async_raw_fd();
    // SAFETY: ibv_context is pointers, integers and a pthread mutex, for
    // all of which all-zero is a valid value (PTHREAD_MUTEX_INITIALIZER is
    // all zero in glibc).
    let mut c: ibv_context = unsafe { std::mem::zeroed() };
    c.device = dev;
    c.cmd_fd = -1;
    c.async_fd = async_fd;
    c.num_comp_vectors = 1;
    c.abi_compat = ptr::null_mut();
    c.ops.poll_cq = Some(poll_cq);
    c.ops.req_notify_cq = Some(req_notify_cq);
    c.ops.post_srq_recv = Some(post_srq_recv);
    c.ops.post_send = Some(post_send);
    c.ops.post_recv = Some(post_recv);
    let b = Box::new(Ctx { ctx: c, inner });
    Box::into_raw(b).cast()
}

unsafe extern "C" fn close_device(c: *mut ibv_context) -> c_int {
    if c.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a non-NULL `c` is a live Ctx from open_device, given up here.
    let b = unsafe { Box::from_raw(c.cast::<Ctx>()) };
    b.inner.close();
    0
}

unsafe extern "C" fn query_device(c: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    // SAFETY: see ctx_of.
    let (Some(ctx), false) = (unsafe { ctx_of(c) }, attr.is_null()) else {
        return libc::EINVAL;
    };
    // SAFETY: all-zero is valid for this C struct of integers.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    copy_cstr(
        &mut a.fw_ver,
        concat!("roce-stack ", env!("CARGO_PKG_VERSION")),
    );
    a.node_guid = node_guid(ctx.inner.mac());
    a.sys_image_guid = a.node_guid;
    a.max_mr_size = u64::MAX;
    a.page_size_cap = 0xffff_f000;
    // Not Mellanox's 0x02c9 (perftest would switch to the ibv_wr_* API):
    // the value rxe reports.
    a.vendor_id = 0x00ff_ffff;
    a.vendor_part_id = 0;
    a.hw_ver = 0;
    a.max_qp = 16384;
    a.max_qp_wr = 16384;
    // IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE.
    a.device_cap_flags = (1 << 12) | (1 << 13);
    a.max_sge = MAX_SGE as c_int;
    a.max_sge_rd = MAX_SGE as c_int;
    a.max_cq = 16384;
    a.max_cqe = MAX_CQE as c_int;
    a.max_mr = 65536;
    a.max_pd = 65536;
    a.max_qp_rd_atom = 16;
    a.max_res_rd_atom = 16 * 16384;
    a.max_qp_init_rd_atom = 16;
    a.atomic_cap = IBV_ATOMIC_HCA;
    a.max_ah = 65536;
    a.max_srq = 1024;
    a.max_srq_wr = 16384;
    a.max_srq_sge = MAX_SGE as c_int;
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    // SAFETY: a non-NULL `attr` is the caller's ibv_device_attr.
    unsafe { attr.write(a) };
    0
}

/// Largest CQ, completions.
const MAX_CQE: usize = 1 << 20;

fn mtu_enum(m: Mtu) -> c_int {
    m as c_int
}

unsafe extern "C" fn query_port(
    c: *mut ibv_context,
    port: u8,
    attr: *mut _compat_ibv_port_attr,
) -> c_int {
    // SAFETY: see ctx_of.
    let (Some(ctx), false) = (unsafe { ctx_of(c) }, attr.is_null()) else {
        return libc::EINVAL;
    };
    if port != 1 {
        return libc::EINVAL;
    }
    let mtu = mtu_enum(ctx.inner.config().mtu);
    let a = _compat_ibv_port_attr {
        state: IBV_PORT_ACTIVE,
        max_mtu: mtu,
        active_mtu: mtu,
        gid_tbl_len: 1,
        // IBV_PORT_CM_SUP.
        port_cap_flags: 1 << 16,
        max_msg_sz: 1 << 31,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: 1,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        // 4X at 25 Gbit/s per lane (EDR), as rxe reports a 100G netdev.
        active_width: 2,
        active_speed: 32,
        // LinkUp.
        phys_state: 5,
        link_layer: IBV_LINK_LAYER_ETHERNET,
        flags: 0,
    };
    // SAFETY: a non-NULL `attr` holds at least the compat structure (the
    // inline ___ibv_query_port passes a whole ibv_port_attr).
    unsafe { attr.write(a) };
    0
}

unsafe extern "C" fn query_gid(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    // SAFETY: see ctx_of.
    let (Some(ctx), false) = (unsafe { ctx_of(c) }, gid.is_null()) else {
        return -1;
    };
    if port != 1 || index != 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: a non-NULL `gid` is the caller's union ibv_gid.
    unsafe {
        gid.write(ibv_gid {
            raw: ctx.inner.gid().0,
        })
    };
    0
}

unsafe extern "C" fn query_gid_ex(
    c: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    // SAFETY: see ctx_of.
    let (Some(ctx), false) = (unsafe { ctx_of(c) }, entry.is_null()) else {
        return libc::EINVAL;
    };
    if flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
        return libc::EINVAL;
    }
    if port != 1 || index != 0 {
        return libc::EINVAL;
    }
    let e = ibv_gid_entry {
        gid: ibv_gid {
            raw: ctx.inner.gid().0,
        },
        gid_index: 0,
        port_num: 1,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: 0,
    };
    // SAFETY: a non-NULL `entry` holds `entry_size` >= sizeof bytes.
    unsafe { entry.write(e) };
    0
}

unsafe extern "C" fn query_gid_table(
    c: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    if max == 0 || entries.is_null() {
        return -(libc::EINVAL as isize);
    }
    // SAFETY: forwarded contract: `entries` holds `max` entries.
    let r = unsafe { query_gid_ex(c, 1, 0, entries, flags, entry_size) };
    if r == 0 {
        1
    } else {
        -(r as isize)
    }
}

unsafe extern "C" fn query_gid_type(
    c: *mut ibv_context,
    port: u8,
    index: c_uint,
    ty: *mut c_int,
) -> c_int {
    // SAFETY: see ctx_of.
    if unsafe { ctx_of(c) }.is_none() || ty.is_null() || port != 1 || index != 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: a non-NULL `ty` is the caller's enum.
    unsafe { ty.write(IBV_GID_TYPE_SYSFS_ROCE_V2) };
    0
}

unsafe extern "C" fn query_pkey(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: see ctx_of.
    if unsafe { ctx_of(c) }.is_none() || pkey.is_null() || port != 1 || index != 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: a non-NULL `pkey` is the caller's __be16.
    unsafe { pkey.write(0xffffu16.to_be()) };
    0
}

unsafe extern "C" fn get_pkey_index(c: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    // SAFETY: see ctx_of.
    if unsafe { ctx_of(c) }.is_none() || port != 1 {
        return -libc::EINVAL;
    }
    if u16::from_be(pkey) & 0x7fff == 0x7fff {
        0
    } else {
        -libc::ENOENT
    }
}

// ---- async events ---------------------------------------------------------

unsafe extern "C" fn get_async_event(c: *mut ibv_context, ev: *mut ibv_async_event) -> c_int {
    // SAFETY: see ctx_of.
    let (Some(ctx), false) = (unsafe { ctx_of(c) }, ev.is_null()) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    match ctx.inner.get_async_event() {
        Ok(e) => {
            // SAFETY: a non-NULL `ev` is the caller's ibv_async_event.
            unsafe {
                ev.write(ibv_async_event {
                    element: e.element as *mut c_void,
                    event_type: e.event_type,
                })
            };
            0
        }
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EAGAIN));
            -1
        }
    }
}

unsafe extern "C" fn ack_async_event(_ev: *mut ibv_async_event) {}

// ---- PD, MR -------------------------------------------------------------

unsafe extern "C" fn alloc_pd(c: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: see ctx_of.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return fail(libc::EINVAL);
    };
    let id = match ctx.inner.live() {
        Ok(l) => l.alloc_pd(),
        Err(Errno(e)) => return fail(e),
    };
    Box::into_raw(Box::new(Pd {
        pd: ibv_pd {
            context: c,
            handle: id,
        },
    }))
    .cast()
}

unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: see pd_ctx.
    let Some((ctx, id)) = (unsafe { pd_ctx(pd) }) else {
        return libc::EINVAL;
    };
    match ctx.inner.live().and_then(|l| l.dealloc_pd(id)) {
        Ok(()) => {
            // SAFETY: `pd` came from alloc_pd's Box<Pd> and is given up.
            drop(unsafe { Box::from_raw(pd.cast::<Pd>()) });
            0
        }
        Err(Errno(e)) => e,
    }
}

/// `IBV_ACCESS_OPTIONAL_RANGE`: bits a provider may ignore.
const ACCESS_OPTIONAL: u32 = 0x3ff0_0000;

unsafe extern "C" fn reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: see pd_ctx.
    let Some((ctx, pd_id)) = (unsafe { pd_ctx(pd) }) else {
        return fail(libc::EINVAL);
    };
    let access = access & !ACCESS_OPTIONAL;
    let Some(flags) = AccessFlags::from_bits(access) else {
        return fail(libc::EINVAL);
    };
    if flags.intersects(AccessFlags::ON_DEMAND | AccessFlags::MW_BIND | AccessFlags::ZERO_BASED) {
        return fail(libc::EOPNOTSUPP);
    }
    if addr.is_null() && length > 0 {
        return fail(libc::EINVAL);
    }
    if length > 0 && !mapped(addr as usize, length) {
        return fail(libc::EFAULT);
    }
    let mem = AppMem {
        ptr: if length == 0 {
            ptr::NonNull::<u8>::dangling().as_ptr()
        } else {
            addr.cast()
        },
        len: length,
    };
    match ctx
        .inner
        .live()
        .and_then(|l| l.reg_mr(pd_id, Box::new(mem), iova, flags))
    {
        Ok(k) => Box::into_raw(Box::new(Mr {
            mr: ibv_mr {
                // SAFETY: `pd` is live (checked by pd_ctx).
                context: unsafe { (*pd).context },
                pd,
                addr,
                length,
                handle: k.lkey,
                lkey: k.lkey,
                rkey: k.rkey,
            },
        }))
        .cast(),
        Err(Errno(e)) => fail(e),
    }
}

unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded contract.
    unsafe { reg_mr_iova2(pd, addr, length, addr as u64, access as c_uint) }
}

unsafe extern "C" fn reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded contract.
    unsafe { reg_mr_iova2(pd, addr, length, iova, access as c_uint) }
}

unsafe extern "C" fn reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    fail(libc::EOPNOTSUPP)
}

unsafe extern "C" fn dereg_mr(mr: *mut ibv_mr) -> c_int {
    if mr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a non-NULL `mr` is a live Mr from reg_mr; its context is live.
    let (ctx, lkey) = unsafe { (ctx_of((*mr).context), (*mr).lkey) };
    let Some(ctx) = ctx else {
        return libc::EINVAL;
    };
    match ctx.inner.live().and_then(|l| l.dereg_mr(lkey)) {
        Ok(()) => {
            // SAFETY: `mr` came from reg_mr's Box<Mr> and is given up.
            drop(unsafe { Box::from_raw(mr.cast::<Mr>()) });
            0
        }
        Err(Errno(e)) => e,
    }
}

unsafe extern "C" fn rereg_mr(
    _mr: *mut ibv_mr,
    _flags: c_int,
    _pd: *mut ibv_pd,
    _addr: *mut c_void,
    _length: usize,
    _access: c_int,
) -> c_int {
    set_errno(libc::EOPNOTSUPP);
    // IBV_REREG_MR_ERR_INPUT.
    -1
}

// ---- CQ and completion channels -------------------------------------------

unsafe extern "C" fn create_comp_channel(c: *mut ibv_context) -> *mut ibv_comp_channel {
    // SAFETY: see ctx_of.
    if unsafe { ctx_of(c) }.is_none() {
        return fail(libc::EINVAL);
    }
    let inner = match Channel::new() {
        Ok(ch) => Arc::new(ch),
        Err(e) => return fail(e.raw_os_error().unwrap_or(libc::ENOMEM)),
    };
    Box::into_raw(Box::new(Chan {
        ch: ibv_comp_channel {
            context: c,
            fd: inner.raw_fd(),
            refcnt: 0,
        },
        inner,
    }))
    .cast()
}

unsafe extern "C" fn destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    if ch.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a non-NULL `ch` is a live Chan.
    if unsafe { (*ch).refcnt } > 0 {
        return libc::EBUSY;
    }
    // SAFETY: `ch` came from create_comp_channel's Box<Chan>; given up.
    drop(unsafe { Box::from_raw(ch.cast::<Chan>()) });
    0
}

unsafe extern "C" fn create_cq(
    c: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: see ctx_of.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return fail(libc::EINVAL);
    };
    if cqe < 1 || cqe as usize > MAX_CQE || comp_vector != 0 {
        return fail(libc::EINVAL);
    }
    let chan = if channel.is_null() {
        None
    } else {
        // SAFETY: a non-NULL `channel` is a live Chan.
        unsafe {
            (*channel).refcnt += 1;
            Some((*channel.cast::<Chan>()).inner.clone())
        }
    };
    // SAFETY: all-zero is valid for ibv_cq (pointers, integers, pthread
    // objects whose static initialisers are all zero in glibc).
    let mut raw: ibv_cq = unsafe { std::mem::zeroed() };
    raw.context = c;
    raw.channel = channel;
    raw.cq_context = cq_context;
    raw.cqe = cqe;
    let b = Box::into_raw(Box::new(Cq {
        cq: raw,
        shared: Arc::new(CqShared {
            id: 0,
            handle: 0,
            channel: None,
            armed: false.into(),
        }),
    }));
    let shared = match ctx.inner.live() {
        Ok(l) => l.create_cq(cqe as usize, chan, b as usize),
        Err(Errno(e)) => {
            // SAFETY: `b` was allocated above and never published.
            drop(unsafe { Box::from_raw(b) });
            return fail(e);
        }
    };
    // SAFETY: `b` was just allocated and is not shared yet.
    unsafe {
        (*b).cq.handle = shared.id;
        (*b).shared = shared;
    }
    b.cast()
}

unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a non-NULL `cq` is a live Cq whose context is live.
    let (ctx, id, channel) = unsafe { (ctx_of((*cq).context), (*cq).handle, (*cq).channel) };
    let Some(ctx) = ctx else {
        return libc::EINVAL;
    };
    match ctx.inner.live().and_then(|l| l.destroy_cq(id)) {
        Ok(()) => {
            if !channel.is_null() {
                // SAFETY: the CQ's channel outlives it (refcnt).
                unsafe { (*channel).refcnt -= 1 };
            }
            // SAFETY: `cq` came from create_cq's Box<Cq>; given up.
            drop(unsafe { Box::from_raw(cq.cast::<Cq>()) });
            0
        }
        Err(Errno(e)) => e,
    }
}

unsafe extern "C" fn resize_cq(_cq: *mut ibv_cq, _cqe: c_int) -> c_int {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn get_cq_event(
    ch: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    ctx_out: *mut *mut c_void,
) -> c_int {
    if ch.is_null() || cq_out.is_null() || ctx_out.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: a non-NULL `ch` is a live Chan whose context is live.
    let (inner, ctx) = unsafe {
        let chan = &*ch.cast::<Chan>();
        (chan.inner.clone(), ctx_of(chan.ch.context))
    };
    if let Some(l) = ctx.and_then(|c| c.inner.if_live()) {
        l.app_sleeps();
    }
    match inner.wait() {
        Ok(h) => {
            let cq = h as *mut ibv_cq;
            // SAFETY: the handle is the address of a live Cq (a CQ is not
            // destroyed while the program still waits for its events), and
            // the out pointers are the caller's.
            unsafe {
                *cq_out = cq;
                *ctx_out = (*cq).cq_context;
            }
            0
        }
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EAGAIN));
            -1
        }
    }
}

unsafe extern "C" fn ack_cq_events(cq: *mut ibv_cq, n: c_uint) {
    if !cq.is_null() {
        // SAFETY: a non-NULL `cq` is a live Cq.
        unsafe { (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(n) };
    }
}

unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a non-NULL `cq` is a live Cq whose context is live.
    let (ctx, shared) = unsafe { (ctx_of((*cq).context), &(*cq.cast::<Cq>()).shared) };
    let Some(ctx) = ctx else {
        return libc::EINVAL;
    };
    if shared.channel.is_none() {
        return libc::EINVAL;
    }
    match ctx.inner.live() {
        Ok(l) => l.req_notify(shared),
        Err(Errno(e)) => return e,
    }
    0
}

fn wc_opcode(o: WcOpcode) -> c_int {
    match o {
        WcOpcode::Send => IBV_WC_SEND,
        WcOpcode::RdmaWrite => IBV_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => IBV_WC_RDMA_READ,
        WcOpcode::CompSwap => IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
        WcOpcode::Recv => IBV_WC_RECV,
        WcOpcode::RecvRdmaWithImm => IBV_WC_RECV_RDMA_WITH_IMM,
    }
}

fn to_c_wc(w: &Wc) -> ibv_wc {
    let imm = if w.wc_flags.contains(WcFlags::WITH_INV) {
        w.invalidated_rkey
    } else if w.wc_flags.contains(WcFlags::WITH_IMM) {
        // __be32: the wire's bytes in memory order.
        w.imm_data.to_be()
    } else {
        0
    };
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as c_int,
        opcode: wc_opcode(w.opcode),
        vendor_err: 0,
        byte_len: w.byte_len,
        imm_data: imm,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.bits(),
        pkey_index: 0,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    }
}

unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    if cq.is_null() || (n > 0 && wc.is_null()) {
        return -1;
    }
    // SAFETY: a non-NULL `cq` is a live Cq whose context is live.
    let (ctx, id) = unsafe { (ctx_of((*cq).context), (*cq).handle) };
    let Some(live) = ctx.and_then(|c| c.inner.if_live()) else {
        return -1;
    };
    let want = n.max(0) as usize;
    let mut buf = [Wc::EMPTY; 16];
    let mut done = 0usize;
    while done < want {
        let k = (want - done).min(buf.len());
        let got = live.poll_cq(id, &mut buf[..k]);
        for (i, w) in buf[..got].iter().enumerate() {
            // SAFETY: `wc` holds `n` entries (the caller's array).
            unsafe { wc.add(done + i).write(to_c_wc(w)) };
        }
        done += got;
        if got < k {
            break;
        }
    }
    done as c_int
}

// ---- QP -----------------------------------------------------------------

fn qp_type_of(t: c_int) -> Option<QpType> {
    match t {
        IBV_QPT_RC => Some(QpType::Rc),
        IBV_QPT_UC => Some(QpType::Uc),
        IBV_QPT_UD => Some(QpType::Ud),
        _ => None,
    }
}

fn qp_type_c(t: QpType) -> c_int {
    match t {
        QpType::Rc => IBV_QPT_RC,
        QpType::Uc => IBV_QPT_UC,
        QpType::Ud => IBV_QPT_UD,
    }
}

unsafe extern "C" fn create_qp(pd: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    // SAFETY: see pd_ctx.
    let Some((ctx, pd_id)) = (unsafe { pd_ctx(pd) }) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: a non-NULL `init` is the caller's ibv_qp_init_attr.
    let Some(ia) = (unsafe { init.as_mut() }) else {
        return fail(libc::EINVAL);
    };
    let Some(qp_type) = qp_type_of(ia.qp_type) else {
        return fail(libc::EOPNOTSUPP);
    };
    if ia.send_cq.is_null() || ia.recv_cq.is_null() {
        return fail(libc::EINVAL);
    }
    let srq = if ia.srq.is_null() {
        None
    } else {
        // SAFETY: a non-NULL `srq` is a live Srq.
        Some(unsafe { (*ia.srq.cast::<Srq>()).id })
    };
    let c = ia.cap;
    if c.max_send_sge as usize > MAX_SGE
        || c.max_recv_sge as usize > MAX_SGE
        || c.max_inline_data as usize > MAX_INLINE
        || c.max_send_wr > 16384
        || c.max_recv_wr > 16384
    {
        return fail(libc::EINVAL);
    }
    let cap = QpCap {
        max_send_wr: c.max_send_wr.max(1),
        max_recv_wr: if srq.is_some() {
            1
        } else {
            c.max_recv_wr.max(1)
        },
        max_send_sge: c.max_send_sge.max(1),
        max_recv_sge: if srq.is_some() {
            MAX_SGE as u32
        } else {
            c.max_recv_sge.max(1)
        },
        max_inline_data: c.max_inline_data.max(64),
    };
    // SAFETY: non-NULL CQs are live Cq objects.
    let (scq, rcq) = unsafe { ((*ia.send_cq).handle, (*ia.recv_cq).handle) };
    let sq_sig_all = ia.sq_sig_all != 0;
    let qi = QpInitAttr {
        qp_type,
        send_cq: scq,
        recv_cq: rcq,
        cap,
        sq_sig_all,
    };
    // SAFETY: all-zero is valid for ibv_qp (pointers, integers, pthread
    // objects).
    let mut raw: ibv_qp = unsafe { std::mem::zeroed() };
    raw.context = ctx as *const Ctx as *mut ibv_context;
    raw.qp_context = ia.qp_context;
    raw.pd = pd;
    raw.send_cq = ia.send_cq;
    raw.recv_cq = ia.recv_cq;
    raw.srq = ia.srq;
    raw.qp_type = ia.qp_type;
    let out_cap = ibv_qp_cap {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: if srq.is_some() { 0 } else { cap.max_recv_wr },
        max_send_sge: cap.max_send_sge,
        max_recv_sge: if srq.is_some() { 0 } else { cap.max_recv_sge },
        max_inline_data: cap.max_inline_data,
    };
    let b = Box::into_raw(Box::new(Qp {
        qp: raw,
        qp_type,
        sq_sig_all,
        cap: out_cap,
    }));
    match ctx
        .inner
        .live()
        .and_then(|l| l.create_qp(pd_id, &qi, srq, b as usize))
    {
        Ok(qpn) => {
            // SAFETY: `b` was just allocated; `init` is the caller's.
            unsafe {
                (*b).qp.qp_num = qpn;
                (*b).qp.handle = qpn;
            }
            ia.cap = out_cap;
            b.cast()
        }
        Err(Errno(e)) => {
            // SAFETY: `b` was allocated above and never published.
            drop(unsafe { Box::from_raw(b) });
            fail(e)
        }
    }
}

unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a non-NULL `qp` is a live Qp whose context is live.
    let (ctx, qpn) = unsafe { (ctx_of((*qp).context), (*qp).qp_num) };
    let Some(ctx) = ctx else {
        return libc::EINVAL;
    };
    match ctx.inner.live().and_then(|l| l.destroy_qp(qpn)) {
        Ok(()) => {
            // SAFETY: `qp` came from create_qp's Box<Qp>; given up.
            drop(unsafe { Box::from_raw(qp.cast::<Qp>()) });
            0
        }
        Err(Errno(e)) => e,
    }
}

fn qp_state_of(s: c_int) -> Option<QpState> {
    Some(match s {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return None,
    })
}

fn qp_state_c(s: QpState) -> c_int {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

fn mtu_of(m: c_int) -> Option<Mtu> {
    Some(match m {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        _ => return None,
    })
}

/// The stack's address vector of a C `ibv_ah_attr` (RoCE: the GRH is
/// required), MAC not resolved yet.
fn av_of(a: &ibv_ah_attr) -> Result<AddressVector, c_int> {
    if a.is_global == 0 || a.port_num > 1 {
        return Err(libc::EINVAL);
    }
    let dgid = Gid(a.grh.dgid.raw);
    if dgid == Gid::default() {
        return Err(libc::EINVAL);
    }
    Ok(AddressVector {
        dgid,
        sgid_index: a.grh.sgid_index,
        flow_label: a.grh.flow_label & 0xF_FFFF,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        ..AddressVector::default()
    })
}

fn ah_attr_c(av: &AddressVector) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: av.dgid.0 },
            flow_label: av.flow_label,
            sgid_index: av.sgid_index,
            hop_limit: av.hop_limit,
            traffic_class: av.traffic_class,
        },
        dlid: 0,
        sl: 0,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: 1,
    }
}

unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    if qp.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a non-NULL `qp` is a live Qp whose context is live; `attr` is
    // the caller's ibv_qp_attr.
    let (ctx, qpn, a) = unsafe { (ctx_of((*qp).context), (*qp).qp_num, &*attr) };
    let Some(ctx) = ctx else {
        return libc::EINVAL;
    };
    let m = QpAttrMask::from_bits_truncate(mask as u32);
    let mut s = QpAttr::default();
    if m.contains(QpAttrMask::STATE) {
        let Some(st) = qp_state_of(a.qp_state) else {
            return libc::EINVAL;
        };
        s.qp_state = st;
    }
    if m.contains(QpAttrMask::PORT) && a.port_num != 1 {
        return libc::EINVAL;
    }
    if m.contains(QpAttrMask::PKEY_INDEX) && a.pkey_index != 0 {
        return libc::EINVAL;
    }
    if m.contains(QpAttrMask::PATH_MTU) {
        let Some(mtu) = mtu_of(a.path_mtu) else {
            return libc::EINVAL;
        };
        s.path_mtu = mtu;
    }
    if m.contains(QpAttrMask::AV) {
        match av_of(&a.ah_attr) {
            Ok(av) => s.ah_attr = av,
            Err(e) => return e,
        }
    }
    s.qp_access_flags = AccessFlags::from_bits_truncate(a.qp_access_flags);
    s.pkey_index = a.pkey_index;
    s.port_num = a.port_num;
    s.qkey = a.qkey;
    s.timeout = a.timeout;
    s.retry_cnt = a.retry_cnt;
    s.rnr_retry = a.rnr_retry;
    s.rq_psn = a.rq_psn;
    s.sq_psn = a.sq_psn;
    s.max_rd_atomic = a.max_rd_atomic;
    s.max_dest_rd_atomic = a.max_dest_rd_atomic;
    s.min_rnr_timer = a.min_rnr_timer;
    s.dest_qp_num = a.dest_qp_num;
    match ctx.inner.live().and_then(|l| l.modify_qp(qpn, &s, m)) {
        Ok(()) => {
            if m.contains(QpAttrMask::STATE) {
                // SAFETY: `qp` is live; the program reads `state`.
                unsafe { (*qp).state = a.qp_state };
            }
            0
        }
        Err(Errno(e)) => e,
    }
}

unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    if qp.is_null() || attr.is_null() || init.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a non-NULL `qp` is a live Qp whose context is live.
    let (ctx, q) = unsafe { (ctx_of((*qp).context), &*qp.cast::<Qp>()) };
    let Some(ctx) = ctx else {
        return libc::EINVAL;
    };
    let (state, a, _) = match ctx.inner.live().and_then(|l| l.query_qp(q.qp.qp_num)) {
        Ok(x) => x,
        Err(Errno(e)) => return e,
    };
    // SAFETY: all-zero is valid for ibv_qp_attr (integers).
    let mut o: ibv_qp_attr = unsafe { std::mem::zeroed() };
    o.qp_state = qp_state_c(state);
    o.cur_qp_state = o.qp_state;
    o.path_mtu = mtu_enum(a.path_mtu);
    // IBV_MIG_MIGRATED.
    o.path_mig_state = 2;
    o.qkey = a.qkey;
    o.rq_psn = a.rq_psn;
    o.sq_psn = a.sq_psn;
    o.dest_qp_num = a.dest_qp_num;
    o.qp_access_flags = a.qp_access_flags.bits();
    o.cap = q.cap;
    o.ah_attr = ah_attr_c(&a.ah_attr);
    o.pkey_index = a.pkey_index;
    o.sq_draining = u8::from(state == QpState::Sqd);
    o.max_rd_atomic = a.max_rd_atomic;
    o.max_dest_rd_atomic = a.max_dest_rd_atomic;
    o.min_rnr_timer = a.min_rnr_timer;
    o.port_num = 1;
    o.timeout = a.timeout;
    o.retry_cnt = a.retry_cnt;
    o.rnr_retry = a.rnr_retry;
    // SAFETY: `attr` and `init` are the caller's structures.
    unsafe {
        attr.write(o);
        let i = &mut *init;
        i.qp_context = q.qp.qp_context;
        i.send_cq = q.qp.send_cq;
        i.recv_cq = q.qp.recv_cq;
        i.srq = q.qp.srq;
        i.cap = q.cap;
        i.qp_type = qp_type_c(q.qp_type);
        i.sq_sig_all = c_int::from(q.sq_sig_all);
    }
    0
}

unsafe extern "C" fn qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut c_void {
    // The ibv_wr_* API is not provided (rdma-core returns NULL for a QP not
    // created with send_ops_flags).
    ptr::null_mut()
}

unsafe extern "C" fn query_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn set_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn query_qp_data_in_order(_qp: *mut ibv_qp, _op: c_int, _flags: u32) -> c_int {
    0
}

fn wr_opcode_of(op: c_int) -> Option<WrOpcode> {
    Some(match op {
        IBV_WR_RDMA_WRITE => WrOpcode::RdmaWrite,
        IBV_WR_RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm,
        IBV_WR_SEND => WrOpcode::Send,
        IBV_WR_SEND_WITH_IMM => WrOpcode::SendWithImm,
        IBV_WR_RDMA_READ => WrOpcode::RdmaRead,
        IBV_WR_ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCmpAndSwp,
        IBV_WR_ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFetchAndAdd,
        IBV_WR_SEND_WITH_INV => WrOpcode::SendWithInv,
        _ => return None,
    })
}

/// Copy one C send WR into `o`.
///
/// # Safety
/// `w` is a valid ibv_send_wr whose `sg_list` holds `num_sge` entries, and
/// for INLINE whose SGEs name readable memory.
unsafe fn convert_send(w: &ibv_send_wr, q: &Qp, o: &mut SendOwned) -> Result<(), c_int> {
    let opcode = wr_opcode_of(w.opcode).ok_or(libc::EINVAL)?;
    let n = usize::try_from(w.num_sge).map_err(|_| libc::EINVAL)?;
    if n > MAX_SGE || (n > 0 && w.sg_list.is_null()) {
        return Err(libc::EINVAL);
    }
    let sgl: &[ibv_sge] = if n == 0 {
        &[]
    } else {
        // SAFETY: per the contract, `sg_list` holds `num_sge` entries.
        unsafe { std::slice::from_raw_parts(w.sg_list, n) }
    };
    o.wr_id = w.wr_id;
    o.opcode = opcode;
    o.flags = SendFlags::from_bits_truncate(w.send_flags & 0xf);
    o.inline_len = 0;
    o.nsge = 0;
    if o.flags.contains(SendFlags::INLINE) {
        let mut len = 0usize;
        for s in sgl {
            let l = s.length as usize;
            if len + l > MAX_INLINE || (l > 0 && s.addr == 0) {
                return Err(libc::EINVAL);
            }
            if l > 0 {
                // SAFETY: with IBV_SEND_INLINE the SGEs name readable
                // program memory of `length` bytes (ibverbs contract),
                // copied here before post returns.
                let src = unsafe { std::slice::from_raw_parts(s.addr as *const u8, l) };
                o.inline[len..len + l].copy_from_slice(src);
            }
            len += l;
        }
        o.inline_len = len;
    } else {
        for (d, s) in o.sges.iter_mut().zip(sgl) {
            *d = Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            };
        }
        o.nsge = n;
    }
    o.imm = 0;
    o.invalidate_rkey = 0;
    match opcode {
        WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => o.imm = u32::from_be(w.imm_data),
        WrOpcode::SendWithInv => o.invalidate_rkey = w.imm_data,
        _ => {}
    }
    o.ud = None;
    o.remote_addr = 0;
    o.rkey = 0;
    o.compare_add = 0;
    o.swap = 0;
    match opcode {
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            // SAFETY: reading a union of plain integers and pointers.
            let a = unsafe { w.wr.atomic };
            o.remote_addr = a.remote_addr;
            o.rkey = a.rkey;
            o.compare_add = a.compare_add;
            o.swap = a.swap;
        }
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
            // SAFETY: as above.
            let r = unsafe { w.wr.rdma };
            o.remote_addr = r.remote_addr;
            o.rkey = r.rkey;
        }
        _ => {}
    }
    if q.qp_type == QpType::Ud {
        // SAFETY: as above.
        let u = unsafe { w.wr.ud };
        if u.ah.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: a non-NULL `ah` is a live Ah.
        let av = unsafe { (*u.ah.cast::<Ah>()).av };
        o.ud = Some(UdDest {
            av,
            remote_qpn: u.remote_qpn & 0x00FF_FFFF,
            remote_qkey: u.remote_qkey,
        });
    }
    Ok(())
}

unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a non-NULL `qp` is a live Qp whose context is live.
    let (ctx, q) = unsafe { (ctx_of((*qp).context), &*qp.cast::<Qp>()) };
    let Some(ctx) = ctx else {
        return libc::EINVAL;
    };
    let mut o = SendOwned::new(0, WrOpcode::Send);
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: `cur` is a WR of the caller's valid list.
        let w = unsafe { &*cur };
        // SAFETY: per ibv_post_send's contract (see convert_send).
        let r = unsafe { convert_send(w, q, &mut o) }.and_then(|()| {
            ctx.inner
                .live()
                .and_then(|l| l.post_send(q.qp.qp_num, &o))
                .map_err(|Errno(e)| e)
        });
        if let Err(e) = r {
            if !bad.is_null() {
                // SAFETY: `bad` is the caller's out pointer.
                unsafe { *bad = cur };
            }
            return e;
        }
        cur = w.next;
    }
    0
}

/// Copy a receive WR.
///
/// # Safety
/// `w.sg_list` holds `w.num_sge` entries.
unsafe fn convert_recv(w: &ibv_recv_wr, max_sge: usize) -> Result<RecvOwned, c_int> {
    let n = usize::try_from(w.num_sge).map_err(|_| libc::EINVAL)?;
    if n > max_sge.min(MAX_SGE) || (n > 0 && w.sg_list.is_null()) {
        return Err(libc::EINVAL);
    }
    let mut o = RecvOwned {
        wr_id: w.wr_id,
        sges: [Sge::default(); MAX_SGE],
        nsge: n,
    };
    if n > 0 {
        // SAFETY: per the contract.
        let sgl = unsafe { std::slice::from_raw_parts(w.sg_list, n) };
        for (d, s) in o.sges.iter_mut().zip(sgl) {
            *d = Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            };
        }
    }
    Ok(o)
}

/// Post every WR of the list at `wr` with `post`, in order, as
/// ibv_post_recv and ibv_post_srq_recv do: at the first that fails, `*bad`
/// (if not NULL) names it and its errno is returned; 0 when all were posted.
///
/// # Safety
/// `wr` is NULL or heads a valid `ibv_recv_wr` list (each `sg_list` valid
/// for `num_sge` entries), and `bad` is NULL or writable.
unsafe fn post_recv_list(
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    max_sge: usize,
    mut post: impl FnMut(&RecvOwned) -> Result<(), Errno>,
) -> c_int {
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: `cur` is a WR of the caller's valid list.
        let w = unsafe { &*cur };
        // SAFETY: `w`'s scatter list is valid, per this function's contract.
        let r = unsafe { convert_recv(w, max_sge) }.and_then(|o| post(&o).map_err(|Errno(e)| e));
        if let Err(e) = r {
            if !bad.is_null() {
                // SAFETY: the caller's out pointer.
                unsafe { *bad = cur };
            }
            return e;
        }
        cur = w.next;
    }
    0
}

unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a non-NULL `qp` is a live Qp whose context is live.
    let (ctx, q) = unsafe { (ctx_of((*qp).context), &*qp.cast::<Qp>()) };
    let Some(ctx) = ctx else {
        return libc::EINVAL;
    };
    if !q.qp.srq.is_null() {
        if !bad.is_null() {
            // SAFETY: the caller's out pointer.
            unsafe { *bad = wr };
        }
        return libc::EINVAL;
    }
    // SAFETY: per ibv_post_recv's contract, `wr` heads a valid list and a
    // non-NULL `bad` is the caller's out pointer.
    unsafe {
        post_recv_list(wr, bad, q.cap.max_recv_sge as usize, |o| {
            ctx.inner.live().and_then(|l| l.post_recv(q.qp.qp_num, o))
        })
    }
}

// ---- SRQ ----------------------------------------------------------------

unsafe extern "C" fn create_srq(pd: *mut ibv_pd, init: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    // SAFETY: see pd_ctx.
    let Some((ctx, _)) = (unsafe { pd_ctx(pd) }) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: a non-NULL `init` is the caller's.
    let Some(ia) = (unsafe { init.as_mut() }) else {
        return fail(libc::EINVAL);
    };
    let a = &ia.attr;
    if a.max_wr == 0 || a.max_wr > 16384 || a.max_sge as usize > MAX_SGE || a.srq_limit > a.max_wr {
        return fail(libc::EINVAL);
    }
    let max_sge = a.max_sge.max(1);
    // SAFETY: all-zero is valid for ibv_srq.
    let mut raw: ibv_srq = unsafe { std::mem::zeroed() };
    raw.context = ctx as *const Ctx as *mut ibv_context;
    raw.srq_context = ia.srq_context;
    raw.pd = pd;
    let b = Box::into_raw(Box::new(Srq {
        srq: raw,
        id: 0,
        max_sge,
    }));
    let id = match ctx.inner.live() {
        Ok(l) => l.create_srq(
            a.max_wr as usize,
            max_sge as usize,
            a.srq_limit as usize,
            b as usize,
        ),
        Err(Errno(e)) => {
            // SAFETY: `b` was allocated above and never published.
            drop(unsafe { Box::from_raw(b) });
            return fail(e);
        }
    };
    // SAFETY: `b` was just allocated.
    unsafe {
        (*b).id = id;
        (*b).srq.handle = id;
    }
    ia.attr.max_sge = max_sge;
    b.cast()
}

unsafe extern "C" fn modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    if srq.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a non-NULL `srq` is a live Srq whose context is live; `attr`
    // is the caller's.
    let (ctx, id, a) = unsafe { (ctx_of((*srq).context), (*srq.cast::<Srq>()).id, &*attr) };
    let Some(ctx) = ctx else {
        return libc::EINVAL;
    };
    let max_wr = (mask & IBV_SRQ_MAX_WR != 0).then_some(a.max_wr as usize);
    let limit = (mask & IBV_SRQ_LIMIT != 0).then_some(a.srq_limit as usize);
    match ctx
        .inner
        .live()
        .and_then(|l| l.modify_srq(id, max_wr, limit))
    {
        Ok(()) => 0,
        Err(Errno(e)) => e,
    }
}

unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    if srq.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: as in modify_srq.
    let (ctx, id) = unsafe { (ctx_of((*srq).context), (*srq.cast::<Srq>()).id) };
    let Some(ctx) = ctx else {
        return libc::EINVAL;
    };
    match ctx.inner.live().and_then(|l| l.query_srq(id)) {
        Ok((w, s, l)) => {
            // SAFETY: the caller's structure.
            unsafe {
                attr.write(ibv_srq_attr {
                    max_wr: w as u32,
                    max_sge: s as u32,
                    srq_limit: l as u32,
                })
            };
            0
        }
        Err(Errno(e)) => e,
    }
}

unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    if srq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: as in modify_srq.
    let (ctx, id) = unsafe { (ctx_of((*srq).context), (*srq.cast::<Srq>()).id) };
    let Some(ctx) = ctx else {
        return libc::EINVAL;
    };
    match ctx.inner.live().and_then(|l| l.destroy_srq(id)) {
        Ok(()) => {
            // SAFETY: `srq` came from create_srq's Box<Srq>; given up.
            drop(unsafe { Box::from_raw(srq.cast::<Srq>()) });
            0
        }
        Err(Errno(e)) => e,
    }
}

unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    if srq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: as in modify_srq.
    let (ctx, s) = unsafe { (ctx_of((*srq).context), &*srq.cast::<Srq>()) };
    let Some(ctx) = ctx else {
        return libc::EINVAL;
    };
    // SAFETY: per ibv_post_srq_recv's contract, as in post_recv.
    unsafe {
        post_recv_list(wr, bad, s.max_sge as usize, |o| {
            ctx.inner.live().and_then(|l| l.post_srq_recv(s.id, o))
        })
    }
}

// ---- AH -----------------------------------------------------------------

unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: see pd_ctx.
    let Some((ctx, _)) = (unsafe { pd_ctx(pd) }) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: a non-NULL `attr` is the caller's.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return fail(libc::EINVAL);
    };
    let av = match av_of(a) {
        Ok(av) if av.sgid_index == 0 => av,
        Ok(_) => return fail(libc::EINVAL),
        Err(e) => return fail(e),
    };
    let av = match ctx.inner.live().and_then(|l| l.resolve(av)) {
        Ok(av) => av,
        Err(Errno(e)) => return fail(e),
    };
    Box::into_raw(Box::new(Ah {
        ah: ibv_ah {
            // SAFETY: `pd` is live.
            context: unsafe { (*pd).context },
            pd,
            handle: 0,
        },
        av,
    }))
    .cast()
}

unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    if ah.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: `ah` came from create_ah's Box<Ah>; given up.
    drop(unsafe { Box::from_raw(ah.cast::<Ah>()) });
    0
}

/// The address of a UD receive's sender, from the GRH area the stack wrote
/// (RoCEv2: an IPv4 header in bytes 20..40, or an IPv6 header in 0..40).
fn grh_source(grh: &[u8; 40]) -> Option<IpAddr> {
    if grh[20] >> 4 == 4 {
        let s: [u8; 4] = grh[32..36].try_into().ok()?;
        Some(IpAddr::from(s))
    } else if grh[0] >> 4 == 6 {
        let s: [u8; 16] = grh[8..24].try_into().ok()?;
        Some(IpAddr::from(s))
    } else {
        None
    }
}

unsafe extern "C" fn init_ah_from_wc(
    c: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: see ctx_of.
    if unsafe { ctx_of(c) }.is_none()
        || wc.is_null()
        || grh.is_null()
        || ah_attr.is_null()
        || port != 1
    {
        return libc::EINVAL;
    }
    // SAFETY: the caller's wc, and a GRH area of 40 bytes.
    let (flags, bytes) = unsafe { ((*wc).wc_flags, *grh.cast::<[u8; 40]>()) };
    if flags & WcFlags::GRH.bits() == 0 {
        return libc::EINVAL;
    }
    let Some(src) = grh_source(&bytes) else {
        return libc::EINVAL;
    };
    let av = AddressVector {
        dgid: Gid::from_ip(src),
        hop_limit: 64,
        ..AddressVector::default()
    };
    // SAFETY: the caller's structure.
    unsafe { ah_attr.write(ah_attr_c(&av)) };
    0
}

unsafe extern "C" fn create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    if pd.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: all-zero is valid for ibv_ah_attr.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `pd` is live; the rest is forwarded.
    let r = unsafe { init_ah_from_wc((*pd).context, port, wc, grh, &mut a) };
    if r != 0 {
        return fail(r);
    }
    // SAFETY: forwarded contract.
    unsafe { create_ah(pd, &mut a) }
}

unsafe extern "C" fn attach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn detach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn resolve_eth_l2_from_gid(
    _c: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    libc::EOPNOTSUPP
}

// ---- fork, import, sysfs ------------------------------------------------

unsafe extern "C" fn fork_init() -> c_int {
    0
}

unsafe extern "C" fn is_fork_initialized() -> c_int {
    // IBV_FORK_UNNEEDED: no memory is pinned by a kernel driver.
    2
}

unsafe extern "C" fn dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

unsafe extern "C" fn import_device(_fd: c_int) -> *mut ibv_context {
    fail(libc::EOPNOTSUPP)
}

unsafe extern "C" fn import_obj(_parent: *mut c_void, _handle: u32) -> *mut c_void {
    fail(libc::EOPNOTSUPP)
}

unsafe extern "C" fn unimport_obj(_obj: *mut c_void) {}

unsafe extern "C" fn get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

unsafe extern "C" fn read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
        return -1;
    }
    // SAFETY: non-NULL NUL-terminated strings, per the contract.
    let (d, f) = unsafe {
        (
            std::ffi::CStr::from_ptr(dir).to_string_lossy().into_owned(),
            std::ffi::CStr::from_ptr(file)
                .to_string_lossy()
                .into_owned(),
        )
    };
    let Ok(mut s) = std::fs::read(format!("{d}/{f}")) else {
        return -1;
    };
    s.truncate(size - 1);
    if s.last() == Some(&b'\n') {
        s.pop();
    }
    // SAFETY: `buf` holds `size` bytes; at most size - 1 plus a NUL are
    // written.
    unsafe {
        ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    s.len() as c_int
}

// ---- strings and rates ----------------------------------------------------

unsafe extern "C" fn wc_status_str(status: c_int) -> *const c_char {
    const S: [&std::ffi::CStr; 22] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
    ];
    usize::try_from(status)
        .ok()
        .and_then(|i| S.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

unsafe extern "C" fn event_type_str(ev: c_int) -> *const c_char {
    const S: [&std::ffi::CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    usize::try_from(ev)
        .ok()
        .and_then(|i| S.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

unsafe extern "C" fn node_type_str(t: c_int) -> *const c_char {
    match t {
        1 => c"InfiniBand channel adapter",
        2 => c"InfiniBand switch",
        3 => c"InfiniBand router",
        4 => c"iWARP NIC",
        5 => c"usNIC",
        6 => c"usNIC UDP",
        7 => c"unspecified",
        _ => c"unknown",
    }
    .as_ptr()
}

unsafe extern "C" fn port_state_str(s: c_int) -> *const c_char {
    match s {
        0 => c"no state change (NOP)",
        1 => c"down",
        2 => c"init",
        3 => c"armed",
        4 => c"active",
        5 => c"active defer",
        _ => c"unknown",
    }
    .as_ptr()
}

/// (enum ibv_rate, multiple of 2.5 Gbit/s): `ibv_rate_to_mult` (verbs.c).
const MULTS: [(c_int, c_int); 15] = [
    (2, 1),
    (5, 2),
    (3, 4),
    (6, 8),
    (4, 12),
    (7, 16),
    (8, 24),
    (9, 32),
    (10, 48),
    (19, 11),
    (20, 20),
    (21, 160),
    (22, 240),
    (23, 320),
    (24, 480),
];

/// (enum ibv_rate, Mbit/s): `ibv_rate_to_mbps` (verbs.c).
const MBPS: [(c_int, c_int); 23] = [
    (2, 2500),
    (5, 5000),
    (3, 10000),
    (6, 20000),
    (4, 30000),
    (7, 40000),
    (8, 60000),
    (9, 80000),
    (10, 120000),
    (11, 14062),
    (12, 56250),
    (13, 112500),
    (14, 168750),
    (15, 25781),
    (16, 103125),
    (17, 206250),
    (18, 309375),
    (19, 28125),
    (20, 53125),
    (21, 425000),
    (22, 637500),
    (23, 850000),
    (24, 1275000),
];

unsafe extern "C" fn rate_to_mult(rate: c_int) -> c_int {
    MULTS.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

unsafe extern "C" fn mult_to_rate(mult: c_int) -> c_int {
    MULTS.iter().find(|r| r.1 == mult).map_or(0, |r| r.0)
}

unsafe extern "C" fn rate_to_mbps(rate: c_int) -> c_int {
    MBPS.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

unsafe extern "C" fn mbps_to_rate(mbps: c_int) -> c_int {
    MBPS.iter().find(|r| r.1 == mbps).map_or(0, |r| r.0)
}
