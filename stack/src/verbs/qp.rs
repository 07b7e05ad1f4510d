//! Queue pairs: attributes, the IBTA state machine (IBTA 1.7 §10.3, Figure 124;
//! the kernel's `qp_state_table`). The QP itself and the transport engines
//! that drive it live in [`crate::transport`]; its attributes in
//! [`crate::resources::attr`].

pub use crate::resources::attr::{QpAttr, QpCap, QpInfo, QpInitAttr, VerbsError};
use crate::resources::types::{QpAttrMask, QpState, QpType};
pub use crate::transport::qp::Qp;

/// Legal state moves (kernel `qp_state_table`): returns (required, optional)
/// attribute masks for `qp_type`, or `None` if the move is illegal.
pub fn transition_masks(
    qp_type: QpType,
    from: QpState,
    to: QpState,
) -> Option<(QpAttrMask, QpAttrMask)> {
    use QpAttrMask as M;
    use QpState::*;
    let none = M::empty();
    let conn = qp_type != QpType::Ud;
    let rc = qp_type == QpType::Rc;
    let qkey_ud = if conn { none } else { M::QKEY };
    match (from, to) {
        // Every state may go to RESET; every state but RESET may go to ERR.
        (_, Reset) => Some((none, none)),
        (Reset, Err) => None,
        (_, Err) => Some((none, none)),
        (Reset, Init) => Some((
            M::PKEY_INDEX | M::PORT | if conn { M::ACCESS_FLAGS } else { M::QKEY },
            none,
        )),
        (Init, Init) => Some((
            none,
            M::PKEY_INDEX | M::PORT | if conn { M::ACCESS_FLAGS } else { M::QKEY },
        )),
        (Init, Rtr) => {
            let req = if rc {
                M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MAX_DEST_RD_ATOMIC
                    | M::MIN_RNR_TIMER
            } else if conn {
                M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN
            } else {
                none
            };
            let opt = if conn {
                M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX
            } else {
                M::PKEY_INDEX | M::QKEY
            };
            Some((req, opt))
        }
        (Rtr, Rts) => {
            let req = if rc {
                M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC
            } else {
                M::SQ_PSN
            };
            let opt = M::CUR_STATE
                | M::RATE_LIMIT
                | if conn {
                    M::ALT_PATH
                        | M::ACCESS_FLAGS
                        | M::PATH_MIG_STATE
                        | if rc { M::MIN_RNR_TIMER } else { none }
                } else {
                    M::QKEY
                };
            Some((req, opt))
        }
        (Rts, Rts) | (Sqd, Rts) => Some((
            none,
            M::CUR_STATE
                | M::RATE_LIMIT
                | qkey_ud
                | if conn {
                    M::ACCESS_FLAGS
                        | M::ALT_PATH
                        | M::PATH_MIG_STATE
                        | if rc { M::MIN_RNR_TIMER } else { none }
                } else {
                    none
                },
        )),
        (Rts, Sqd) => Some((none, M::EN_SQD_ASYNC_NOTIFY)),
        (Sqd, Sqd) => Some((
            none,
            M::PKEY_INDEX
                | qkey_ud
                | if conn {
                    M::AV | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE
                } else {
                    none
                }
                | if rc {
                    M::PORT
                        | M::TIMEOUT
                        | M::RETRY_CNT
                        | M::RNR_RETRY
                        | M::MAX_QP_RD_ATOMIC
                        | M::MAX_DEST_RD_ATOMIC
                        | M::MIN_RNR_TIMER
                } else {
                    none
                },
        )),
        (Sqe, Rts) => Some((
            none,
            M::CUR_STATE | if conn { M::ACCESS_FLAGS } else { M::QKEY },
        )),
        _ => None,
    }
}
