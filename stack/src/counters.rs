//! Named event and drop counters. Names follow the mlx5 hardware counters
//! (`out_of_sequence`, `packet_seq_err`, `duplicate_request`, ...) and rxe's
//! (`rcvd_rnr_err`, `send_rnr_err`, ...) where one exists, so operators read
//! them as they would on a NIC.

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Per-device counters; each is incremented at the branch that decides.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Counters {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl Counters {
            /// Every counter as `(name, value)`, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                [$((stringify!($name), self.$name)),*].into_iter()
            }
            /// A counter by name.
            pub fn get(&self, name: &str) -> Option<u64> {
                self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
            }
        }
    };
}

counters! {
    /// Frames handed to `handle_frame`.
    rx_frames,
    /// RoCE packets accepted for a QP.
    rcvd_pkts,
    /// Frames transmitted.
    sent_pkts,
    /// Frames dropped by the wire parser (details in `Device::drop_counters`).
    rx_parse_drops,
    /// Packets for a QPN that does not exist.
    rx_qp_not_found,
    /// Packets for a QP in a state that does not receive (not RTR/RTS/SQD).
    rx_qp_bad_state,
    /// Opcode not valid for the QP's transport service.
    rx_opcode_qp_mismatch,
    /// P_Key mismatch (IBTA §9.6.1.1).
    rx_pkey_mismatch,
    /// Destination address not in the GID table, or source not the QP's peer.
    rx_addr_mismatch,
    /// RoCE frames whose destination MAC is not the port's
    /// (`DeviceConfig::mac`): another unicast MAC, or a broadcast/multicast
    /// one (RFC 1122 §3.3.6: a unicast datagram that came as link-layer
    /// broadcast is discarded; Linux drops `PACKET_OTHERHOST` frames before
    /// IP). Not checked with `DeviceConfig::promiscuous`.
    rx_dmac_mismatch,
    /// RoCE frames whose VLAN ID is not the one of the QP's address vector
    /// (RC/UC) or of the port (`DeviceConfig::vlan`, UD); untagged and
    /// priority-tagged (VID 0, IEEE 802.1Q §9.6) frames count as VLAN none.
    rx_vlan_mismatch,
    /// Frames of an EtherType that is neither IPv4, IPv6, RoCEv1 nor MAC
    /// control (ARP and others that no neighbour handler took).
    rx_other_ethertype,
    /// IPv4/IPv6 packets that are not UDP (TCP, ICMP that no neighbour
    /// handler took, ...).
    rx_other_ip_protocol,
    /// UDP datagrams to a port other than 4791 (DHCP, DNS, ...).
    rx_other_udp_port,
    /// Responder: request PSN after ePSN (mlx5 `out_of_sequence`).
    out_of_sequence,
    /// Requester: sequence-error NAKs received (mlx5 `packet_seq_err`).
    packet_seq_err,
    /// Responder: duplicate requests (mlx5 `duplicate_request`).
    duplicate_request,
    /// Requester: ACK timer expiries (mlx5 `local_ack_timeout_err`).
    local_ack_timeout_err,
    /// Requester: RNR retries exhausted (mlx5 `rnr_nak_retry_err`).
    rnr_nak_retry_err,
    /// Requester: an ACK skipped an unanswered READ/ATOMIC (mlx5 `implied_nak_seq_err`).
    implied_nak_seq_err,
    /// Requester: RNR NAKs received (rxe `rcvd_rnr_err`).
    rcvd_rnr_err,
    /// Responder: RNR NAKs sent (rxe `send_rnr_err`).
    send_rnr_err,
    /// Requester: retries exhausted (rxe `retry_exceeded_err`).
    retry_exceeded_err,
    /// Responder: sequence NAKs sent.
    seq_nak_sent,
    /// Responder: invalid-request NAKs sent (mlx5 `resp_remote_invalid_request` analogue).
    resp_invalid_request,
    /// Responder: remote-access-error NAKs sent.
    resp_remote_access_error,
    /// Responder: remote-operational-error NAKs sent (malformed receive WQE).
    resp_remote_operational_error,
    /// Requester: remote-access-error NAKs received (mlx5 `req_remote_access_errors`).
    req_remote_access_errors,
    /// Requester: invalid-request NAKs received (mlx5 `req_remote_invalid_request`).
    req_remote_invalid_request,
    /// Requester: remote-operational-error NAKs received.
    req_remote_operational_error,
    /// Requester: responses that match nothing outstanding (dropped).
    resp_unexpected,
    /// Requester: responses for already-acknowledged PSNs (duplicates, ghosts
    /// from before a retry or a QP re-creation), duplicate RNR NAKs, and
    /// NAKs whose go-back-N is already under way: dropped.
    resp_duplicate,
    /// Responder: duplicate READ/ATOMIC with no matching resource (dropped).
    dup_no_resource,
    /// UD: Q_Key violations (dropped).
    qkey_violation,
    /// UD: datagrams larger than the receive buffer or the PMTU (dropped).
    ud_len_err,
    /// UD/UC: datagrams or messages dropped for lack of a receive WQE.
    rx_no_rwqe,
    /// UC: packets of broken messages dropped.
    uc_dropped,
    /// Receive completions with status SUCCESS: SEND and WRITE with
    /// immediate, every transport (rxe `rdma_recvs`).
    rdma_recvs,
    /// SEND WQEs completed with status SUCCESS, signalled or not (rxe
    /// `rdma_sends`; rxe also counts SENDs that complete in error).
    rdma_sends,
    /// Requester: responses whose AETH MSN is smaller than that of an
    /// earlier response counting through the same or an earlier PSN (the
    /// responder's count of completed messages went backwards; see
    /// `transport::rc::completer`).
    resp_msn_backwards,
    /// Requester: responses whose AETH MSN counts more messages than were
    /// ever sent (the MSN starts at 0 and counts one per message: rxe
    /// `resp.msn`, ROCEV2-DIGEST §5 "MSN"), i.e. it skipped values.
    resp_msn_skipped,
    /// Responder: RDMA WRITE requests executed (mlx5 `rx_write_requests`).
    rx_write_requests,
    /// Responder: RDMA READ requests executed (mlx5 `rx_read_requests`).
    rx_read_requests,
    /// Responder: atomic requests executed (mlx5 `rx_atomic_requests`).
    rx_atomic_requests,
    /// Completions lost to a CQ overrun (each also raises `AsyncEvent::CqErr`).
    cq_overrun,
    /// CNPs received (every one, before the checks below).
    rx_cnp,
    /// CNPs whose DestQP is not a QP of this device (dropped; the
    /// `rx_qp_not_found` of CNPs).
    rx_cnp_qp_not_found,
    /// Reaction point: CNPs handed to a QP's DCQCN reaction point (mlx5
    /// `rp_cnp_handled`).
    rp_cnp_handled,
    /// Reaction point: CNPs for an existing QP that changed nothing, because
    /// the reaction point is disabled (`CcConfig::rp_enabled`) or the QP is
    /// not in a sending state (RTS, SQD) (mlx5 `rp_cnp_ignored`).
    rp_cnp_ignored,
    /// Notification point: CE-marked RoCEv2 packets accepted for a QP (mlx5
    /// `np_ecn_marked_roce_packets`); counted with the NP enabled or not.
    np_ecn_marked_roce_packets,
    /// Notification point: CNPs sent (mlx5 `np_cnp_sent`).
    np_cnp_sent,
    /// Notification point: CNPs not sent because the NP flow table was full
    /// of flows still inside their `min_time_between_cnps`.
    np_cnp_dropped,
}
