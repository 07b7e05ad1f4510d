//! Scenario (d): a flow joining a congested link converges to its fair
//! share; when it leaves, the others recover to line rate within a reported
//! time.

use roce_sim::scenario::{churn, Mode, Opts};

#[test]
fn joining_flow_gets_its_share_and_leaving_flow_frees_the_link() {
    let o = Opts::new(Mode::Dcqcn);
    let r = churn(&o);
    let share = r.figure("C share of goodput (fair 1/3)").unwrap();
    assert!((share - 1.0 / 3.0).abs() < 0.08, "C's share {share}");
    assert!(r.jain >= 0.95, "{}", r.jain);
    assert!(r.utilisation >= 0.90);
    let recovered = r
        .figure("A+B back to 90% of line goodput after [us]")
        .expect("A and B recover within the run");
    // Bounded by the remaining run (5 ms run, C leaves at 3.125 ms).
    assert!(recovered > 0.0 && recovered < 1_875.0, "{recovered}");
    assert_eq!(r.drops, 0);
    assert!(r.delivered_all());
}
