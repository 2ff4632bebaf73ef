fn main() {
    for r in tiervisor_model::calibrate::run() {
        println!(
            "{:<55} model {:>9.2} paper {:>7} ratio {}",
            r.figure,
            r.model,
            r.paper.map(|p| format!("{p:.1}")).unwrap_or("-".into()),
            r.ratio.map(|x| format!("{x:.2}")).unwrap_or("-".into())
        );
    }
}
