//! The device state the transport engines share (smoltcp's
//! `InterfaceInner`): everything of a device but its QPs and its transmit
//! scheduler. The device owns one; each engine call gets the QP it works on
//! and this.

use std::collections::VecDeque;

use super::config::{AsyncEvent, DeviceConfig};
use super::cq::Cq;
use super::headers::IpIdent;
use super::keymap::KeyMap;
use super::mr::MrTable;
use super::timers::TimerTable;
use super::wr::Wc;
use crate::backend::TxFrame;
use crate::counters::Counters;

/// The shared state of one device (see the module docs).
#[derive(Debug)]
pub(crate) struct DeviceInner {
    pub cfg: DeviceConfig,
    pub mrs: MrTable,
    pub cqs: KeyMap<u32, Cq>,
    pub counters: Counters,
    pub events: VecDeque<AsyncEvent>,
    /// Every armed QP timer (ACK, RNR, reaction point, pacer).
    pub timers: TimerTable,
    /// The IPv4 identification of the next packet.
    pub ident: IpIdent,
    pub zc: ZeroCopy,
}

impl DeviceInner {
    pub fn new(cfg: DeviceConfig) -> DeviceInner {
        DeviceInner {
            cfg,
            mrs: MrTable::default(),
            cqs: KeyMap::default(),
            counters: Counters::default(),
            events: VecDeque::new(),
            timers: TimerTable::default(),
            ident: IpIdent::default(),
            zc: ZeroCopy::default(),
        }
    }

    /// Deliver a completion; an overrun is counted and raised as an event
    /// (IBTA C11-33).
    pub fn complete(&mut self, cq: u32, wc: Wc) {
        let ok = self.cqs.get_mut(&cq).is_some_and(|c| c.push(wc));
        if !ok {
            self.counters.cq_overrun += 1;
            let ev = AsyncEvent::CqErr { cq };
            if !self.events.contains(&ev) {
                self.events.push_back(ev);
            }
        }
    }
}

/// Zero-copy transmit state of a device ([`crate::verbs::Device::poll_transmit_gather`]).
#[derive(Debug, Default)]
pub(crate) struct ZeroCopy {
    /// Payloads of at least this many bytes are sent by reference when they
    /// are one contiguous range of a shared MR; 0 = off (plain
    /// `poll_transmit`).
    pub min: usize,
    /// The gather description of the frame just produced, if it was one.
    pub frame: Option<TxFrame>,
    /// Frames produced as [`TxFrame::Gather`] so far.
    pub frames: u64,
}
