//! The control input: admin commands to a running engine.

mod common;

use common::*;
use tiervisor_engine::*;

#[test]
fn set_qos_checks_the_volume_and_the_values_and_changes_nothing_on_error() {
    let mut r = Rig::new(config(1 << 20));
    let thin = r.engine.volume_id("thin").unwrap();
    let mut out = Outputs::default();
    let qos = VolumeQos {
        reservation_iops: 100,
        limit_iops: 1000,
        weight: 500,
    };
    assert_eq!(
        r.engine
            .control(r.now, Control::SetQos { volume: thin, qos }, &mut out),
        Ok(())
    );
    let missing = VolumeId(99);
    assert_eq!(
        r.engine.control(
            r.now,
            Control::SetQos {
                volume: missing,
                qos
            },
            &mut out
        ),
        Err(ControlError::UnknownVolume(missing))
    );
    for bad in [
        VolumeQos { weight: 0, ..qos },
        VolumeQos {
            weight: 1001,
            ..qos
        },
        VolumeQos {
            reservation_iops: 2000,
            ..qos
        },
    ] {
        let e = r
            .engine
            .control(
                r.now,
                Control::SetQos {
                    volume: thin,
                    qos: bad,
                },
                &mut out,
            )
            .unwrap_err();
        assert!(matches!(e, ControlError::Invalid(_)), "{bad:?}: {e}");
    }
    // QoS is configuration: nothing is journaled or written for it.
    assert!(out.ops.is_empty() && out.events.is_empty());
}
