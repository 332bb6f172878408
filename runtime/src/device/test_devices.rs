//! The devices the unit tests check kernels on, one test at a time.
//!
//! The tests of one binary run on parallel threads, and every test that names `wgpu:0`
//! gets the same device and queue. A sync waits for the whole queue, so a test that times
//! kernels (the convolution forms' measurement) would time another test's kernels too: CI
//! once saw an instant answer measure slower than a real convolution. Each test therefore
//! holds the devices' turn for as long as it iterates them.

use burn::backend::DispatchDevice;
use std::sync::{Mutex, MutexGuard};

/// The devices named in `ENGINE_TEST_DEVICES` (comma-separated, e.g. `wgpu:0`), by name,
/// holding the turn until the iteration is dropped: iterate it, don't collect it, or the
/// turn ends before the devices are used.
pub(crate) struct TestDevices {
    devices: std::vec::IntoIter<(String, DispatchDevice)>,
    _turn: Option<MutexGuard<'static, ()>>,
}

impl Iterator for TestDevices {
    type Item = (String, DispatchDevice);

    fn next(&mut self) -> Option<Self::Item> {
        self.devices.next()
    }
}

/// The devices named in `ENGINE_TEST_DEVICES`, each test's turn on them taken (and none
/// when no device is named, so host-only runs keep their parallelism). A test that failed
/// holding the turn leaves it usable.
pub(crate) fn test_devices() -> TestDevices {
    static TURN: Mutex<()> = Mutex::new(());
    let names = std::env::var("ENGINE_TEST_DEVICES").unwrap_or_default();
    let names: Vec<&str> = names.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let turn = (!names.is_empty()).then(|| TURN.lock().unwrap_or_else(|p| p.into_inner()));
    let devices = names
        .into_iter()
        .map(|n| (n.to_string(), super::Device::open(n.parse().unwrap()).unwrap().dispatch().clone()))
        .collect::<Vec<_>>();
    TestDevices { devices: devices.into_iter(), _turn: turn }
}
