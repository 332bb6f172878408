//! A copy the device makes only when the step's numerics flag is finite.
//!
//! A replayed step used to commit from the host: replay, read the flag back, then launch
//! the copies of the new values into the variables' buffers when it was finite. The device
//! sat idle from the step's last kernel until the copies came, one host round trip per
//! step. With the guard read on the device the commit is queued right behind the step and
//! the one read per step is the only wait, while a non-finite flag still leaves every
//! variable as it was (the host names the culprits from the same read).

use super::cube::{Cube, cube, elem_type, launched, whole};
use crate::Value;
use burn::backend::{BackendTensor, DispatchTensorKind};
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, ir::AddressType};

/// Whether [`copy_if_finite`] takes these values: contiguous whole buffers of one shape and
/// element type, and a float flag, all in cubecl buffers. Checked before a commit is
/// recorded, so a step's copies are either all guarded on the device or all decided by
/// the host.
pub(crate) fn guardable(src: &Value, dst: &Value, flag: &crate::value::T) -> bool {
    parts(src, dst, flag).is_some()
}

/// Copies `src` into `dst`'s buffer where the first element of `flag` (a float tensor on
/// the same device) is finite; `false` (nothing queued) where [`guardable`] is not, or the
/// launch was refused. The flag is read on the device when the copy runs, so a recorded
/// copy reads each replay's flag.
pub(crate) fn copy_if_finite(src: &Value, dst: &Value, flag: &crate::value::T) -> bool {
    let Some((s, d, f, elem, flag_elem)) = parts(src, dst, flag) else { return false };
    let total: usize = s.meta.shape().iter().product();
    if total == 0 {
        // Nothing to copy; a launch would still read the first element of an empty buffer.
        return true;
    }
    let client = d.client.clone();
    let cube_dim = CubeDim::new(&client, total);
    let cube_count = calculate_cube_count_elemwise(&client, total, cube_dim);
    launched(|| unsafe {
        guarded_copy::launch_unchecked(
            &client,
            cube_count,
            cube_dim,
            AddressType::from_len(total),
            s.clone().into_tensor_arg(),
            d.clone().into_tensor_arg(),
            f.clone().into_tensor_arg(),
            total,
            elem,
            flag_elem,
        )
    })
}

type Parts<'a> = (&'a Cube, &'a Cube, &'a Cube, ElemType, ElemType);

fn parts<'a>(src: &'a Value, dst: &'a Value, flag: &'a crate::value::T) -> Option<Parts<'a>> {
    let (s, d) = (src.tensor().and_then(cube)?, dst.tensor().and_then(cube)?);
    let DispatchTensorKind::Cube(BackendTensor::Float(f)) = &flag.kind else { return None };
    let (elem, flag_elem) = (elem_type(s.dtype)?, elem_type(f.dtype)?);
    let alike = s.dtype == d.dtype && s.meta.shape() == d.meta.shape();
    let same_device = s.device == d.device && f.device == d.device;
    (alike && same_device && whole(s) && whole(d) && matches!(flag_elem, ElemType::Float(_)))
        .then_some((s, d, f, elem, flag_elem))
}

/// One element per thread; every thread reads the flag (one cached element). The kernel is
/// compiled without fast-math, so the comparisons keep NaN's meaning.
#[cube(launch_unchecked, address_type = "dynamic")]
fn guarded_copy<T: Numeric, F: Float>(
    src: &Tensor<T>,
    dst: &mut Tensor<T>,
    flag: &Tensor<F>,
    total: usize,
    #[define(T)] _elem: ElemType,
    #[define(F)] _flag_elem: ElemType,
) {
    let pos = ABSOLUTE_POS;
    if pos >= total {
        terminate!();
    }
    let f = flag[0];
    // False for NaN (every comparison with it is) and for either infinity.
    if f >= F::min_value() && f <= F::max_value() {
        dst[pos] = src[pos];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Precision;
    use engine_graph::{HostData, HostTensor};

    /// A finite flag copies every element (floats, integers, a scalar); NaN and either
    /// infinity copy none; a flag on the CPU or values of two shapes are refused.
    #[test]
    fn the_copy_happens_only_under_a_finite_flag() {
        for (name, dev) in crate::device::test_devices() {
            let put = |t: HostTensor| Value::from_host(&t, &dev, Precision::F32);
            let flag = |x: f32| match put(HostTensor::f32(vec![3], vec![x, 0.0, 0.0]).unwrap()) {
                Value::Float(t) => t,
                _ => unreachable!(),
            };
            let cases = [
                (
                    HostTensor::f32(vec![1000], (0..1000).map(|i| i as f32).collect()).unwrap(),
                    HostTensor::f32(vec![1000], vec![-1.0; 1000]).unwrap(),
                ),
                (
                    HostTensor::new(vec![3], HostData::I64(vec![7, 8, 9])).unwrap(),
                    HostTensor::new(vec![3], HostData::I64(vec![0; 3])).unwrap(),
                ),
                (HostTensor::scalar_f32(2.5), HostTensor::scalar_f32(-1.0)),
            ];
            for (src, dst) in cases {
                for (x, copies) in [
                    (1.5, true),
                    (f32::NAN, false),
                    (f32::INFINITY, false),
                    (f32::NEG_INFINITY, false),
                    (f32::MAX, true),
                ] {
                    let (s, d) = (put(src.clone()), put(dst.clone()));
                    assert!(copy_if_finite(&s, &d, &flag(x)), "{name}: {x}");
                    let got = d.to_host().unwrap();
                    assert_eq!(got, if copies { src.clone() } else { dst.clone() }, "{name}: flag {x}");
                }
            }
            let (s, d) = (
                put(HostTensor::f32(vec![2], vec![1.0, 2.0]).unwrap()),
                put(HostTensor::f32(vec![3], vec![0.0; 3]).unwrap()),
            );
            assert!(!copy_if_finite(&s, &d, &flag(1.0)), "{name}: shapes differ");
            let cpu = match Value::from_host(
                &HostTensor::f32(vec![1], vec![1.0]).unwrap(),
                crate::Device::cpu().dispatch(),
                Precision::F32,
            ) {
                Value::Float(t) => t,
                _ => unreachable!(),
            };
            let d = put(HostTensor::f32(vec![2], vec![0.0; 2]).unwrap());
            let s = put(HostTensor::f32(vec![2], vec![1.0, 2.0]).unwrap());
            assert!(!copy_if_finite(&s, &d, &cpu), "{name}: a flag on the CPU");
        }
    }
}
