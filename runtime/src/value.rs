//! Values flowing through the executor: device tensors tagged with the graph's dtype.

use crate::{Result, RuntimeError};
use burn::backend::ops::{BoolTensorOps, FloatTensorOps, IntTensorOps};
use burn::backend::{Dispatch, DispatchDevice, DispatchTensor, TensorMetadata, read_sync};
use burn::tensor::{BoolStore, FloatDType, Shape as BurnShape, TensorData};
use engine_graph::{DType, HostData, HostTensor};

pub(crate) type B = Dispatch;
pub(crate) type T = DispatchTensor;

/// The precision floats are computed in. The graph says `F32`; gradient checks run the same
/// graph in `F64` to separate rule errors from rounding. A spec's `run_config.precision`
/// is this type. On `cuda`, `F32` products and convolutions run on TF32 tensor cores:
/// cubek stages every accelerated f32 matmul as TF32, and burn has no switch for it.
///
/// `Bf16Mixed` is mixed precision as `torch.autocast(dtype=torch.bfloat16)` and Keras's
/// `mixed_bfloat16` have it for the ops that carry a step's arithmetic: matrix products,
/// convolutions (forward and both gradients) and attention's products take bfloat16
/// operands, accumulate in f32 inside the kernel, and round their result to bfloat16.
/// Everything else stays f32: variables (the master weights), optimizer slots, the loss,
/// normalization statistics, softmax and the numerics checks. bfloat16 keeps f32's
/// exponent range, so no loss scaling is needed. On `cuda` the products run on bf16 tensor
/// cores; a device without bf16 arithmetic refuses the precision when the step is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
pub enum Precision {
    #[default]
    F32,
    F64,
    Bf16Mixed,
}

impl Precision {
    /// The dtype values are stored and computed in between contractions.
    pub(crate) fn dtype(self) -> FloatDType {
        match self {
            Precision::F32 | Precision::Bf16Mixed => FloatDType::F32,
            Precision::F64 => FloatDType::F64,
        }
    }

    /// The dtype contractions (products, convolutions) take their operands in, where it
    /// differs from [`Self::dtype`].
    pub(crate) fn contraction_dtype(self) -> Option<FloatDType> {
        match self {
            Precision::Bf16Mixed => Some(FloatDType::BF16),
            Precision::F32 | Precision::F64 => None,
        }
    }

    /// Whether this precision computes `op` with narrowed operands (`Bf16Mixed`'s
    /// contractions), for `engine plan` to say which ops do.
    pub fn narrows(self, op: &engine_graph::Op) -> bool {
        self.contraction_dtype().is_some() && crate::kernels::autocast::contracts(op)
    }

    /// Whether values are f64 (gradient checks) rather than f32.
    pub(crate) fn is_f64(self) -> bool {
        self == Precision::F64
    }

    /// Bytes per float value.
    pub(crate) fn float_bytes(self) -> u64 {
        if self.is_f64() { 8 } else { 4 }
    }
}

#[derive(Clone, Debug)]
pub enum Value {
    Float(T),
    Int(T),
    Bool(T),
    /// What ops without a meaningful output (a train op's group) produce.
    Unit,
}

impl Value {
    pub fn dtype(&self) -> Option<DType> {
        match self {
            Value::Float(_) => Some(DType::F32),
            Value::Int(_) => Some(DType::I64),
            Value::Bool(_) => Some(DType::Bool),
            Value::Unit => None,
        }
    }

    pub fn shape(&self) -> Vec<usize> {
        match self {
            Value::Float(t) | Value::Int(t) | Value::Bool(t) => t.shape().to_vec(),
            Value::Unit => Vec::new(),
        }
    }

    /// Uploads a host tensor, computing floats in `precision`.
    pub fn from_host(t: &HostTensor, device: &DispatchDevice, precision: Precision) -> Value {
        let (data, scalar) = host_data(t, device, precision);
        let value = match &t.data {
            HostData::F32(_) => Value::Float(B::float_from_data(data, device)),
            HostData::I64(_) => Value::Int(B::int_from_data(data, device)),
            HostData::Bool(_) => Value::Bool(B::bool_from_data(data, device)),
        };
        if scalar { value.reshaped(&[]) } else { value }
    }

    /// The device tensor, for every value but `Unit`.
    pub(crate) fn tensor(&self) -> Option<&T> {
        match self {
            Value::Float(t) | Value::Int(t) | Value::Bool(t) => Some(t),
            Value::Unit => None,
        }
    }

    /// The same elements under another shape (a view where the backend allows).
    pub(crate) fn reshaped(self, dims: &[usize]) -> Value {
        let shape = BurnShape::from(dims.to_vec());
        match self {
            Value::Float(t) => Value::Float(B::float_reshape(t, shape)),
            Value::Int(t) => Value::Int(B::int_reshape(t, shape)),
            Value::Bool(t) => Value::Bool(B::bool_reshape(t, shape)),
            Value::Unit => Value::Unit,
        }
    }

    /// Uploads float data given in f64 (gradient checks perturb inputs without rounding).
    pub fn from_f64(shape: &[usize], data: Vec<f64>, device: &DispatchDevice, precision: Precision) -> Value {
        Value::Float(float_from_f64(shape, data, device, precision))
    }

    /// Uploads f32 data computed in f32: the all-reduce kernel's way back, without
    /// widening to f64.
    pub(crate) fn from_f32(shape: &[usize], data: Vec<f32>, device: &DispatchDevice) -> Value {
        let (upload, scalar) = upload_shape(shape, device);
        let value = Value::Float(B::float_from_data(TensorData::new(data, upload), device));
        if scalar { value.reshaped(&[]) } else { value }
    }

    /// The elements of a float value as f32 (a copy; no f64 detour for f32 tensors).
    pub(crate) fn to_f32_vec(&self) -> Result<Vec<f32>> {
        match self {
            Value::Float(t) => {
                read(t, B::float_into_data(readable_float(t)))?.convert::<f32>().try_into_vec::<f32>().map_err(read_err)
            }
            other => Ok(other.to_host()?.to_f64_vec().into_iter().map(|x| x as f32).collect()),
        }
    }

    /// Reads the value back to the host (floats as f32, whatever the precision).
    pub fn to_host(&self) -> Result<HostTensor> {
        let shape = self.shape();
        let data = match self {
            Value::Float(t) => HostData::F32(
                read(t, B::float_into_data(readable_float(t)))?
                    .convert::<f32>()
                    .try_into_vec::<f32>()
                    .map_err(read_err)?,
            ),
            Value::Int(t) => HostData::I64(
                read(t, B::int_into_data(readable(t, B::int_reshape)))?
                    .convert::<i64>()
                    .try_into_vec::<i64>()
                    .map_err(read_err)?,
            ),
            Value::Bool(t) => HostData::Bool(
                read(t, B::bool_into_data(readable(t, B::bool_reshape)))?.try_into_vec::<bool>().map_err(read_err)?,
            ),
            Value::Unit => HostData::Bool(vec![true]),
        };
        Ok(HostTensor::new(if matches!(self, Value::Unit) { vec![] } else { shape }, data)?)
    }

    /// Every element as f64, without rounding through f32 (gradient checks).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        match self {
            Value::Float(t) => {
                read(t, B::float_into_data(readable_float(t)))?.convert::<f64>().try_into_vec::<f64>().map_err(read_err)
            }
            other => Ok(other.to_host()?.to_f64_vec()),
        }
    }
}

/// A host tensor as `from_host` uploads it to `device`, and whether it is a scalar sent
/// as one element.
pub(crate) fn host_data(t: &HostTensor, device: &DispatchDevice, precision: Precision) -> (TensorData, bool) {
    let (shape, scalar) = upload_shape(&t.shape, device);
    let data = match &t.data {
        HostData::F32(v) => match precision {
            Precision::F32 | Precision::Bf16Mixed => TensorData::new(v.clone(), shape),
            Precision::F64 => TensorData::new(v.iter().map(|&x| x as f64).collect::<Vec<f64>>(), shape),
        },
        HostData::I64(v) => TensorData::new(v.clone(), shape),
        HostData::Bool(v) => bool_data(v, shape, device),
    };
    (data, scalar)
}

/// A clone of `t` that the backend can read back: cubecl 0.11 cannot read a rank-0 buffer
/// either (the same stride underflow), so a scalar is read as one element.
fn readable(t: &T, reshape: fn(T, BurnShape) -> T) -> T {
    if t.shape().num_dims() == 0 && !matches!(t.device(), DispatchDevice::Flex(_)) {
        reshape(t.clone(), BurnShape::new([1]))
    } else {
        t.clone()
    }
}

fn readable_float(t: &T) -> T {
    readable(t, B::float_reshape)
}

/// Booleans as `device` stores them: cubecl's shaders have no bool buffers and take u8 or
/// u32 (its `bool_from_data` refuses native bools).
fn bool_data(v: &[bool], shape: BurnShape, device: &DispatchDevice) -> TensorData {
    let data = TensorData::new(v.to_vec(), shape);
    match burn::backend::get_device_settings::<B>(device).bool_dtype {
        BoolStore::Native => data,
        store => {
            let fallback = data.clone();
            data.try_cast(burn::tensor::DType::Bool(store)).unwrap_or(fallback)
        }
    }
}

/// A float tensor from f64 values, computed in `precision`.
pub(crate) fn float_from_f64(dims: &[usize], data: Vec<f64>, device: &DispatchDevice, precision: Precision) -> T {
    let (upload, scalar) = upload_shape(dims, device);
    let data = match precision {
        Precision::F32 | Precision::Bf16Mixed => {
            TensorData::new(data.iter().map(|&x| x as f32).collect::<Vec<f32>>(), upload)
        }
        Precision::F64 => TensorData::new(data, upload),
    };
    let t = B::float_from_data(data, device);
    if scalar { B::float_reshape(t, BurnShape::from(Vec::<usize>::new())) } else { t }
}

/// A float tensor's values, read back to the host: what kernel tests compare.
#[cfg(test)]
pub(crate) fn float_values(t: T) -> Vec<f64> {
    let data = burn::backend::read_sync(B::float_into_data(t)).expect("a tensor read back");
    data.convert::<f64>().try_into_vec::<f64>().expect("f64 values")
}

/// The shape to upload `dims` as, and whether it is a scalar to reshape on arrival:
/// cubecl 0.11 cannot allocate a rank-0 buffer (its contiguous strides underflow on an
/// empty shape and panic), so on its devices a scalar travels as one element.
pub(crate) fn upload_shape(dims: &[usize], device: &DispatchDevice) -> (BurnShape, bool) {
    let scalar = dims.is_empty() && !matches!(device, DispatchDevice::Flex(_));
    (BurnShape::from(if scalar { vec![1] } else { dims.to_vec() }), scalar)
}

/// Reads `t` back to the host through `data` (its `into_data`), counting the read when
/// `t` lives on a device.
fn read(
    t: &T,
    data: impl std::future::Future<Output = std::result::Result<TensorData, burn::backend::ExecutionError>>,
) -> Result<TensorData> {
    crate::device::count_read(t);
    read_sync(data).map_err(|e| RuntimeError::Read(format!("{e:?}")))
}

fn read_err(e: impl std::fmt::Debug) -> RuntimeError {
    RuntimeError::Read(format!("{e:?}"))
}
