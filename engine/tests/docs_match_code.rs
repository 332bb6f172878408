//! The documents that list names (the commands in `engine/README.md`, the passes in
//! `docs/ARCHITECTURE.md`) drifted from the code before: the pass list lacked three passes
//! and the README showed two of eight commands. So the lists are checked against the code
//! itself, as `spec_reference.rs` does for spec names: the commands and their flags come
//! from the command-line parser, the passes from the pipelines `engine plan` prints. A
//! command, flag or pass added without a word in the documents fails here, and so does a
//! document naming one the code no longer has.

mod common;

use anyhow::{Context, Result, anyhow, bail, ensure};
use common::{engine, spec_path};
use engine_estimator::strategy::{MultiWorkerStrategy, Stage, Strategy, StrategyOptions};
use engine_graph::passes::Pass;
use engine_runtime::cluster::{Cluster, ClusterSource, ClusterSpec, TaskId, TaskType};
use std::collections::BTreeSet;

const README: &str = include_str!("../README.md");
const ARCHITECTURE: &str = include_str!("../../docs/ARCHITECTURE.md");

/// The text from the line `heading` to the next heading of its level or above.
fn section<'a>(doc: &'a str, heading: &str) -> Option<&'a str> {
    let start = doc.find(&format!("\n{heading}\n"))? + 1;
    let level = heading.split(' ').next().unwrap_or("##");
    let rest = &doc[start + heading.len()..];
    let end = rest
        .match_indices("\n#")
        .find(|(i, _)| {
            let hashes = rest[i + 1..].chars().take_while(|c| *c == '#').count();
            hashes <= level.len() && rest[i + 1 + hashes..].starts_with(' ')
        })
        .map_or(rest.len(), |(i, _)| i);
    Some(&doc[start..start + heading.len() + end])
}

/// Every subcommand has a `### engine NAME` section in the README's Commands, every such
/// section names a subcommand, and each section shows every flag of its command.
#[test]
fn the_readme_has_a_section_for_every_command_with_its_flags() {
    use clap::CommandFactory;
    let cli = engine_cli::cli::Cli::command();
    let commands: BTreeSet<String> =
        cli.get_subcommands().map(|c| c.get_name().to_string()).filter(|n| n != "help").collect();
    assert!(commands.contains("plan") && commands.contains("serve"), "the parser's commands: {commands:?}");
    let headings: BTreeSet<String> = README
        .lines()
        .filter_map(|l| l.strip_prefix("### engine "))
        .map(|rest| rest.trim().trim_end_matches('`').to_string())
        .collect();
    let missing: Vec<&String> = commands.difference(&headings).collect();
    assert!(missing.is_empty(), "engine/README.md has no `### engine NAME` section for: {missing:?}");
    let unknown: Vec<&String> = headings.difference(&commands).collect();
    assert!(unknown.is_empty(), "engine/README.md has sections for commands the CLI lacks: {unknown:?}");
    let mut flags = Vec::new();
    for command in cli.get_subcommands().filter(|c| c.get_name() != "help") {
        let name = command.get_name();
        let Some(text) = section(README, &format!("### engine {name}")) else { continue };
        for long in command.get_arguments().filter_map(|arg| arg.get_long()).filter(|long| *long != "help") {
            if !text.contains(&format!("--{long}")) {
                flags.push(format!("engine {name} --{long}"));
            }
        }
    }
    assert!(flags.is_empty(), "engine/README.md's command sections lack these flags: {flags:?}");
}

/// The names `--strategy` accepts, from the parser's refusal of an unknown one.
fn strategy_names() -> Result<Vec<String>> {
    let out = engine(&["plan", &spec_path("fashion_mnist_cnn.ron"), "--strategy", "zz_unknown"])?;
    let line = out
        .stderr
        .lines()
        .find_map(|l| l.split_once("expected one of: ").map(|(_, names)| names))
        .with_context(|| format!("no list of strategies in:\n{}", out.stderr))?;
    Ok(line.trim().split(", ").map(str::to_string).collect())
}

/// The training pipeline `engine plan` prints for the tutorial CNN under `strategy`.
/// Training runs every pass evaluation and prediction run, and more. The spec does not
/// matter (a strategy's passes run whether or not they find work), except that
/// `partition-variables` runs only where a partitioner is set.
fn planned_passes(strategy: &str) -> Result<Vec<String>> {
    let spec = spec_path("fashion_mnist_cnn.ron");
    let mut args = vec!["plan", spec.as_str(), "--strategy", strategy];
    match strategy {
        "mirrored" | "central_storage" => args.extend(["--devices", "cpu:0,cpu:1"]),
        "parameter_server" => {
            args.extend(["--ps", "2", "--set", "run_config.variable_partitioner=Some(FixedShards(2))"]);
        }
        _ => {}
    }
    let out = engine(&args)?;
    ensure!(out.code == Some(0), "engine {}:\n{}", args.join(" "), out.stderr);
    let line = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("passes: "))
        .with_context(|| format!("no `passes:` line from engine {}:\n{}", args.join(" "), out.stdout))?;
    Ok(line.split(" -> ").map(str::to_string).collect())
}

/// `engine plan` makes up a cluster for `parameter_server` (only its ps count matters) but
/// not for `multi_worker`, whose plan needs one; its passes come from the strategy itself,
/// built for a chief and a worker, one list per stage in the order they run.
fn multi_worker_stages() -> Result<Vec<Vec<String>>> {
    let spec =
        ClusterSpec { chief: vec!["127.0.0.1:1".into()], worker: vec!["127.0.0.1:2".into()], ..ClusterSpec::default() };
    let cluster =
        Cluster::new(spec, TaskId::new(TaskType::Chief, 0), ClusterSource::Flags, None).map_err(|e| anyhow!("{e}"))?;
    let options = StrategyOptions { cluster: Some(cluster), ..StrategyOptions::default() };
    let strategy = MultiWorkerStrategy::new(&options).map_err(|e| anyhow!("{e}"))?;
    Ok([Stage::BeforeGradients, Stage::Gradients, Stage::AfterOptimizer]
        .into_iter()
        .map(|stage| strategy.passes(stage, true).iter().map(|p| Pass::name(&**p).to_string()).collect::<Vec<_>>())
        .collect())
}

/// The pass list: the names of the `` - `name` `` lines of the Compilation section, in order.
fn documented_passes() -> Vec<String> {
    let text = section(ARCHITECTURE, "## Compilation").unwrap_or("");
    text.lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(name, _)| name.to_string())
        .collect()
}

#[test]
fn the_architecture_lists_every_pass_in_the_order_it_runs() -> Result<()> {
    let documented = documented_passes();
    ensure!(!documented.is_empty(), "docs/ARCHITECTURE.md's Compilation section lists no passes");
    let mut runs: Vec<(String, Vec<String>)> = Vec::new();
    for strategy in strategy_names()? {
        if strategy == "multi_worker" {
            for (i, stage) in multi_worker_stages()?.into_iter().enumerate() {
                runs.push((format!("multi_worker's stage {i}"), stage));
            }
        } else {
            runs.push((format!("engine plan --strategy {strategy}"), planned_passes(&strategy)?));
        }
    }
    let run: BTreeSet<&str> = runs.iter().flat_map(|(_, passes)| passes.iter().map(String::as_str)).collect();
    for must in ["autodiff", "check-numerics", "agree-on-stop", "partition-variables", "dead-code-elimination"] {
        ensure!(run.contains(must), "the probes found no `{must}` among {run:?}");
    }
    let missing: Vec<&str> = run.iter().copied().filter(|p| !documented.iter().any(|d| d == p)).collect();
    ensure!(missing.is_empty(), "docs/ARCHITECTURE.md's pass list lacks passes the code runs: {missing:?}");
    let unknown: Vec<&String> = documented.iter().filter(|d| !run.contains(d.as_str())).collect();
    ensure!(unknown.is_empty(), "docs/ARCHITECTURE.md's pass list names passes no plan runs: {unknown:?}");
    for (what, passes) in &runs {
        let at: Vec<usize> = passes.iter().filter_map(|p| documented.iter().position(|d| d == p)).collect();
        if let Some(pair) = at.windows(2).find(|pair| pair[0] > pair[1]) {
            bail!(
                "{what} runs `{}` before `{}`, but docs/ARCHITECTURE.md lists them the other way round ({passes:?})",
                documented[pair[0]],
                documented[pair[1]]
            );
        }
    }
    Ok(())
}
