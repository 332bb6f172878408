//! Names in specs: Keras' own, the engine's earlier spellings still accepted with a
//! warning, and "did you mean" for a misspelled one, so `conv2d`, `Maxpooling2D` or
//! `mirorred` get the name that was meant rather than a list to read through.

/// Earlier spellings and the Keras names that replace them. The parser accepts both (serde
/// aliases); error messages list only the Keras names, and a spec using an old one is
/// warned once per place.
pub const OLD_NAMES: &[(&str, &str)] = &[
    ("Conv2d", "Conv2D"),
    ("MaxPool2d", "MaxPooling2D"),
    ("AvgPool2d", "AveragePooling2D"),
    ("Auc", "AUC"),
    ("Sgd", "SGD"),
    ("RmsProp", "RMSprop"),
    ("SparseSoftmaxCrossEntropy", "SparseCategoricalCrossentropy(from_logits: true)"),
    ("SoftmaxCrossEntropy", "CategoricalCrossentropy(from_logits: true)"),
    ("SigmoidCrossEntropy", "BinaryCrossentropy(from_logits: true)"),
];

/// The Keras name an earlier spelling stands for.
pub fn renamed(old: &str) -> Option<&'static str> {
    OLD_NAMES.iter().find(|(o, _)| *o == old).map(|(_, new)| *new)
}

/// `expected` without the earlier spellings: what an error offers.
pub fn current(expected: &[&str]) -> Vec<String> {
    expected.iter().filter(|n| renamed(n).is_none()).map(|n| n.to_string()).collect()
}

/// Where `tree` uses an earlier spelling: `(where, old, Keras name)`, for the warnings.
pub fn old_names_in(tree: &super::syntax::Node) -> Vec<(String, &'static str, &'static str)> {
    use super::syntax::Value;
    let mut found = Vec::new();
    let mut stack = vec![tree];
    while let Some(node) = stack.pop() {
        let name = match &node.value {
            Value::Ident(n) => Some(n),
            Value::Tuple { name, .. } | Value::Struct { name, .. } => name.as_ref(),
            _ => None,
        };
        if let Some((old, new)) = name.and_then(|n| OLD_NAMES.iter().find(|(o, _)| o == n)) {
            found.push((node.loc.to_string(), *old, *new));
        }
        match &node.value {
            Value::List(items) | Value::Tuple { items, .. } => stack.extend(items),
            Value::Map(entries) => stack.extend(entries.iter().flat_map(|(k, v)| [k, v])),
            Value::Struct { fields, .. } => stack.extend(fields.iter().map(|f| &f.value)),
            _ => {}
        }
    }
    found.sort();
    found
}

/// " (did you mean `X`?)" when a valid name is close to `name`, else nothing.
pub fn did_you_mean(name: &str, valid: &[String]) -> String {
    closest(name, valid).map(|n| format!(" (did you mean `{n}`?)")).unwrap_or_default()
}

/// The valid name closest to `name` (ignoring case), when it is close enough to be what
/// was meant: at most one edit in three characters, or the same letters in another case.
pub fn closest<'a>(name: &str, valid: &'a [String]) -> Option<&'a str> {
    let wanted = name.to_lowercase();
    let limit = (wanted.chars().count() / 3).max(1);
    valid
        .iter()
        .filter(|v| v.as_str() != name)
        .map(|v| (edit_distance(&wanted, &v.to_lowercase()), v.as_str()))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, v)| v)
}

/// Edits (insert, delete, substitute, swap two neighbours) from `a` to `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // Spec names are short; a name past this is no typo of one.
    if a.len().abs_diff(b.len()) > 8 || a.len() > 64 || b.len() > 64 {
        return usize::MAX;
    }
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// A spec in the earlier spellings is the same job as in Keras' names, and each old
    /// name is found where it is written (for its warning).
    #[test]
    fn earlier_spellings_are_the_same_job_and_are_found() -> Result<(), crate::spec::SpecError> {
        let text = |conv: &str, pool: &str, opt: &str, auc: &str, loss: &str| {
            format!(
                "Job(model: Sequential(input_shape: [8, 8, 1], layers: [{conv}(filters: 2, kernel_size: 3), \
                 {pool}(pool_size: 2), Flatten, Dense(units: 2)]), loss: {loss}, \
                 optimizer: {opt}(learning_rate: 0.1), metrics: [{auc}], \
                 train_input: Idx(images: \"i.gz\", labels: \"l.gz\", batch_size: 8), \
                 run_config: (model_dir: \"m\"))"
            )
        };
        let old = text("Conv2d", "AvgPool2d", "RmsProp", "Auc", "SigmoidCrossEntropy");
        let old = crate::spec::Spec::parse(&old, "old.ron", &[])?;
        let new = text("Conv2D", "AveragePooling2D", "RMSprop", "AUC", "BinaryCrossentropy(from_logits: true)");
        let new = crate::spec::Spec::parse(&new, "new.ron", &[])?;
        assert_eq!(old.job, new.job);
        let found: Vec<_> = old_names_in(old.tree()).into_iter().map(|(_, o, n)| (o, n)).collect();
        assert_eq!(found.len(), 5, "{found:?}");
        assert!(found.contains(&("RmsProp", "RMSprop")) && found.contains(&("Conv2d", "Conv2D")));
        assert!(old_names_in(new.tree()).is_empty());
        Ok(())
    }

    #[test]
    fn typos_and_other_cases_find_the_name_meant() {
        let strategies = names(&["default", "one_device", "mirrored", "central_storage", "multi_worker"]);
        assert_eq!(closest("mirorred", &strategies), Some("mirrored"));
        assert_eq!(closest("multiworker", &strategies), Some("multi_worker"));
        let layers = names(&["Dense", "Conv2D", "MaxPooling2D", "Flatten"]);
        assert_eq!(closest("conv2d", &layers), Some("Conv2D"));
        assert_eq!(closest("Maxpooling2d", &layers), Some("MaxPooling2D"));
        assert_eq!(closest("Hinge", &layers), None);
        assert_eq!(closest("LSTM", &layers), None);
    }
}
