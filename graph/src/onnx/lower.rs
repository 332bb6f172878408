//! One engine node at a time into ONNX nodes.

use super::{
    IR_VERSION, OPSET, OnnxOptions,
    proto::{GraphProto, ModelProto, OperatorSetIdProto, StringStringEntryProto},
    writer::{Attr, Writer, elem_type, value_info},
};
use crate::{
    Dim, Graph, GraphError, HostData, HostTensor, Node, NodeId, Op, Outlet, Result,
    ops::{Conv2d, ElementOp, FusedActivation, FusedAttention, FusedNormalization, Normalization, Operand, Window},
};
use std::collections::{BTreeMap, HashMap};

/// NHWC to NCHW, and back.
const TO_NCHW: [i64; 4] = [0, 3, 1, 2];
const TO_NHWC: [i64; 4] = [0, 2, 3, 1];

pub(super) fn model(graph: &Graph, values: &BTreeMap<String, HostTensor>, options: &OnnxOptions) -> Result<ModelProto> {
    let mut cx = Lowering { g: graph, values, w: Writer::default(), names: HashMap::new(), nchw: HashMap::new() };
    let mut inputs = Vec::new();
    for (feed, o) in &graph.roles.inputs {
        let name = cx.w.fresh(feed);
        cx.names.insert(*o, name.clone());
        inputs.push(value_info(&name, graph.fact(*o)?));
    }
    let outputs: Vec<(String, Outlet)> = graph.roles.predictions.iter().map(|(k, o)| (cx.w.fresh(k), *o)).collect();
    if outputs.is_empty() {
        return Err(GraphError::invalid("ONNX export", "the graph has no predictions to export"));
    }
    for id in needed(graph)? {
        cx.lower(id)?;
    }
    let mut output_info = Vec::new();
    for (name, o) in outputs {
        let value = cx.name(o)?;
        cx.w.node_into("Identity", &name, vec![value], vec![name.clone()], vec![]);
        output_info.push(value_info(&name, graph.fact(o)?));
    }
    // A filter stored transposed for `Conv` leaves its HWIO original unread.
    let read: std::collections::HashSet<&String> = cx.w.nodes.iter().flat_map(|n| &n.input).collect();
    let initializer = cx.w.initializers.iter().filter(|t| read.contains(&t.name)).cloned().collect();
    let graph_proto = GraphProto {
        node: std::mem::take(&mut cx.w.nodes),
        name: if options.graph_name.is_empty() { "engine".into() } else { options.graph_name.clone() },
        initializer,
        input: inputs,
        output: output_info,
        ..Default::default()
    };
    Ok(ModelProto {
        ir_version: IR_VERSION,
        producer_name: "engine".into(),
        producer_version: options.producer_version.clone(),
        graph: Some(graph_proto),
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: OPSET }],
        metadata_props: options
            .metadata
            .iter()
            .map(|(k, v)| StringStringEntryProto { key: k.clone(), value: v.clone() })
            .collect(),
        ..Default::default()
    })
}

/// The nodes the predictions depend on, in topological order (nothing else is exported).
fn needed(g: &Graph) -> Result<Vec<NodeId>> {
    let mut keep = std::collections::HashSet::new();
    let mut stack: Vec<NodeId> = g.roles.predictions.values().map(|o| o.node).collect();
    while let Some(id) = stack.pop() {
        if keep.insert(id) {
            stack.extend(g.node(id).inputs.iter().map(|o| o.node));
        }
    }
    Ok(g.topological_order()?.into_iter().filter(|id| keep.contains(id)).collect())
}

struct Lowering<'a> {
    g: &'a Graph,
    values: &'a BTreeMap<String, HostTensor>,
    w: Writer,
    names: HashMap<Outlet, String>,
    /// NCHW copies of NHWC values, made once per value.
    nchw: HashMap<Outlet, String>,
}

impl Lowering<'_> {
    fn name(&self, o: Outlet) -> Result<String> {
        self.names.get(&o).cloned().ok_or_else(|| {
            let n = self.g.node(o.node);
            GraphError::invalid(
                format!("ONNX export of node '{}' ({})", n.name, n.op.name()),
                format!("its output {} has no ONNX form", o.output),
            )
        })
    }

    fn refuse(node: &Node, reason: &str) -> GraphError {
        GraphError::invalid(format!("ONNX export of node '{}' ({})", node.name, node.op.name()), reason)
    }

    fn lower(&mut self, id: NodeId) -> Result<()> {
        let node = self.g.node(id);
        if self.names.contains_key(&Outlet::new(id, 0)) {
            return Ok(()); // a graph input
        }
        let n = node.name.as_str();
        let ins: Vec<String> = match &node.op {
            Op::Variable(_) | Op::Constant(_) | Op::Placeholder(_) => Vec::new(),
            _ => node.inputs.iter().map(|o| self.name(*o)).collect::<Result<_>>()?,
        };
        let unary = |w: &mut Writer, op: &str| w.node(op, n, vec![ins[0].clone()], vec![]);
        let binary = |w: &mut Writer, op: &str| w.node(op, n, vec![ins[0].clone(), ins[1].clone()], vec![]);
        let out = match &node.op {
            Op::Placeholder(_) => return Err(Self::refuse(node, "a placeholder that is not an input of the graph")),
            Op::Variable(v) => {
                let value =
                    self.values.get(n).ok_or_else(|| Self::refuse(node, "no value was given for this variable"))?;
                if value.shape != v.shape {
                    return Err(Self::refuse(
                        node,
                        &format!("its value has shape {:?}, the variable {:?}", value.shape, v.shape),
                    ));
                }
                self.w.initializer(n, value)
            }
            Op::Constant(c) => self.w.initializer(n, &c.value),
            Op::MatMul(m) => self.matmul(node, &ins, m.transpose_a, m.transpose_b, None)?,
            Op::FusedMatMul(m) => {
                let y = self.matmul(node, &ins, m.transpose_a, m.transpose_b, Some(ins[2].clone()))?;
                self.activation(n, y, m.activation)
            }
            Op::Add(_) => binary(&mut self.w, "Add"),
            Op::Sub(_) => binary(&mut self.w, "Sub"),
            Op::Mul(_) => binary(&mut self.w, "Mul"),
            Op::Div(_) => binary(&mut self.w, "Div"),
            Op::Maximum(_) => binary(&mut self.w, "Max"),
            Op::Minimum(_) => binary(&mut self.w, "Min"),
            Op::AddN(_) => self.w.node("Sum", n, ins.clone(), vec![]),
            Op::Neg(_) => unary(&mut self.w, "Neg"),
            Op::Exp(_) => unary(&mut self.w, "Exp"),
            Op::Log(_) => unary(&mut self.w, "Log"),
            Op::Sqrt(_) => unary(&mut self.w, "Sqrt"),
            Op::Erf(_) => unary(&mut self.w, "Erf"),
            Op::Cos(_) => unary(&mut self.w, "Cos"),
            Op::Sin(_) => unary(&mut self.w, "Sin"),
            Op::Square(_) => self.w.node("Mul", n, vec![ins[0].clone(), ins[0].clone()], vec![]),
            Op::Relu(_) => unary(&mut self.w, "Relu"),
            Op::Sigmoid(_) => unary(&mut self.w, "Sigmoid"),
            Op::Tanh(_) => unary(&mut self.w, "Tanh"),
            Op::Softmax(s) => self.w.node("Softmax", n, ins.clone(), vec![("axis", Attr::Int(s.axis as i64))]),
            Op::LogSoftmax(s) => self.w.node("LogSoftmax", n, ins.clone(), vec![("axis", Attr::Int(s.axis as i64))]),
            Op::ReduceSum(r) => {
                let axes = self.w.ints(&format!("{n}/axes"), &r.axes.iter().map(|a| *a as i64).collect::<Vec<_>>());
                let keep = Attr::Int(i64::from(r.keep_dims));
                self.w.node("ReduceSum", n, vec![ins[0].clone(), axes], vec![("keepdims", keep)])
            }
            Op::ReduceMean(r) => self.reduce_attr(n, "ReduceMean", &ins[0], &r.axes, r.keep_dims),
            Op::ReduceMax(r) => self.reduce_attr(n, "ReduceMax", &ins[0], &r.axes, r.keep_dims),
            Op::Reshape(r) => {
                let shape = self.batch_as_minus_one(node, r.shape.dims())?;
                let shape = self.w.ints(&format!("{n}/shape"), &shape);
                self.w.node("Reshape", n, vec![ins[0].clone(), shape], vec![])
            }
            Op::Transpose(t) => self.w.node("Transpose", n, ins.clone(), vec![("perm", Attr::Ints(ints(&t.perm)))]),
            Op::Concat(c) => self.w.node("Concat", n, ins.clone(), vec![("axis", Attr::Int(c.axis as i64))]),
            Op::Gather(_) => self.w.node("Gather", n, ins.clone(), vec![("axis", Attr::Int(0))]),
            Op::Slice(s) => {
                let starts: Vec<i64> = ints(&s.begin);
                let ends: Vec<i64> =
                    s.begin.iter().zip(&s.size).map(|(b, z)| z.map_or(i64::MAX, |z| (b + z) as i64)).collect();
                let axes: Vec<i64> = (0..starts.len() as i64).collect();
                let args = vec![
                    ins[0].clone(),
                    self.w.ints(&format!("{n}/starts"), &starts),
                    self.w.ints(&format!("{n}/ends"), &ends),
                    self.w.ints(&format!("{n}/axes"), &axes),
                ];
                self.w.node("Slice", n, args, vec![])
            }
            Op::Pad(p) => {
                let mut pads: Vec<i64> = p.pads.iter().map(|(b, _)| *b as i64).collect();
                pads.extend(p.pads.iter().map(|(_, a)| *a as i64));
                let pads = self.w.ints(&format!("{n}/pads"), &pads);
                self.w.node("Pad", n, vec![ins[0].clone(), pads], vec![])
            }
            Op::Conv2d(c) => {
                let (y, _) = self.conv(node, c, None)?;
                self.back_to_nhwc(n, y)
            }
            Op::FusedConv2d(c) if c.residual => {
                // The addend is NHWC: the sum is taken after the convolution's transpose back.
                let (y, _) = self.conv(node, &Conv2d::plain(c.strides, c.padding), Some(ins[2].clone()))?;
                let y = self.back_to_nhwc(n, y);
                let y = self.w.node("Add", n, vec![y, ins[3].clone()], vec![]);
                self.activation(n, y, c.activation)
            }
            Op::FusedConv2d(c) => {
                let (y, _) = self.conv(node, &Conv2d::plain(c.strides, c.padding), Some(ins[2].clone()))?;
                let y = self.activation(n, y, c.activation);
                self.back_to_nhwc(n, y)
            }
            Op::FusedConv2dMaxPool(c) => {
                self.only_first_output_used(id)?;
                let (y, conv_hw) = self.conv(node, &Conv2d::plain(c.strides, c.padding), Some(ins[2].clone()))?;
                let y = match node.inputs.get(3).filter(|_| c.residual) {
                    // The addend is NHWC: summed in the convolution's NCHW.
                    Some(&skip) => {
                        let skip = self.nchw_of(skip)?;
                        self.w.node("Add", n, vec![y, skip], vec![])
                    }
                    None => y,
                };
                let y = self.activation(n, y, c.activation);
                let y = self.pool(n, "MaxPool", y, &c.pool, conv_hw)?;
                self.back_to_nhwc(n, y)
            }
            Op::MaxPool2d(p) => {
                self.only_first_output_used(id)?;
                let x = self.nchw_of(node.inputs[0])?;
                let hw = spatial_of(self.g, node.inputs[0])?;
                let y = self.pool(n, "MaxPool", x, &p.window, hw)?;
                self.back_to_nhwc(n, y)
            }
            Op::AvgPool2d(p) => {
                let x = self.nchw_of(node.inputs[0])?;
                let hw = spatial_of(self.g, node.inputs[0])?;
                let y = self.pool(n, "AveragePool", x, &p.window, hw)?;
                self.back_to_nhwc(n, y)
            }
            Op::FusedElementwise(f) => {
                let temps = self.elementwise(n, &f.program, &ins);
                for (j, t) in f.output_temps().enumerate().skip(1) {
                    self.names.insert(Outlet::new(id, j), temps.get(t).cloned().unwrap_or_default());
                }
                temps.last().cloned().unwrap_or_default()
            }
            Op::ArgMax(a) => self.w.node(
                "ArgMax",
                n,
                ins.clone(),
                vec![("axis", Attr::Int(a.axis as i64)), ("keepdims", Attr::Int(0))],
            ),
            Op::Cast(c) => self.w.node("Cast", n, ins.clone(), vec![("to", Attr::Int(elem_type(c.to) as i64))]),
            Op::Equal(_) => binary(&mut self.w, "Equal"),
            Op::Less(_) => binary(&mut self.w, "Less"),
            Op::Greater(_) => binary(&mut self.w, "Greater"),
            Op::Select(_) => self.w.node("Where", n, ins.clone(), vec![]),
            // Identities at inference: a numerics check passes a finite value through, a
            // transfer only moves it.
            Op::CheckNumerics(_) | Op::Transfer(_) => unary(&mut self.w, "Identity"),
            Op::FusedNormalization(f) if f.kind == Normalization::Layer => self.layer_norm(id, f, &ins)?,
            Op::FusedAttention(a) => self.attention(id, a, &ins)?,
            Op::Dropout(_) => {
                return Err(Self::refuse(
                    node,
                    "dropout in an inference graph (a model function adds it in training mode only)",
                ));
            }
            other => {
                return Err(Self::refuse(node, &format!("{} has no ONNX form in an inference graph", other.name())));
            }
        };
        self.names.insert(Outlet::new(id, 0), out);
        Ok(())
    }

    /// Opset 17's `LayerNormalization` over the last axis (its scale is not optional).
    fn layer_norm(&mut self, id: NodeId, f: &FusedNormalization, ins: &[String]) -> Result<String> {
        let node = self.g.node(id);
        if (1..3).any(|i| !self.g.outlet_consumers(Outlet::new(id, i)).is_empty()) {
            return Err(Self::refuse(node, "its statistics are read, which only training graphs do"));
        }
        let mut inputs = vec![ins[0].clone()];
        if f.scale {
            inputs.push(ins[1].clone());
        } else {
            let c = self.g.fact(node.inputs[0])?.shape.dims().last().and_then(|d| d.known()).unwrap_or(0);
            let ones = HostTensor::f32(vec![c], vec![1.0; c])?;
            inputs.push(self.w.initializer(&format!("{}/ones", node.name), &ones));
        }
        if f.center {
            inputs.push(ins[ins.len() - 1].clone());
        }
        let attrs = vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(f.epsilon))];
        Ok(self.w.node("LayerNormalization", &node.name, inputs, attrs))
    }

    /// The attention as the layer wrote it (opset 17 has no attention op): each projection
    /// split into heads (`[N, T, H, D]`, then `[N, H, T, D]`), the scaled scores, the
    /// softmax, the weighted sum, merged back to `[N, T, H*D]`.
    fn attention(&mut self, id: NodeId, a: &FusedAttention, ins: &[String]) -> Result<String> {
        let node = self.g.node(id);
        if a.dropout.is_some() {
            return Err(Self::refuse(node, "dropout in an inference graph (training graphs only have it)"));
        }
        if !self.g.outlet_consumers(Outlet::new(id, 1)).is_empty() {
            return Err(Self::refuse(node, "its weights are read, which only training graphs do"));
        }
        let facts: Vec<_> = node.inputs.iter().map(|o| self.g.fact(*o).cloned()).collect::<Result<_>>()?;
        let d = FusedAttention::dims(a.heads, &facts[0], &facts[1], &facts[2]).map_err(|e| Self::refuse(node, &e))?;
        let n = node.name.as_str();
        let h = a.heads as i64;
        let split = |w: &mut Writer, x: &str, tag: &str, t: usize, dim: usize, perm: [i64; 4]| {
            let shape = w.ints(&format!("{n}/{tag}/shape"), &[0, t as i64, h, dim as i64]);
            let r = w.node("Reshape", &format!("{n}/{tag}"), vec![x.to_string(), shape], vec![]);
            w.node("Transpose", &format!("{n}/{tag}/T"), vec![r], vec![("perm", Attr::Ints(perm.to_vec()))])
        };
        let q = split(&mut self.w, &ins[0], "query", d.tq, d.dk, [0, 2, 1, 3]);
        let kt = split(&mut self.w, &ins[1], "key", d.tk, d.dk, [0, 2, 3, 1]);
        let v = split(&mut self.w, &ins[2], "value", d.tk, d.dv, [0, 2, 1, 3]);
        let scale = HostTensor::f32(vec![1], vec![a.scale])?;
        let scale = self.w.initializer(&format!("{n}/scale"), &scale);
        let q = self.w.node("Mul", &format!("{n}/scaled"), vec![q, scale], vec![]);
        let scores = self.w.node("MatMul", &format!("{n}/scores"), vec![q, kt], vec![]);
        let weights = self.w.node("Softmax", &format!("{n}/weights"), vec![scores], vec![("axis", Attr::Int(-1))]);
        let heads = self.w.node("MatMul", &format!("{n}/heads"), vec![weights, v], vec![]);
        let perm = Attr::Ints(vec![0, 2, 1, 3]);
        let merged = self.w.node("Transpose", &format!("{n}/merge"), vec![heads], vec![("perm", perm)]);
        let shape = self.w.ints(&format!("{n}/shape"), &[0, d.tq as i64, (d.heads * d.dv) as i64]);
        Ok(self.w.node("Reshape", n, vec![merged, shape], vec![]))
    }

    fn only_first_output_used(&self, id: NodeId) -> Result<()> {
        if self.g.outlet_consumers(Outlet::new(id, 1)).is_empty() {
            Ok(())
        } else {
            Err(Self::refuse(self.g.node(id), "its argmax output is read, which only training graphs do"))
        }
    }

    /// Reduce ops whose axes are an attribute in opset 17.
    fn reduce_attr(&mut self, n: &str, op: &str, x: &str, axes: &[usize], keep: bool) -> String {
        self.w.node(
            op,
            n,
            vec![x.to_string()],
            vec![("axes", Attr::Ints(ints(axes))), ("keepdims", Attr::Int(i64::from(keep)))],
        )
    }

    fn batch_as_minus_one(&self, node: &Node, dims: &[Dim]) -> Result<Vec<i64>> {
        if dims.iter().filter(|d| d.is_batch()).count() > 1 {
            return Err(Self::refuse(node, "a target shape with more than one batch-sized dimension"));
        }
        Ok(dims.iter().map(|d| d.known().map_or(-1, |k| k as i64)).collect())
    }

    fn matmul(&mut self, node: &Node, ins: &[String], ta: bool, tb: bool, bias: Option<String>) -> Result<String> {
        let n = node.name.as_str();
        let (ra, rb) = (self.g.fact(node.inputs[0])?.rank(), self.g.fact(node.inputs[1])?.rank());
        if ra == 2 && rb == 2 {
            let mut args = vec![ins[0].clone(), ins[1].clone()];
            args.extend(bias);
            let attrs = vec![("transA", Attr::Int(i64::from(ta))), ("transB", Attr::Int(i64::from(tb)))];
            return Ok(self.w.node("Gemm", n, args, attrs));
        }
        let swap_last = |w: &mut Writer, x: &str, rank: usize| {
            let mut perm: Vec<i64> = (0..rank as i64).collect();
            perm.swap(rank - 2, rank - 1);
            w.node("Transpose", &format!("{n}/T"), vec![x.to_string()], vec![("perm", Attr::Ints(perm))])
        };
        let a = if ta { swap_last(&mut self.w, &ins[0], ra) } else { ins[0].clone() };
        let b = if tb { swap_last(&mut self.w, &ins[1], rb) } else { ins[1].clone() };
        let y = self.w.node("MatMul", n, vec![a, b], vec![]);
        Ok(match bias {
            Some(c) => self.w.node("Add", n, vec![y, c], vec![]),
            None => y,
        })
    }

    fn activation(&mut self, n: &str, y: String, a: FusedActivation) -> String {
        match a {
            FusedActivation::Linear => y,
            FusedActivation::Relu => self.w.node("Relu", n, vec![y], vec![]),
        }
    }

    fn nchw_of(&mut self, o: Outlet) -> Result<String> {
        if let Some(v) = self.nchw.get(&o) {
            return Ok(v.clone());
        }
        let x = self.name(o)?;
        let v =
            self.w.node("Transpose", &format!("{x}/nchw"), vec![x.clone()], vec![("perm", Attr::Ints(TO_NCHW.into()))]);
        self.nchw.insert(o, v.clone());
        Ok(v)
    }

    fn back_to_nhwc(&mut self, n: &str, y: String) -> String {
        self.w.node("Transpose", n, vec![y], vec![("perm", Attr::Ints(TO_NHWC.into()))])
    }

    /// `Conv` in NCHW and the spatial size of its result; the HWIO filter becomes an OIHW
    /// initializer when it is a stored value.
    fn conv(&mut self, node: &Node, c: &Conv2d, bias: Option<String>) -> Result<(String, [usize; 2])> {
        let n = node.name.as_str();
        let x = self.nchw_of(node.inputs[0])?;
        let filter = self.g.fact(node.inputs[1])?;
        let k: Vec<usize> = filter.shape.dims().iter().map(|d| d.known().unwrap_or(0)).collect();
        let stored = match &self.g.node(node.inputs[1].node).op {
            Op::Variable(_) => self.values.get(&self.g.node(node.inputs[1].node).name),
            Op::Constant(c) => Some(&c.value),
            _ => None,
        };
        let w = match stored {
            Some(t) => {
                let oihw =
                    hwio_to_oihw(t).ok_or_else(|| Self::refuse(node, "a filter that is not f32[h, w, in, out]"))?;
                self.w.initializer(&format!("{}/oihw", self.g.node(node.inputs[1].node).name), &oihw)
            }
            None => {
                let f = self.name(node.inputs[1])?;
                self.w.node("Transpose", &format!("{n}/oihw"), vec![f], vec![("perm", Attr::Ints(vec![3, 2, 0, 1]))])
            }
        };
        let hw = spatial_of(self.g, node.inputs[0])?;
        let (out_hw, pads) = c.window([k[0], k[1]]).output(hw).map_err(|e| Self::refuse(node, &e))?;
        let mut args = vec![x, w];
        args.extend(bias);
        let attrs = vec![
            ("kernel_shape", Attr::Ints(vec![k[0] as i64, k[1] as i64])),
            ("strides", Attr::Ints(ints(&c.strides))),
            ("pads", Attr::Ints(onnx_pads(pads))),
            ("dilations", Attr::Ints(ints(&c.dilation))),
            ("group", Attr::Int(c.groups as i64)),
        ];
        Ok((self.w.node("Conv", n, args, attrs), out_hw))
    }

    fn pool(&mut self, n: &str, op: &str, x: String, window: &Window, hw: [usize; 2]) -> Result<String> {
        let (_, pads) = window.output(hw).map_err(|e| GraphError::invalid(format!("ONNX export of node '{n}'"), e))?;
        let mut attrs = vec![
            ("kernel_shape", Attr::Ints(ints(&window.kernel))),
            ("strides", Attr::Ints(ints(&window.strides))),
            ("pads", Attr::Ints(onnx_pads(pads))),
        ];
        if op == "AveragePool" {
            // TensorFlow's SAME average divides by the window's elements inside the input.
            attrs.push(("count_include_pad", Attr::Int(0)));
        }
        Ok(self.w.node(op, n, vec![x], attrs))
    }

    /// Every instruction's result, in order: the last is output 0, the side outputs name
    /// others.
    fn elementwise(&mut self, n: &str, program: &[crate::ops::Instr], ins: &[String]) -> Vec<String> {
        let mut temps: Vec<String> = Vec::new();
        for ins_ in program {
            let arg = |a: Operand| match a {
                Operand::Input(k) => ins[k].clone(),
                Operand::Temp(t) => temps[t].clone(),
            };
            let (a, b) = (arg(ins_.args[0]), ins_.args.get(1).map(|x| x.to_owned()));
            let two = |op: &str, w: &mut Writer, b: Option<Operand>| {
                let b = b.map(arg).unwrap_or_default();
                w.node(op, n, vec![a.clone(), b], vec![])
            };
            let y = match ins_.op {
                ElementOp::Add => two("Add", &mut self.w, b),
                ElementOp::Sub => two("Sub", &mut self.w, b),
                ElementOp::Mul => two("Mul", &mut self.w, b),
                ElementOp::Div => two("Div", &mut self.w, b),
                ElementOp::Maximum => two("Max", &mut self.w, b),
                ElementOp::Minimum => two("Min", &mut self.w, b),
                ElementOp::Neg => self.w.node("Neg", n, vec![a], vec![]),
                ElementOp::Exp => self.w.node("Exp", n, vec![a], vec![]),
                ElementOp::Log => self.w.node("Log", n, vec![a], vec![]),
                ElementOp::Sqrt => self.w.node("Sqrt", n, vec![a], vec![]),
                ElementOp::Square => self.w.node("Mul", n, vec![a.clone(), a], vec![]),
                ElementOp::Relu => self.w.node("Relu", n, vec![a], vec![]),
                ElementOp::ReluGrad => {
                    // dy where y > 0: Where(Greater(y, 0), dy, 0).
                    let zero = self.w.initializer(&format!("{n}/zero"), &scalar(0.0));
                    let pos = self.w.node("Greater", n, vec![a, zero.clone()], vec![]);
                    let dy = b.map(arg).unwrap_or_default();
                    self.w.node("Where", n, vec![pos, dy, zero], vec![])
                }
            };
            temps.push(y);
        }
        temps
    }
}

fn scalar(x: f32) -> HostTensor {
    HostTensor { shape: vec![], data: HostData::F32(vec![x]) }
}

fn ints(v: &[usize]) -> Vec<i64> {
    v.iter().map(|x| *x as i64).collect()
}

/// `[top, bottom, left, right]` to ONNX's `[top, left, bottom, right]`.
fn onnx_pads(p: [usize; 4]) -> Vec<i64> {
    vec![p[0] as i64, p[2] as i64, p[1] as i64, p[3] as i64]
}

fn spatial_of(g: &Graph, o: Outlet) -> Result<[usize; 2]> {
    crate::ops::nn::padding::spatial(g.fact(o)?, "the input").map_err(|e| GraphError::invalid("ONNX export", e))
}

/// HWIO filter values as OIHW.
fn hwio_to_oihw(t: &HostTensor) -> Option<HostTensor> {
    let HostData::F32(v) = &t.data else { return None };
    let [h, w, i, o] = t.shape[..] else { return None };
    let mut out = vec![0.0f32; v.len()];
    for y in 0..h {
        for x in 0..w {
            for c in 0..i {
                for k in 0..o {
                    out[((k * i + c) * h + y) * w + x] = v[((y * w + x) * i + c) * o + k];
                }
            }
        }
    }
    Some(HostTensor { shape: vec![o, i, h, w], data: HostData::F32(out) })
}
