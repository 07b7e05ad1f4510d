//! External MRs (`Device::reg_mr_external`): memory the caller keeps owning,
//! read and written in place. The oracle is the caller's own copy of the
//! bytes it lent: an RDMA WRITE into an external MR must appear in the
//! caller's buffer (seen through the caller's handle, not the device's),
//! and an RDMA READ out of one must return what the caller wrote there.
//! Deregistration under a posted WQE is refused (`Busy`), so the memory is
//! never used after the caller takes it back.

use std::sync::{Arc, Mutex};

use roce_stack::testing::{connect, ConnOpts, Faults, Pair};
use roce_stack::verbs::{
    AccessFlags, MrBuffer, RecvWr, SendWr, Sge, VerbsError, Wc, WcStatus, WrOpcode,
};
use std::time::Duration;

/// The device's view of lent bytes; when the device drops it (at
/// `dereg_mr`), it hands the bytes back to the owner's handle, which is
/// what the test then reads.
#[derive(Debug)]
struct View(Arc<Mutex<Vec<u8>>>, Vec<u8>);

impl MrBuffer for View {
    fn as_slice(&self) -> &[u8] {
        &self.1
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.1
    }
}

impl Drop for View {
    /// Hand the bytes back to the owner when the device drops the MR.
    fn drop(&mut self) {
        if let Ok(mut g) = self.0.lock() {
            *g = std::mem::take(&mut self.1);
        }
    }
}

fn lend(bytes: Vec<u8>) -> (Arc<Mutex<Vec<u8>>>, Box<dyn MrBuffer>) {
    let owner = Arc::new(Mutex::new(Vec::new()));
    (owner.clone(), Box::new(View(owner, bytes)))
}

fn poll_one(p: &mut Pair, cq: u32) -> Wc {
    let mut wc = [Wc::EMPTY];
    assert_eq!(p.dev[0].poll_cq(cq, &mut wc), 1);
    wc[0]
}

fn all() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

#[test]
fn write_and_read_land_in_the_lent_memory() {
    let mut p = Pair::new(1500, Faults::default(), 7);
    let c = connect(&mut p, &ConnOpts::default());
    let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    let src_mr = p.dev[0]
        .reg_mr(c.pd[0], src.clone(), 0x1000, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let (owner, view) = lend(vec![0u8; 8192]);
    let dst = p.dev[1]
        .reg_mr_external(c.pd[1], view, 0x9000_0000, all())
        .unwrap();
    let sge = [Sge {
        addr: 0x1000,
        length: 5000,
        lkey: src_mr.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
    wr.remote_addr = 0x9000_0000 + 100;
    wr.rkey = dst.rkey;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    let cq = c.cq[0];
    assert!(p.run_until(Duration::from_millis(100), |p| p.dev[0]
        .cq(cq)
        .is_some_and(|q| !q.is_empty())));
    let wc = poll_one(&mut p, cq);
    assert_eq!(wc.status, WcStatus::Success);

    // READ it back into a second, owned MR.
    let back = p.dev[0]
        .reg_mr(
            c.pd[0],
            vec![0u8; 5000],
            0x20_0000,
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap();
    let sge = [Sge {
        addr: 0x20_0000,
        length: 5000,
        lkey: back.lkey,
    }];
    let mut rd = SendWr::new(2, WrOpcode::RdmaRead, &sge);
    rd.remote_addr = 0x9000_0000 + 100;
    rd.rkey = dst.rkey;
    p.dev[0].post_send(c.qpn[0], &rd).unwrap();
    assert!(p.run_until(Duration::from_millis(100), |p| p.dev[0]
        .cq(cq)
        .is_some_and(|q| !q.is_empty())));
    assert_eq!(poll_one(&mut p, cq).status, WcStatus::Success);
    assert_eq!(p.dev[0].mr(back.lkey).unwrap().as_slice(), &src[..]);

    // Deregistering hands the bytes back to their owner (the View's Drop):
    // the WRITE is there, at offset 100, and nothing else was touched.
    assert_eq!(p.dev[1].dereg_mr(dst.lkey), Ok(Vec::new()));
    let got = owner.lock().unwrap().clone();
    assert_eq!(got.len(), 8192);
    assert!(got[..100].iter().all(|&b| b == 0));
    assert_eq!(&got[100..5100], &src[..]);
    assert!(got[5100..].iter().all(|&b| b == 0));
}

#[test]
fn dereg_under_a_posted_wqe_is_refused() {
    let mut p = Pair::new(1500, Faults::default(), 8);
    let c = connect(&mut p, &ConnOpts::default());
    let (owner, view) = lend(vec![0u8; 4096]);
    let mr = p.dev[1]
        .reg_mr_external(c.pd[1], view, 0x4000, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let sge = [Sge {
        addr: 0x4000,
        length: 4096,
        lkey: mr.lkey,
    }];
    p.dev[1]
        .post_recv(
            c.qpn[1],
            &RecvWr {
                wr_id: 9,
                sg_list: &sge,
            },
        )
        .unwrap();
    assert_eq!(p.dev[1].dereg_mr(mr.lkey), Err(VerbsError::Busy));
    assert!(p.dev[1].mr(mr.lkey).is_some(), "refused: still registered");
    // Once the QP is gone nothing names the lkey and the MR goes.
    p.dev[1].destroy_qp(c.qpn[1]).unwrap();
    assert_eq!(p.dev[1].dereg_mr(mr.lkey), Ok(Vec::new()));
    assert_eq!(owner.lock().unwrap().len(), 4096);
}
