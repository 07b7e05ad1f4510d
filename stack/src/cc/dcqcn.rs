//! The DCQCN reaction point (RP): the per-QP rate controller that cuts the
//! sending rate when CNPs arrive and recovers it when they stop.
//!
//! Sources: the DCQCN paper (Zhu et al., "Congestion Control for Large-Scale
//! RDMA Deployments", SIGCOMM 2015, §3 and Figure 7) and the NVIDIA/Mellanox
//! firmware parameter documentation ("DCQCN CC Parameters", ConnectX-4 and
//! later; the mlxconfig / MLNX_OFED names used for every field of
//! [`DcqcnParams`]); ROCEV2-DIGEST §6 summarises both and lists where they
//! disagree.
//!
//! # Units
//!
//! - Rates are **Mbit/s**. Parameters are whole Mbit/s (`u64`, as the
//!   firmware takes them); the computed current and target rates are `f64`,
//!   because the paper's arithmetic (`R_C·(1 − α/2)`, `(R_T + R_C)/2`) is not
//!   integral and the tests pin its exact values (all the test values are
//!   dyadic fractions, exact in binary floating point).
//! - Times are [`crate::time::Instant`] (nanoseconds); periods are
//!   [`core::time::Duration`].
//! - α is a fraction in `[0, 1]`; the firmware's 10-bit fixed-point inputs
//!   (`initial_alpha_value`, `dce_tcp_g`) are converted by dividing by 1024.
//!
//! # State machine
//!
//! The RP is **idle** (no limiter: the QP sends at line rate, and the device
//! never touches its pacer) until the first CNP. Then:
//!
//! - **First CNP**: the RP becomes active with `R_C = R_T =
//!   rate_to_set_on_first_cnp` (0 = the line rate; CASES R30), α =
//!   `initial_alpha_value`/1024, and the CNP cuts the rate at once, as the
//!   HPCC ns-3 model of the firmware does (it sets the rate, then cuts 1 ns
//!   later). So with the defaults the first CNP takes a line-rate flow to
//!   about half the line rate (R30 b), and a configured first-CNP rate is the
//!   rate the cut starts from, not the rate after it.
//! - **Cut** (one per coalesced group of CNPs): `R_T ← R_C` when the target is
//!   clamped (see below); `R_C ← max(R_C·(1 − α·2^(10−rpg_gd)),
//!   R_C·rpg_min_dec_fac/100, min rate)` (`rpg_gd` = 11 gives the paper's
//!   `R_C·(1 − α/2)`); α ← `(1 − g)·α + g` either after the cut (paper order,
//!   the default) or before it ([`CutOrder`], CASES R29); then the timer and
//!   byte-counter stages reset to 0, the increase timer restarts, the byte
//!   count restarts and the α timer restarts.
//! - **Coalescing** (`rate_reduce_monitor_period` P): a CNP cuts at once if no
//!   cut happened in the last P; otherwise it is remembered and **one** cut
//!   happens when the period since the last cut ends, however many CNPs came
//!   in between. Cuts are therefore at least P apart. P = 0 cuts on every CNP
//!   (the paper, whose NP already spaces CNPs 50 µs apart).
//! - **α decay**: every `dce_tcp_rtt` (paper K) since the last α change
//!   without a cut, α ← `(1 − g)·α`. This is evaluated lazily (it schedules
//!   no timer); [`ReactionPoint::alpha_at`] gives the value at any time.
//!   This is the paper's form (α rises with each cut, i.e. once per CNP or
//!   per coalesced group of CNPs, and the K timer restarts then). NVIDIA's
//!   parameter page describes the firmware's α as updated on a free-running
//!   period instead (raised if a CNP came during the period, lowered
//!   otherwise); with CNPs at most one per `min_time_between_cnps` per flow
//!   the two differ only in when within a period the raise happens.
//! - **Increase events**: the timer fires every `rpg_time_reset` (T) after the
//!   last cut, and the byte counter every `rpg_byte_reset` (B) bytes sent
//!   after it; each event first bumps its own stage counter, then with
//!   F = `rpg_threshold`:
//!   - both stages < F: **fast recovery** `R_C ← (R_T + R_C)/2`;
//!   - both ≥ F: **hyper increase** `R_T += rpg_hai_rate·(min(stages) − F + 1)`
//!     (the author's simulator; the paper's "i grows with the stage"),
//!     then `R_C ← (R_T + R_C)/2`;
//!   - otherwise **additive increase** `R_T += rpg_ai_rate`, then
//!     `R_C ← (R_T + R_C)/2`.
//!
//!   `R_T` never exceeds the max rate. A disabled counter (period or byte
//!   count 0) never fires and its stage stays 0, so with the byte counter off
//!   the RP never reaches hyper increase (additive increase continues).
//! - **Target clamping** at a cut: `R_T ← R_C` if `clamp_tgt_rate`, or if the
//!   byte counter raised the rate since the last cut, or (with
//!   `clamp_tgt_rate_after_time_inc`) if the timer did; otherwise (two cuts
//!   with no increase between them) `R_T` keeps its value. The paper always
//!   clamps (`DcqcnParams::paper` sets `clamp_tgt_rate`).
//! - **Back to idle**: when the max rate is the line rate and an increase
//!   brings `R_C` within [`IDLE_SNAP_MBPS`] of it, the RP releases its limiter
//!   and becomes idle again (mlx5 releases a flow's rate limiter the same
//!   way; the 1 Mbit/s snap is the firmware's rate granularity, without which
//!   `(R_T + R_C)/2` would approach the line rate forever). The next CNP is a
//!   first CNP again. With `rpg_max_rate` below the line rate the RP stays
//!   active.
//!
//! Simultaneous events at one instant run in this order: events already due
//! (a deferred cut before a timer increase due at the same time, since the cut
//! restarts the timer), then the new CNP or bytes. Not modelled: the author's
//! simulator halving T and B during hyper increase, and its QCN rule
//! `R_T /= 8` when `R_T > 10·R_C`.

use core::time::Duration;

use crate::time::Instant;

/// The lowest rate the RP ever sets, Mbit/s, whatever the parameters say
/// (`rpg_min_rate` 0 would otherwise mean 0 b/s: a stalled QP and a division
/// by zero in the pacer, CASES R30 c). 1 Mbit/s is the firmware's unit and
/// its `rpg_min_rate` default.
pub const RATE_FLOOR_MBPS: f64 = 1.0;

/// When the max rate is the line rate and `R_C` comes within this many Mbit/s
/// of it, the RP goes idle (see the module docs).
pub const IDLE_SNAP_MBPS: f64 = 1.0;

/// The most byte-counter events one [`ReactionPoint::on_bytes_sent`] call
/// runs (a guard against a tiny `rpg_byte_reset`; never reached with sane
/// values: a 9 KB frame against the 32767-byte default gives at most one).
pub const MAX_BYTE_EVENTS_PER_CALL: u64 = 1024;

/// How `dce_tcp_g` (10-bit fixed point, `G`) turns into the α gain `g`.
///
/// ROCEV2-DIGEST §6 "Disagreements" (1): the Mellanox community page gives
/// the increase as `α = (G/1024)·α + (1024 − G)` (on the 1024 scale) and the
/// decrease as `α = (G/1024)·α`, i.e. `g = (1024 − G)/1024`; mstflint's PRM
/// comment says `α = cnp·G + (1 − G)·α` with `G/1024` as the gain. Only the
/// first reading makes the shipping default 1019 sensible (`g` = 5/1024 ≈
/// 1/205, close to the paper's 1/256; the other reading would give `g` ≈
/// 0.995), so it is the default. Unconfirmed on hardware.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AlphaGain {
    /// `g = (1024 − dce_tcp_g)/1024` (Mellanox community page; default).
    #[default]
    Complement,
    /// `g = dce_tcp_g/1024` (mstflint PRM comment).
    Direct,
}

/// Whether a cut uses α before or after the α increase of the CNP(s) it
/// answers (CASES R29).
///
/// The paper cuts with the old α and updates α afterwards; the author's
/// simulator and the HPCC ns-3 model update α first, so the cut uses the new
/// one. The paper order is the default (R29 recommends it). Example (R29):
/// `R_C` = 100 Gbit/s, α = 0.5, g = 1/16: paper order gives 75 Gbit/s and
/// then α = 0.53125; the simulator order gives 73.4375 Gbit/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CutOrder {
    /// Cut with the current α, then `α ← (1 − g)·α + g` (DCQCN paper; default).
    #[default]
    CutThenAlpha,
    /// `α ← (1 − g)·α + g`, then cut with the new α (author's simulator,
    /// HPCC ns-3).
    AlphaThenCut,
}

/// DCQCN reaction-point parameters, named as the mlx5 firmware names them
/// (NVIDIA "DCQCN CC Parameters"; mlxconfig upper-case, MLNX_OFED/debugfs
/// lower-case), plus the two choices where sources disagree
/// ([`AlphaGain`], [`CutOrder`]).
///
/// `Default` is [`DcqcnParams::mlx5`], the shipping-firmware values (identical
/// in two ConnectX mlxconfig dumps, ROCEV2-DIGEST §6); [`DcqcnParams::paper`]
/// has the DCQCN paper's. A value of 0 means "off" or "line rate" where the
/// field says so, never a rate of 0 (CASES R30).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DcqcnParams {
    /// Increase timer period T (paper `T`); [`Duration::ZERO`] = no timer.
    /// mlx5 default 300 µs.
    pub rpg_time_reset: Duration,
    /// Byte counter B, bytes sent per increase event; 0 = off (the firmware
    /// field is 15 bits). mlx5 default 32767.
    pub rpg_byte_reset: u64,
    /// F: increase events (per counter) before leaving fast recovery.
    /// mlx5 default 1, paper 5.
    pub rpg_threshold: u32,
    /// Additive-increase step `R_AI`, Mbit/s. mlx5 default 5.
    pub rpg_ai_rate: u64,
    /// Hyper-increase step `R_HAI`, Mbit/s. mlx5 default 50.
    pub rpg_hai_rate: u64,
    /// α-to-cut shift: a cut multiplies by `1 − α·2^(10 − rpg_gd)` (α in
    /// 1/1024 units divided by `2^rpg_gd`); 11 = the paper's `1 − α/2`.
    /// mlx5 default 11.
    pub rpg_gd: u32,
    /// Percent: one cut never takes `R_C` below this share of its value
    /// (100 = no cuts at all; 0 = no bound). mlx5 default 50.
    pub rpg_min_dec_fac: u32,
    /// Minimum rate, Mbit/s (never below [`RATE_FLOOR_MBPS`]). mlx5 default 1.
    pub rpg_min_rate: u64,
    /// Maximum rate, Mbit/s; 0 = the line rate (so is anything above it).
    /// mlx5 default 0.
    pub rpg_max_rate: u64,
    /// Minimum time between two cuts; CNPs in between coalesce into one cut
    /// at the end of the period. [`Duration::ZERO`] = cut on every CNP.
    /// mlx5 default 4 µs.
    pub rate_reduce_monitor_period: Duration,
    /// α on the first CNP, 10-bit fixed point (α = value/1024; the firmware
    /// range is 1..=1023, 1024 here means exactly 1 as in the paper).
    /// mlx5 default 1023.
    pub initial_alpha_value: u32,
    /// α gain G, 10-bit fixed point; see [`AlphaGain`] for how it becomes
    /// `g`. mlx5 default 1019.
    pub dce_tcp_g: u32,
    /// α update period K: without a cut for this long, α ← (1 − g)·α;
    /// [`Duration::ZERO`] = α never decays. mlx5 default 1 µs, paper 55 µs.
    pub dce_tcp_rtt: Duration,
    /// Always set `R_T ← R_C` on a cut. mlx5 default off.
    pub clamp_tgt_rate: bool,
    /// Also set `R_T ← R_C` on a cut when the timer (not only the byte
    /// counter) raised the rate since the last cut. mlx5 default on.
    pub clamp_tgt_rate_after_time_inc: bool,
    /// `R_C` and `R_T` on the first CNP, Mbit/s; 0 = the line rate. The
    /// first CNP then cuts from there. mlx5 default 0.
    pub rate_to_set_on_first_cnp: u64,
    /// Reading of `dce_tcp_g` (not a firmware parameter).
    pub alpha_gain: AlphaGain,
    /// α update before or after the cut (not a firmware parameter; R29).
    pub cut_order: CutOrder,
}

impl Default for DcqcnParams {
    fn default() -> Self {
        DcqcnParams::mlx5()
    }
}

impl DcqcnParams {
    /// The shipping ConnectX firmware defaults (ROCEV2-DIGEST §6 table; NVIDIA
    /// "DCQCN CC Parameters"), with the [`AlphaGain::Complement`] reading and
    /// the paper's [`CutOrder::CutThenAlpha`].
    pub const fn mlx5() -> DcqcnParams {
        DcqcnParams {
            rpg_time_reset: Duration::from_micros(300),
            rpg_byte_reset: 32767,
            rpg_threshold: 1,
            rpg_ai_rate: 5,
            rpg_hai_rate: 50,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate: 1,
            rpg_max_rate: 0,
            rate_reduce_monitor_period: Duration::from_micros(4),
            initial_alpha_value: 1023,
            dce_tcp_g: 1019,
            dce_tcp_rtt: Duration::from_micros(1),
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
            rate_to_set_on_first_cnp: 0,
            alpha_gain: AlphaGain::Complement,
            cut_order: CutOrder::CutThenAlpha,
        }
    }

    /// The DCQCN paper's values (Zhu et al. 2015, §5/§6): α initially 1,
    /// g = 1/256 (`dce_tcp_g` 1020 under [`AlphaGain::Complement`]),
    /// K = 55 µs, T = 55 µs, B = 10 MB (read as 10^7 bytes), F = 5,
    /// R_AI = 40 Mbit/s, R_HAI = 200 Mbit/s (the paper gives no value; this is
    /// the author's simulator's sample configuration), a cut on every CNP
    /// (no monitor period; the paper's NP spaces CNPs 50 µs apart), `R_T ← R_C`
    /// on every cut, no decrease-factor bound and no min/max rate beyond the
    /// line rate and [`RATE_FLOOR_MBPS`].
    pub const fn paper() -> DcqcnParams {
        DcqcnParams {
            rpg_time_reset: Duration::from_micros(55),
            rpg_byte_reset: 10_000_000,
            rpg_threshold: 5,
            rpg_ai_rate: 40,
            rpg_hai_rate: 200,
            rpg_gd: 11,
            rpg_min_dec_fac: 0,
            rpg_min_rate: 0,
            rpg_max_rate: 0,
            rate_reduce_monitor_period: Duration::ZERO,
            initial_alpha_value: 1024,
            dce_tcp_g: 1020,
            dce_tcp_rtt: Duration::from_micros(55),
            clamp_tgt_rate: true,
            clamp_tgt_rate_after_time_inc: true,
            rate_to_set_on_first_cnp: 0,
            alpha_gain: AlphaGain::Complement,
            cut_order: CutOrder::CutThenAlpha,
        }
    }

    /// The α gain `g` in `[0, 1]` (see [`AlphaGain`]).
    pub fn g(&self) -> f64 {
        let gv = self.dce_tcp_g.min(1024) as f64;
        match self.alpha_gain {
            AlphaGain::Complement => (1024.0 - gv) / 1024.0,
            AlphaGain::Direct => gv / 1024.0,
        }
    }

    /// α on the first CNP, in `[0, 1]`.
    pub fn initial_alpha(&self) -> f64 {
        self.initial_alpha_value.min(1024) as f64 / 1024.0
    }
}

/// One QP's DCQCN reaction point (see the module docs for the state machine).
///
/// Drive it with the caller's clock: [`on_cnp`](Self::on_cnp) for every CNP,
/// [`on_bytes_sent`](Self::on_bytes_sent) for every frame sent while active,
/// and [`handle_timeout`](Self::handle_timeout) once
/// [`poll_timeout`](Self::poll_timeout) has passed. Each call first runs the
/// events due at or before its `now`. Calls must not go back in time.
#[derive(Debug, Clone)]
pub struct ReactionPoint {
    p: DcqcnParams,
    line: f64,
    max: f64,
    min: f64,
    g: f64,
    active: bool,
    rc: f64,
    rt: f64,
    alpha: f64,
    /// α is `alpha` at this instant; decays fall at `alpha_at + n·K`.
    alpha_at: Instant,
    last_cut: Instant,
    cut_pending: bool,
    next_timer: Option<Instant>,
    byte_acc: u64,
    t_stage: u32,
    b_stage: u32,
    cuts: u64,
}

impl ReactionPoint {
    /// An idle RP on a link of `line_rate_mbps` Mbit/s (at least
    /// [`RATE_FLOOR_MBPS`]).
    pub fn new(params: DcqcnParams, line_rate_mbps: u64) -> ReactionPoint {
        let line = (line_rate_mbps as f64).max(RATE_FLOOR_MBPS);
        let max = if params.rpg_max_rate == 0 {
            line
        } else {
            (params.rpg_max_rate as f64).clamp(RATE_FLOOR_MBPS, line)
        };
        let min = (params.rpg_min_rate as f64).max(RATE_FLOOR_MBPS).min(max);
        ReactionPoint {
            p: params,
            line,
            max,
            min,
            g: params.g(),
            active: false,
            rc: line,
            rt: line,
            alpha: params.initial_alpha(),
            alpha_at: Instant::ZERO,
            last_cut: Instant::ZERO,
            cut_pending: false,
            next_timer: None,
            byte_acc: 0,
            t_stage: 0,
            b_stage: 0,
            cuts: 0,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &DcqcnParams {
        &self.p
    }
    /// The line rate, Mbit/s.
    pub fn line_rate(&self) -> f64 {
        self.line
    }
    /// The effective maximum rate, Mbit/s (`rpg_max_rate`, 0 = line rate).
    pub fn max_rate(&self) -> f64 {
        self.max
    }
    /// The effective minimum rate, Mbit/s (`rpg_min_rate`, at least
    /// [`RATE_FLOOR_MBPS`], at most the max rate).
    pub fn min_rate(&self) -> f64 {
        self.min
    }
    /// Whether the RP limits the QP (between a first CNP and the recovery to
    /// line rate).
    pub fn is_active(&self) -> bool {
        self.active
    }
    /// Current rate `R_C`, Mbit/s: the line rate when idle.
    pub fn rate(&self) -> f64 {
        if self.active {
            self.rc
        } else {
            self.line
        }
    }
    /// Current rate `R_C` when the RP limits the QP, `None` when idle
    /// (unlimited).
    pub fn limit(&self) -> Option<f64> {
        self.active.then_some(self.rc)
    }
    /// Target rate `R_T`, Mbit/s: the line rate when idle.
    pub fn target_rate(&self) -> f64 {
        if self.active {
            self.rt
        } else {
            self.line
        }
    }
    /// α as of the last call that took a time (decays since then are applied
    /// lazily; see [`alpha_at`](Self::alpha_at)). When idle: the value the
    /// next first CNP starts from.
    pub fn alpha(&self) -> f64 {
        if self.active {
            self.alpha
        } else {
            self.p.initial_alpha()
        }
    }
    /// α at `now`, with the `dce_tcp_rtt` decays due by then applied (no
    /// state change). Cuts still pending are not included.
    pub fn alpha_at(&self, now: Instant) -> f64 {
        if !self.active {
            return self.p.initial_alpha();
        }
        let (n, _) = self.decays(now);
        decay(self.alpha, 1.0 - self.g, n)
    }
    /// Timer stage counter (increase-timer events since the last cut).
    pub fn timer_stage(&self) -> u32 {
        self.t_stage
    }
    /// Byte stage counter (byte-counter events since the last cut).
    pub fn byte_stage(&self) -> u32 {
        self.b_stage
    }
    /// Rate cuts since the RP was created.
    pub fn cuts(&self) -> u64 {
        self.cuts
    }
    /// Whether CNPs arrived since the last cut and one cut is pending for the
    /// end of the `rate_reduce_monitor_period`.
    pub fn cut_pending(&self) -> bool {
        self.active && self.cut_pending
    }

    /// The next instant at which [`handle_timeout`](Self::handle_timeout) has
    /// work (an increase timer or a deferred cut); `None` when idle.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.active {
            return None;
        }
        let cut = self
            .cut_pending
            .then(|| self.last_cut + self.p.rate_reduce_monitor_period);
        match (cut, self.next_timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Run every event due at or before `now` (deferred cuts, increase
    /// timers) in time order, each at its own scheduled instant, and bring α
    /// up to date.
    pub fn handle_timeout(&mut self, now: Instant) {
        while self.active {
            let cut = self
                .cut_pending
                .then(|| self.last_cut + self.p.rate_reduce_monitor_period);
            match (cut, self.next_timer) {
                (Some(c), None) if c <= now => self.cut(c),
                (Some(c), Some(t)) if c <= now && c <= t => self.cut(c),
                (_, Some(t)) if t <= now => {
                    self.t_stage = self.t_stage.saturating_add(1);
                    self.next_timer = Some(t + self.p.rpg_time_reset);
                    self.increase();
                }
                _ => break,
            }
        }
        if self.active {
            self.catch_up_alpha(now);
        }
    }

    /// A CNP for this QP arrived at `now`.
    pub fn on_cnp(&mut self, now: Instant) {
        self.handle_timeout(now);
        if !self.active {
            self.active = true;
            let first = if self.p.rate_to_set_on_first_cnp == 0 {
                self.line
            } else {
                self.p.rate_to_set_on_first_cnp as f64
            };
            self.rc = first.clamp(self.min, self.max);
            self.rt = self.rc;
            self.alpha = self.p.initial_alpha();
            self.alpha_at = now;
            self.t_stage = 0;
            self.b_stage = 0;
            self.byte_acc = 0;
            self.cut_pending = false;
            self.cut(now);
            return;
        }
        let period = self.p.rate_reduce_monitor_period;
        if period.is_zero() || now >= self.last_cut + period {
            self.cut(now);
        } else {
            self.cut_pending = true;
        }
    }

    /// `bytes` were sent at `now` (a no-op when idle or with the byte counter
    /// off). Every `rpg_byte_reset` bytes since the last cut is one
    /// byte-counter increase event.
    pub fn on_bytes_sent(&mut self, now: Instant, bytes: u64) {
        if !self.active {
            return;
        }
        self.handle_timeout(now);
        let b = self.p.rpg_byte_reset;
        if !self.active || b == 0 {
            return;
        }
        self.byte_acc = self.byte_acc.saturating_add(bytes);
        let mut events = 0;
        while self.active && self.byte_acc >= b && events < MAX_BYTE_EVENTS_PER_CALL {
            self.byte_acc -= b;
            self.b_stage = self.b_stage.saturating_add(1);
            self.increase();
            events += 1;
        }
        if events == MAX_BYTE_EVENTS_PER_CALL {
            self.byte_acc %= b;
        }
    }

    /// Back to idle (QP reset): no limiter, every counter cleared.
    pub fn reset(&mut self) {
        let cuts = self.cuts;
        *self = ReactionPoint::new(self.p, self.line as u64);
        self.cuts = cuts;
    }

    /// Number of whole α periods between `alpha_at` and `now`, and the instant
    /// of the last of them.
    fn decays(&self, now: Instant) -> (u64, Instant) {
        let k = self.p.dce_tcp_rtt.as_nanos().min(u64::MAX as u128) as u64;
        if k == 0 {
            return (0, self.alpha_at);
        }
        let n = now.as_nanos().saturating_sub(self.alpha_at.as_nanos()) / k;
        (
            n,
            Instant(self.alpha_at.as_nanos().saturating_add(n.saturating_mul(k))),
        )
    }

    fn catch_up_alpha(&mut self, now: Instant) {
        let (n, at) = self.decays(now);
        if n > 0 {
            self.alpha = decay(self.alpha, 1.0 - self.g, n);
            self.alpha_at = at;
        }
    }

    fn raise_alpha(&mut self) {
        self.alpha = ((1.0 - self.g) * self.alpha + self.g).clamp(0.0, 1.0);
    }

    /// One rate cut at `t`.
    fn cut(&mut self, t: Instant) {
        self.catch_up_alpha(t);
        if self.p.cut_order == CutOrder::AlphaThenCut {
            self.raise_alpha();
        }
        let clamp = self.p.clamp_tgt_rate
            || self.b_stage > 0
            || (self.p.clamp_tgt_rate_after_time_inc && self.t_stage > 0);
        if clamp {
            self.rt = self.rc;
        }
        let shift = 10 - self.p.rpg_gd.min(1000) as i32;
        let cut = self.rc * (1.0 - self.alpha * 2f64.powi(shift));
        let bound = self.rc * self.p.rpg_min_dec_fac.min(100) as f64 / 100.0;
        self.rc = cut.max(bound).max(self.min).min(self.rc);
        if self.p.cut_order == CutOrder::CutThenAlpha {
            self.raise_alpha();
        }
        self.alpha_at = t;
        self.t_stage = 0;
        self.b_stage = 0;
        self.byte_acc = 0;
        self.next_timer = (!self.p.rpg_time_reset.is_zero()).then(|| t + self.p.rpg_time_reset);
        self.last_cut = t;
        self.cut_pending = false;
        self.cuts += 1;
    }

    /// One increase event (its stage counter already bumped).
    fn increase(&mut self) {
        let f = self.p.rpg_threshold;
        let (ts, bs) = (self.t_stage, self.b_stage);
        if ts.max(bs) < f {
            // Fast recovery: R_T unchanged.
        } else if ts.min(bs) >= f {
            let i = (ts.min(bs) - f).saturating_add(1);
            self.rt += self.p.rpg_hai_rate as f64 * i as f64;
        } else {
            self.rt += self.p.rpg_ai_rate as f64;
        }
        self.rt = self.rt.min(self.max);
        self.rc = ((self.rt + self.rc) / 2.0).min(self.max);
        if self.max >= self.line && self.rc >= self.line - IDLE_SNAP_MBPS {
            self.reset();
        }
    }
}

/// `alpha·factor^n`, step by step for small `n` (so lazily applied decays
/// equal the step-by-step values exactly), by `powf` beyond.
fn decay(alpha: f64, factor: f64, n: u64) -> f64 {
    const STEPS: u64 = 64;
    let mut a = alpha;
    for _ in 0..n.min(STEPS) {
        a *= factor;
    }
    if n > STEPS {
        a *= factor.powf((n - STEPS) as f64);
    }
    a
}
