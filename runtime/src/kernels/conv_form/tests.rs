use super::*;
use crate::Precision;
use crate::kernels::{Memo, conv};
use crate::value::{float_from_f64, float_values};
use burn::backend::ops::{ConvOptions, ModuleOps};
use burn::backend::{FlexDevice, TensorMetadata};
use engine_graph::ops::{Conv2d, Conv2dBackpropFilter, Conv2dBackpropInput, Padding};
use engine_graph::{Node, Op};
use std::cell::RefCell;

fn node(op: Op) -> Node {
    Node { name: "conv".into(), op, inputs: vec![], outputs: vec![], placement: None }
}

fn ctx<'a>(node: &'a Node, device: &'a DispatchDevice, memo: &'a Memo, recording: bool) -> KernelCtx<'a> {
    KernelCtx {
        node,
        device,
        precision: Precision::F32,
        batch: None,
        step: 0,
        replica: 0,
        native: false,
        collective: None,
        max_buffer: None,
        memo,
        seed: None,
        recording,
        verdict: None,
    }
}

fn tensor(dims: &[usize], seed: u64, device: &DispatchDevice) -> T {
    let n: usize = dims.iter().product();
    let data = (0..n as u64).map(|i| (((i * 2_654_435_761 + seed * 97) % 1000) as f64 / 500.0) - 1.0).collect();
    float_from_f64(dims, data, device, Precision::F32)
}

/// flex, then each device of `ENGINE_TEST_DEVICES`, the devices' turn held while iterated
/// (the forms are timed, and another test's kernels would be timed with them).
fn devices() -> impl Iterator<Item = (String, DispatchDevice)> {
    let flex = ("flex".to_string(), DispatchDevice::Flex(FlexDevice));
    std::iter::once(flex).chain(crate::device::test_devices())
}

/// A real convolution in NCHW, big enough to take a measurable time on any device.
fn direct(device: &DispatchDevice) -> T {
    let x = tensor(&[8, 16, 32, 32], 1, device);
    let w = tensor(&[16, 16, 3, 3], 2, device);
    let opts = ConvOptions { stride: [1, 1], padding: [(1, 1), (1, 1)], dilation: [1, 1], groups: 1 };
    B::conv2d(x, w, None, opts)
}

/// Whether two results are equal to the bit (a mismatch's values would fill the log).
fn same(a: &T, b: &T) -> bool {
    float_values(a.clone()) == float_values(b.clone())
}

fn pass(key: &str) -> Pass {
    Pass { key: key.into(), gemm: true, implicit: true, outputs: 1, depth: 1 }
}

/// The rule as the H200 measured it: long sums and passes with few outputs run as GEMMs,
/// short sums over many outputs as direct kernels; the levers force a form, keep the
/// rule or move its bound, and a malformed lever keeps the default.
#[test]
fn the_levers_choose_measuring_a_rule_or_one_form() {
    let auto = Levers::read(None, None);
    assert_eq!(auto, Levers { choice: Choice::Measure, min_depth: GEMM_MIN_DEPTH });
    assert_eq!(Levers::read(Some("auto"), None), auto);
    assert_eq!(Levers::read(Some("fastest"), Some("deep")), auto);
    assert_eq!(Levers::read(Some("rules"), None).choice, Choice::Rules);
    for form in Form::ALL {
        assert_eq!(Levers::read(Some(form.name()), None).choice, Choice::Forced(form));
    }
    let many = DIRECT_MIN_OUTPUTS * 4;
    // The residual model's first layer (3x3 over 1 channel, 9 products) at batch 256.
    assert_eq!(auto.rule(many, 9), Form::Direct);
    // The tutorial CNN's second layer (3x3 over 32 channels, 288) and VGG's (576, 1,152).
    assert_eq!((auto.rule(many, 288), auto.rule(many, 1152)), (Form::Gemm, Form::Gemm));
    assert_eq!((auto.rule(many, GEMM_MIN_DEPTH - 1), auto.rule(many, GEMM_MIN_DEPTH)), (Form::Direct, Form::Gemm));
    // A filter gradient: few outputs (a 3x3x32x64 filter), however short or long its sum.
    assert_eq!((auto.rule(3 * 3 * 32 * 64, 9), auto.rule(DIRECT_MIN_OUTPUTS - 1, 1)), (Form::Gemm, Form::Gemm));
    let shallow = Levers::read(Some("measure"), Some("16"));
    assert_eq!((shallow.rule(many, 16), shallow.rule(many, 15)), (Form::Gemm, Form::Direct));
}

/// On a device the fastest form that agrees with the direct kernel is kept, and later
/// passes of the same shape run it alone, recorded steps too; a faster form that disagrees
/// is never chosen. On flex, and in a recorded step of a shape not met before, the rule
/// runs and nothing is measured.
#[test]
fn a_device_keeps_the_fastest_form_that_agrees_with_the_direct_kernel() {
    let n = node(Op::Conv2d(Conv2d::plain([1, 1], Padding::Same)));
    let memo = Memo::default();
    let measure = Levers::read(Some("measure"), None);
    for (name, device) in devices() {
        let right = direct(&device);
        let wrong = B::float_add_scalar(right.clone(), 1.0.into());
        let ran = RefCell::new(Vec::new());
        // Instant answers beside a real kernel: the wrong one is the fastest form, the
        // right one the fastest that agrees.
        let forms = |implicit: bool| {
            let (ran, right, wrong, device) = (&ran, &right, &wrong, &device);
            move |form: Form| -> Result<Option<T>> {
                ran.borrow_mut().push(form);
                Ok(match form {
                    Form::Gemm => Some(wrong.clone()),
                    Form::Implicit => implicit.then(|| right.clone()),
                    Form::Direct => Some(direct(device)),
                })
            }
        };
        let key = |k: &str| pass(&format!("{name} {k}"));
        let y = run_with(&key("a"), &ctx(&n, &device, &memo, false), measure, &mut forms(true)).unwrap();
        let measured = ran.take();
        if name == "flex" {
            assert!(same(&y, &wrong), "flex: the rule's form, unmeasured");
            assert_eq!(measured, vec![Form::Gemm], "flex: the rule (few outputs: a GEMM)");
        } else {
            assert!(same(&y, &right), "{name}: the fastest form that agrees");
            assert!(measured.len() >= 4 && measured.contains(&Form::Gemm), "{name}: {measured:?}");
            let again = run_with(&key("a"), &ctx(&n, &device, &memo, false), measure, &mut forms(true)).unwrap();
            assert!(same(&again, &right), "{name}: again");
            assert_eq!(ran.take(), vec![Form::Implicit], "{name}: the choice is kept");
            let recorded = run_with(&key("a"), &ctx(&n, &device, &memo, true), measure, &mut forms(true)).unwrap();
            assert!(same(&recorded, &right), "{name}: a recorded step");
            assert_eq!(ran.take(), vec![Form::Implicit], "{name}: a recorded step runs the measured form");
            // Without the implicit form, the direct kernel (slower than the wrong answer).
            let y = run_with(&key("b"), &ctx(&n, &device, &memo, false), measure, &mut forms(false)).unwrap();
            assert!(same(&y, &right), "{name}: the direct kernel");
            ran.take();
            // One NaN in an instant answer is a disagreement too, however a device's max
            // treats it.
            let mut values = float_values(right.clone());
            values[7] = f64::NAN;
            let poisoned = float_from_f64(&right.shape().to_vec(), values, &device, Precision::F32);
            let mut nan_form = |form: Form| -> Result<Option<T>> {
                Ok(Some(if form == Form::Direct { direct(&device) } else { poisoned.clone() }))
            };
            let y = run_with(&key("f"), &ctx(&n, &device, &memo, false), measure, &mut nan_form).unwrap();
            assert!(same(&y, &right), "{name}: a NaN is not an answer");
            // A direct result that is not finite says nothing about the forms: nothing is
            // kept, and the next pass of the shape measures again.
            let mut count = 0;
            let mut not_finite = |_: Form| -> Result<Option<T>> {
                count += 1;
                Ok(Some(poisoned.clone()))
            };
            run_with(&key("g"), &ctx(&n, &device, &memo, false), measure, &mut not_finite).unwrap();
            run_with(&key("g"), &ctx(&n, &device, &memo, false), measure, &mut not_finite).unwrap();
            assert_eq!(count, 6, "{name}: three forms run each time, none kept");
        }
        let recorded = run_with(&key("c"), &ctx(&n, &device, &memo, true), measure, &mut forms(true)).unwrap();
        assert!(same(&recorded, &wrong), "{name}: recorded");
        assert_eq!(ran.take(), vec![Form::Gemm], "{name}: a recorded step of a shape not met keeps the rule");
        let rules = Levers::read(Some("rules"), None);
        run_with(&key("d"), &ctx(&n, &device, &memo, false), rules, &mut forms(true)).unwrap();
        assert_eq!(ran.take(), vec![Form::Gemm], "{name}: rules");
        let forced = Levers::read(Some("direct"), None);
        run_with(&key("e"), &ctx(&n, &device, &memo, false), forced, &mut forms(true)).unwrap();
        assert_eq!(ran.take(), vec![Form::Direct], "{name}: forced");
    }
}

/// Each pass, in whatever form this process's levers choose on each device (measured on
/// `wgpu:0`), equals burn's direct kernels on the CPU.
#[test]
fn every_pass_in_its_chosen_form_equals_the_direct_kernels() {
    let memo = Memo::default();
    let cases = [
        ([2, 9, 8, 3], [3, 3, 3, 4], [1, 1], Padding::Same),
        ([3, 9, 8, 2], [3, 2, 2, 5], [2, 2], Padding::Same),
        ([2, 8, 8, 4], [1, 1, 4, 3], [2, 2], Padding::Valid),
    ];
    for (xd, wd, strides, padding) in cases {
        let c = Conv2d::plain(strides, padding);
        let (out_hw, p) = c.window([wd[0], wd[1]]).output([xd[1], xd[2]]).unwrap();
        let gd = [xd[0], out_hw[0], out_hw[1], wd[3]];
        let forward = node(Op::Conv2d(c.clone()));
        let input = Conv2dBackpropInput { input_hw: [xd[1], xd[2]], strides, padding, dilation: [1, 1], groups: 1 };
        let filter = Conv2dBackpropFilter {
            filter_hw: [wd[0], wd[1]],
            strides,
            padding,
            dilation: [1, 1],
            groups: 1,
            with_bias: false,
        };
        let (input_node, filter_node) =
            (node(Op::Conv2dBackpropInput(input.clone())), node(Op::Conv2dBackpropFilter(filter.clone())));
        let flex = DispatchDevice::Flex(FlexDevice);
        let opts = ConvOptions { stride: strides, padding: [(p[0], p[1]), (p[2], p[3])], dilation: [1, 1], groups: 1 };
        let (x, w, gy) = (tensor(&xd, 1, &flex), tensor(&wd, 2, &flex), tensor(&gd, 3, &flex));
        let (xn, wn) = (B::float_permute(x, &[0, 3, 1, 2]), B::float_permute(w, &[3, 2, 0, 1]));
        let gn = B::float_permute(gy, &[0, 3, 1, 2]);
        let want = [
            float_values(B::float_permute(B::conv2d(xn.clone(), wn.clone(), None, opts.clone()), &[0, 2, 3, 1])),
            float_values(B::float_permute(
                B::conv2d_x_backward(xn.clone(), wn.clone(), gn.clone(), opts.clone()),
                &[0, 2, 3, 1],
            )),
            float_values(B::float_permute(B::conv2d_weight_backward(xn, wn, gn, opts), &[2, 3, 1, 0])),
        ];
        for (name, device) in devices() {
            let (x, w, gy) = (tensor(&xd, 1, &device), tensor(&wd, 2, &device), tensor(&gd, 3, &device));
            let floats = |ts: [&T; 2]| ts.map(|t| Value::Float(t.clone())).to_vec();
            let got = [
                conv::forward(&c, floats([&x, &w]), &ctx(&forward, &device, &memo, false)),
                conv::backprop_input(&input, floats([&w, &gy]), &ctx(&input_node, &device, &memo, false)),
                conv::backprop_filter(&filter, floats([&x, &gy]), &ctx(&filter_node, &device, &memo, false)),
            ];
            for ((what, got), want) in ["y", "dx", "dw"].iter().zip(got).zip(&want) {
                let got = float_values(got.unwrap());
                assert_eq!(got.len(), want.len(), "{name} {xd:?} {what}");
                for (i, (a, b)) in got.iter().zip(want).enumerate() {
                    assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{name} {xd:?} {what}[{i}]: {a} against {b}");
                }
            }
        }
    }
}

/// The first step's log line says how many passes measured, what they kept and how long
/// it took; nothing is said when none measured.
#[test]
fn a_step_that_measured_says_what_and_how_long() {
    assert_eq!(Measured::default().line("wgpu:0"), None);
    let m = Measured { kept: [2, 1, 0], took: Duration::from_millis(1250) };
    let line = m.line("cuda:0").unwrap();
    assert!(line.starts_with("cuda:0: 3 convolution passes measured in this step, 1.25 s of it"), "{line}");
    assert!(line.contains("(direct 2, gemm 1;"), "{line}");
    let one = Measured { kept: [0, 0, 1], took: Duration::from_millis(10) }.line("cuda:0").unwrap();
    assert!(one.contains("1 convolution pass measured") && one.contains("(implicit 1;"), "{one}");
}
