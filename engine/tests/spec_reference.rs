//! The spec reference (`engine/README.md`) names every field and every choice the parser
//! accepts. The lists come from the parser itself: a spec with an unknown field at a place
//! is refused with the fields valid there, an unknown name with the names valid there, so
//! a field or a layer added to the code without a word in the reference fails this test,
//! listing what is missing.
#![allow(clippy::panic, clippy::expect_used, reason = "test helpers fail the test by panicking")]

use engine_cli::{
    job,
    spec::{ErrorKind, Spec, SpecError},
};
use engine_estimator::hooks::HookConfig;
use std::collections::BTreeSet;

const CNN: &str = include_str!("../../specs/fashion_mnist_cnn.ron");
const REFERENCE: &str = include_str!("../README.md");
const UNKNOWN: &str = "zz_unknown";

/// The CNN spec with `from` (which must occur once) replaced.
fn with(from: &str, to: &str) -> String {
    assert_eq!(CNN.matches(from).count(), 1, "`{from}` must occur once in the CNN spec");
    CNN.replacen(from, to, 1)
}

/// Parses `text` and decodes its input and hook sections (which the estimator decodes
/// when a job runs), returning the first error.
fn refusal(text: &str) -> Option<SpecError> {
    let spec = match Spec::parse(text, "job.ron", &[]) {
        Ok(spec) => spec,
        Err(e) => return Some(e),
    };
    if let Err(e) = job::input_spec(&spec, "train_input") {
        return Some(e);
    }
    for hook in &spec.job.train_spec.hooks {
        if let Err(e) = spec.decode::<HookConfig>(&hook.path) {
            return Some(e);
        }
    }
    None
}

/// What the parser would have accepted where `text` has the unknown field or name.
fn valid_at(text: &str) -> Vec<String> {
    match refusal(text).as_ref().map(|e| e.kind()) {
        Some(ErrorKind::UnknownField { expected, .. } | ErrorKind::UnknownName { expected, .. }) => expected.clone(),
        other => panic!("expected an unknown field or name in\n{text}\ngot {other:?}"),
    }
}

/// The fields of struct variant `name` written at `template`'s `{}`, or none when the
/// variant takes no fields (a unit or newtype variant refuses `(zz_unknown: 1)` otherwise).
fn fields_of(template: &str, name: &str) -> Vec<String> {
    let text = template.replace("{}", &format!("{name}({UNKNOWN}: 1)"));
    match refusal(&text).as_ref().map(|e| e.kind()) {
        Some(ErrorKind::UnknownField { expected, .. }) => expected.clone(),
        _ => Vec::new(),
    }
}

/// The CNN spec with `train_input: {}` in place of its whole `Idx(...)` section.
fn without_train_input() -> String {
    let start = CNN.find("    train_input: Idx(").expect("the CNN spec has a train_input");
    let end = start + CNN[start..].find("    ),\n").expect("the train_input section ends") + "    ),\n".len();
    format!("{}    train_input: {{}},\n{}", &CNN[..start], &CNN[end..])
}

/// Every `(place, name)` the reference must mention.
fn accepted() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut add = |place: &str, names: Vec<String>| out.extend(names.into_iter().map(|n| (place.to_string(), n)));
    // Struct sections: an unknown field first.
    add("job", valid_at(&with("    loss:", &format!("    {UNKNOWN}: 1,\n    loss:"))));
    add("Sequential", valid_at(&with("input_shape:", &format!("{UNKNOWN}: 1, input_shape:"))));
    add("Functional", valid_at(&with("model: Sequential(", &format!("model: Functional({UNKNOWN}: 1, "))));
    let warm = format!("    warm_start_from: Some(WarmStart({UNKNOWN}: 1)),\n    loss:");
    add("WarmStart", valid_at(&with("    loss:", &warm)));
    add("run_config", valid_at(&with("run_config: (", &format!("run_config: ({UNKNOWN}: 1, "))));
    add("train_spec", valid_at(&with("train_spec: (", &format!("train_spec: ({UNKNOWN}: 1, "))));
    add("eval_spec", valid_at(&with("eval_spec: (", &format!("eval_spec: ({UNKNOWN}: 1, "))));
    // Enums: the names valid at a place, then each struct variant's fields.
    let enums: [(&str, &str, &str); 9] = [
        ("layer", "            Flatten,", "            {},"),
        ("loss", "loss: SparseCategoricalCrossentropy(from_logits: true)", "loss: {}"),
        ("optimizer", "optimizer: SGD(learning_rate: 0.05)", "optimizer: {}"),
        ("learning rate schedule", "learning_rate: 0.05", "learning_rate: {}"),
        ("metric", "metrics: [Accuracy]", "metrics: [{}]"),
        ("activation", "Dense(units: 64, activation: Relu)", "Dense(units: 64, activation: {})"),
        ("input", "", ""),
        ("hook", "train_spec: (", "train_spec: (hooks: [{}], "),
        ("exporter", "eval_spec: (", "eval_spec: (exporters: [{}], "),
    ];
    for (place, from, to) in enums {
        let template = if place == "input" { without_train_input() } else { with(from, to) };
        let names = valid_at(&template.replace("{}", "Zz"));
        for name in &names {
            let fields = fields_of(&template, name);
            out.extend(fields.into_iter().map(|f| (format!("{place} {name}"), f)));
        }
        out.extend(names.into_iter().map(|n| (place.to_string(), n)));
    }
    out
}

/// Whether the reference mentions `name`: a choice (capitalized) as a word anywhere, a
/// field as code (`` `name` ``), as written in a spec (`name:` after a space, a comma or
/// a parenthesis) or in a signature (`(a, name, b)`).
fn mentioned(name: &str) -> bool {
    if name.starts_with(|c: char| c.is_ascii_uppercase()) {
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        return REFERENCE.match_indices(name).any(|(i, _)| {
            let before = REFERENCE[..i].chars().next_back().is_none_or(|c| !word(c));
            let after = REFERENCE[i + name.len()..].chars().next().is_none_or(|c| !word(c));
            before && after
        });
    }
    // `ExponentialDecay(initial, decay_steps, decay_rate, ...)` lists required fields bare.
    let written = [
        format!("`{name}`"),
        format!("`{name}("),
        format!("`{name}:"),
        format!("({name}:"),
        format!(" {name}:"),
        format!(",{name}:"),
        format!("({name},"),
        format!(" {name},"),
        format!(" {name})"),
    ];
    written.iter().any(|p| REFERENCE.contains(p.as_str()))
}

#[test]
fn the_reference_names_every_field_and_choice_the_parser_accepts() {
    let all = accepted();
    assert!(all.len() > 150, "the walk found only {} names; the probes broke", all.len());
    let places: BTreeSet<&str> = all.iter().map(|(p, _)| p.as_str()).collect();
    let musts =
        ["layer BatchNormalization", "optimizer AdamW", "input Csv", "hook ProgressBar", "exporter Best", "WarmStart"];
    for must in musts {
        assert!(places.contains(must), "no fields walked for {must}: {places:?}");
    }
    let missing: BTreeSet<String> =
        all.iter().filter(|(_, n)| !mentioned(n)).map(|(p, n)| format!("{p}: `{n}`")).collect();
    assert!(
        missing.is_empty(),
        "engine/README.md does not mention:\n{}",
        missing.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// Every command and every one of its flags appears in the reference's Commands section,
/// read from the command-line parser itself.
#[test]
fn the_reference_shows_every_command_and_flag() {
    use clap::CommandFactory;
    let start = REFERENCE.find("## Commands").expect("the reference has a Commands section");
    let section = &REFERENCE[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut missing = Vec::new();
    for command in engine_cli::cli::Cli::command().get_subcommands() {
        let name = command.get_name();
        if !section.contains(&format!("engine {name} ")) {
            missing.push(format!("engine {name}"));
        }
        for arg in command.get_arguments() {
            if let Some(long) = arg.get_long().filter(|l| *l != "help")
                && !section.contains(&format!("--{long}"))
            {
                missing.push(format!("engine {name} --{long}"));
            }
        }
    }
    assert!(missing.is_empty(), "engine/README.md's Commands section lacks: {missing:?}");
}
