//! `Functional`: named inputs and nodes; each node applies a layer to earlier values.

use super::{LowerError, build::Lowering, layers};
use crate::spec::{ErrorKind, FieldPath, Functional};
use engine_graph::{DType, Outlet, Shape};
use std::collections::{BTreeMap, HashMap};

pub(super) fn build(
    cx: &mut Lowering<'_, '_, '_>,
    f: &Functional,
) -> Result<(BTreeMap<String, Outlet>, Outlet, FieldPath), LowerError> {
    let path = FieldPath::root().field("model");
    // Names are validated unique and defined before use.
    let mut env: HashMap<&str, Outlet> = HashMap::new();
    let mut features = BTreeMap::new();
    for (name, shape) in &f.inputs {
        let at = path.field("inputs").key(name);
        let x = cx.input(name, f.inputs.len(), DType::F32, Shape::batched(shape), &at)?;
        cx.check_output(&at, x)?;
        features.insert(name.clone(), x);
        env.insert(name, x);
    }
    for (i, node) in f.nodes.iter().enumerate() {
        let at = path.field("nodes").index(i);
        let mut inputs = Vec::new();
        for (j, input) in node.inputs().iter().enumerate() {
            let outlet = env.get(input.as_str()).copied().ok_or_else(|| unknown(cx, &at.elem(2).index(j), input))?;
            inputs.push((input.clone(), outlet));
        }
        let out = layers::apply(cx, node.layer(), node.name(), &inputs, &at)?;
        env.insert(node.name(), out);
    }
    let out_path = path.field("outputs").index(0);
    let output = f.outputs.first().ok_or_else(|| unknown(cx, &out_path, ""))?;
    let logits = env.get(output.as_str()).copied().ok_or_else(|| unknown(cx, &out_path, output))?;
    Ok((features, logits, out_path))
}

/// Validation refuses unknown references; this only guards the lowering of an unvalidated spec.
fn unknown(cx: &Lowering<'_, '_, '_>, at: &FieldPath, name: &str) -> LowerError {
    LowerError::Spec(cx.spec_error(
        at,
        ErrorKind::UnknownName { what: "input or node".into(), name: name.to_string(), expected: Vec::new() },
    ))
}
