use super::*;
use crate::spec::{ErrorKind, LearningRateSpec, Origin, Size2, syntax::parse_document};
use engine_graph::optimizer::LearningRate;
use serde::Deserialize;

#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Outer {
    name: String,
    #[serde(default)]
    count: Option<u32>,
    items: Vec<Item>,
    #[serde(default)]
    pair: Option<(u8, String)>,
}

#[derive(Debug, PartialEq, Deserialize)]
enum Item {
    Unit,
    Wrapped(Inner),
    Tuple(i32, i32),
    Fields { a: f32 },
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Inner {
    size: u64,
    #[serde(default)]
    flag: bool,
}

fn decode<T: DeserializeOwned>(text: &str) -> Result<T, SpecError> {
    let node = parse_document(text, &Origin::File("t.ron".into()))?;
    from_node(&node, FieldPath::root())
}

/// `(line, col, path, kind)` of an error.
fn failure<T: DeserializeOwned + std::fmt::Debug>(text: &str) -> (usize, usize, String, ErrorKind) {
    match decode::<T>(text) {
        Err(e) => match e.location() {
            Some(l) => (l.line, l.col, e.path().to_string(), e.kind().clone()),
            None => panic!("expected a located error, got {e:?}"),
        },
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

#[test]
fn reads_structs_enums_options_and_tuples() -> Result<(), SpecError> {
    let v: Outer = decode(
        r#"Outer(name: "n", count: 3, items: [Unit, Unit(), Wrapped(size: 4), Wrapped(Inner(size: 5, flag: true)),
            Tuple(1, -2), Fields(a: 1)], pair: Some((7, "s")))"#,
    )?;
    assert_eq!(v.count, Some(3));
    assert_eq!(
        v.items,
        vec![
            Item::Unit,
            Item::Unit,
            Item::Wrapped(Inner { size: 4, flag: false }),
            Item::Wrapped(Inner { size: 5, flag: true }),
            Item::Tuple(1, -2),
            Item::Fields { a: 1.0 },
        ]
    );
    assert_eq!(v.pair, Some((7, "s".to_string())));
    let v: Outer = decode(r#"(name: "n", count: None, items: [])"#)?;
    assert_eq!((v.count, v.pair), (None, None));
    Ok(())
}

#[test]
fn unknown_fields_point_at_the_field_name() {
    let (line, col, path, kind) = failure::<Outer>("Outer(name: \"n\",\n  items: [Wrapped(size: 1, colour: 2)])");
    assert_eq!((line, col, path.as_str()), (2, 28, "items[0].colour"));
    assert!(
        matches!(kind, ErrorKind::UnknownField { field, expected } if field == "colour" && expected == ["size", "flag"])
    );
}

#[test]
fn missing_fields_point_at_the_struct_and_name_the_field() {
    let (line, col, path, kind) = failure::<Outer>("Outer(name: \"n\", items: [Unit, Wrapped(flag: true)])");
    assert_eq!((line, col, path.as_str()), (1, 32, "items[1].size"));
    assert_eq!(kind, ErrorKind::MissingField { field: "size".into() });
}

#[test]
fn wrong_types_point_at_the_value() {
    let (line, col, path, kind) = failure::<Outer>("Outer(name: \"n\", items: [Wrapped(size: \"4\")])");
    assert_eq!((line, col, path.as_str()), (1, 40, "items[0].size"));
    assert_eq!(kind, ErrorKind::WrongType { expected: "a non-negative integer".into(), found: "string \"4\"".into() });
    let (_, col, path, kind) = failure::<Outer>("Outer(name: 5, items: [])");
    assert_eq!((col, path.as_str()), (13, "name"));
    assert!(matches!(kind, ErrorKind::WrongType { expected, .. } if expected == "a string"));
    let (_, col, _, kind) = failure::<Outer>("Outer(name: \"n\", items: [Unit], pair: (1, \"a\", 3))");
    assert_eq!(col, 48);
    assert!(matches!(kind, ErrorKind::WrongType { expected, .. } if expected == "2 element(s)"));
}

#[test]
fn unknown_variants_list_the_valid_ones() {
    let (line, col, path, kind) = failure::<Outer>("Outer(name: \"n\", items: [Unit, Tupel(1, 2)])");
    assert_eq!((line, col, path.as_str()), (1, 32, "items[1]"));
    assert_eq!(
        kind,
        ErrorKind::UnknownName {
            what: "item".into(),
            name: "Tupel".into(),
            expected: vec!["Unit".into(), "Wrapped".into(), "Tuple".into(), "Fields".into()],
        }
    );
    let (_, _, _, kind) = failure::<Outer>("Outer(name: \"n\", items: [3])");
    assert!(matches!(kind, ErrorKind::WrongType { expected, .. } if expected.starts_with("an item (one of: Unit, ")));
}

#[test]
fn sizes_are_an_integer_or_a_pair() -> Result<(), SpecError> {
    assert_eq!(decode::<Size2>("3")?, Size2([3, 3]));
    assert_eq!(decode::<Size2>("(3, 5)")?, Size2([3, 5]));
    assert_eq!(decode::<Size2>("[2, 1]")?, Size2([2, 1]));
    let (_, _, _, kind) = failure::<Size2>("\"3\"");
    assert!(matches!(kind, ErrorKind::WrongType { expected, .. } if expected.contains("pair")));
    Ok(())
}

#[test]
fn learning_rates_are_a_number_or_a_schedule() -> Result<(), SpecError> {
    assert_eq!(decode::<LearningRateSpec>("0.5")?.0, LearningRate::Constant(0.5));
    assert_eq!(decode::<LearningRateSpec>("1")?.0, LearningRate::Constant(1.0));
    assert_eq!(
        decode::<LearningRateSpec>("CosineDecay(initial: 0.1, decay_steps: 100)")?.0,
        LearningRate::CosineDecay { initial: 0.1, decay_steps: 100, alpha: 0.0 }
    );
    // Schedules nest: a warmup into a cosine decay.
    assert_eq!(
        decode::<LearningRateSpec>("LinearWarmup(steps: 10, then: CosineDecay(initial: 0.1, decay_steps: 100))")?.0,
        LearningRate::LinearWarmup {
            steps: 10,
            initial: 0.0,
            then: Box::new(LearningRate::CosineDecay { initial: 0.1, decay_steps: 100, alpha: 0.0 })
        }
    );
    let (_, col, _, kind) = failure::<LearningRateSpec>("\n  LinearDecay(initial: 0.1)");
    assert_eq!(col, 3);
    assert!(matches!(kind, ErrorKind::UnknownName { what, expected, .. }
        if what == "learning rate schedule" && expected.len() == 4));
    let (_, _, _, kind) = failure::<LearningRateSpec>("\"fast\"");
    assert!(
        matches!(kind, ErrorKind::WrongType { expected, .. } if expected.starts_with("a number or a learning rate schedule"))
    );
    Ok(())
}
