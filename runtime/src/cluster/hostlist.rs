//! Slurm's compressed lists: host lists (`node[01-03,07],gpu5`) and task counts per node
//! (`2(x3),1`). Pure text functions; the errors are reasons, which the caller puts next
//! to the variable's name and value.

/// More hosts than this is a typo (`node[1-1000000]`), not a cluster; refusing it keeps a
/// bad variable from allocating gigabytes.
const MAX_HOSTS: usize = 1 << 16;

/// Expands a Slurm host list in order, without sorting or removing duplicates.
///
/// Items are separated by commas outside brackets. An item is text with any number of
/// bracketed range lists; each range is `N` or `N-M`, written with the zero padding of `N`
/// (`[08-10]` gives `08, 09, 10`). Several brackets in one item give every combination,
/// the leftmost varying slowest (`r[1-2]n[1-2]` gives `r1n1, r1n2, r2n1, r2n2`), as Slurm
/// prints them.
pub(crate) fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for item in split_items(list)? {
        hosts.extend(expand_item(item, MAX_HOSTS - hosts.len())?);
    }
    Ok(hosts)
}

/// Expands `2(x3),1` into `[2, 2, 2, 1]`: one count per node, in the host list's order.
pub(crate) fn expand_tasks_per_node(counts: &str) -> Result<Vec<usize>, String> {
    let mut expanded = Vec::new();
    for item in counts.split(',') {
        let (count, repeat) = match item.strip_suffix(')').and_then(|rest| rest.split_once("(x")) {
            Some((count, repeat)) => (count, parse_number(repeat, item)?),
            None => (item, 1),
        };
        let count = usize::try_from(parse_number(count, item)?).map_err(|_| format!("'{item}' is too large"))?;
        if repeat == 0 {
            return Err(format!("'{item}' repeats zero times"));
        }
        if repeat > (MAX_HOSTS - expanded.len()) as u64 {
            return Err(format!("'{item}' gives more than {MAX_HOSTS} nodes"));
        }
        expanded.extend(std::iter::repeat_n(count, repeat as usize));
    }
    Ok(expanded)
}

fn split_items(list: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (at, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            '[' => return Err(format!("nested '[' at character {at}")),
            ']' if depth == 1 => depth = 0,
            ']' => return Err(format!("']' without '[' at character {at}")),
            ',' if depth == 0 => {
                items.push(&list[start..at]);
                start = at + 1;
            }
            c if c.is_whitespace() => return Err(format!("whitespace at character {at}")),
            _ => {}
        }
    }
    if depth != 0 {
        return Err("'[' without a closing ']'".to_string());
    }
    items.push(&list[start..]);
    if items.iter().any(|item| item.is_empty()) {
        return Err("an empty host name (a stray ',')".to_string());
    }
    Ok(items)
}

/// One item, whose brackets are balanced and unnested (checked by `split_items`).
fn expand_item(item: &str, budget: usize) -> Result<Vec<String>, String> {
    let mut hosts = vec![String::new()];
    let mut rest = item;
    while !rest.is_empty() {
        let (literal, after) = rest.split_once('[').unwrap_or((rest, ""));
        for host in &mut hosts {
            host.push_str(literal);
        }
        if after.is_empty() && !rest.contains('[') {
            break;
        }
        let (ranges, after) = after.split_once(']').ok_or_else(|| format!("'{item}' has '[' without ']'"))?;
        let values = expand_ranges(ranges, item, budget)?;
        if hosts.len().saturating_mul(values.len()) > budget {
            return Err(format!("'{item}' gives more than {MAX_HOSTS} hosts"));
        }
        hosts = hosts.iter().flat_map(|host| values.iter().map(move |value| format!("{host}{value}"))).collect();
        rest = after;
    }
    Ok(hosts)
}

fn expand_ranges(ranges: &str, item: &str, budget: usize) -> Result<Vec<String>, String> {
    let mut values = Vec::new();
    for range in ranges.split(',') {
        let (low_text, high_text) = range.split_once('-').unwrap_or((range, range));
        let (low, high) = (parse_number(low_text, item)?, parse_number(high_text, item)?);
        if low > high {
            return Err(format!("'{item}' has the range {range}, which runs backwards"));
        }
        if high - low >= (budget - values.len()) as u64 {
            return Err(format!("'{item}' gives more than {MAX_HOSTS} hosts"));
        }
        let width = low_text.len();
        values.extend((low..=high).map(|n| format!("{n:0width$}")));
    }
    Ok(values)
}

fn parse_number(text: &str, item: &str) -> Result<u64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{item}' has '{text}' where a number should be"));
    }
    text.parse().map_err(|_| format!("'{item}' has the number {text}, which is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &str) -> Vec<String> {
        expand_hostlist(list).unwrap()
    }

    #[test]
    fn plain_names() {
        assert_eq!(hosts("gpu5"), ["gpu5"]);
        assert_eq!(hosts("a,b.example.org,c-1"), ["a", "b.example.org", "c-1"]);
    }

    #[test]
    fn ranges_keep_the_zero_padding_of_their_start() {
        assert_eq!(hosts("node[01-03,07],gpu5"), ["node01", "node02", "node03", "node07", "gpu5"]);
        assert_eq!(hosts("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(hosts("n[098-101]"), ["n098", "n099", "n100", "n101"]);
        assert_eq!(hosts("n[0]"), ["n0"]);
    }

    #[test]
    fn tensorflow_example_order_is_kept() {
        assert_eq!(hosts("n[1-2],m5,o[3-4,6,7-9]"), ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]);
    }

    #[test]
    fn several_brackets_give_every_combination_leftmost_slowest() {
        assert_eq!(hosts("r[1-2]n[01-02]"), ["r1n01", "r1n02", "r2n01", "r2n02"]);
        assert_eq!(
            hosts("rack[1,3]-node[5-6].ib,x"),
            ["rack1-node5.ib", "rack1-node6.ib", "rack3-node5.ib", "rack3-node6.ib", "x"]
        );
        assert_eq!(hosts("[1-2]"), ["1", "2"]);
    }

    #[test]
    fn duplicates_and_order_are_left_alone() {
        assert_eq!(hosts("b,a,b"), ["b", "a", "b"]);
    }

    #[test]
    fn malformed_host_lists_say_why() {
        let cases = [
            ("", "an empty host name (a stray ',')"),
            ("a,,b", "an empty host name (a stray ',')"),
            ("a,", "an empty host name (a stray ',')"),
            ("n[1-2", "'[' without a closing ']'"),
            ("n1-2]", "']' without '[' at character 4"),
            ("n[1-[2]]", "nested '[' at character 4"),
            ("n[]", "'n[]' has '' where a number should be"),
            ("n[1,]", "'n[1,]' has '' where a number should be"),
            ("n[a-b]", "'n[a-b]' has 'a' where a number should be"),
            ("n[1-2-3]", "'n[1-2-3]' has '2-3' where a number should be"),
            ("n[3-1]", "'n[3-1]' has the range 3-1, which runs backwards"),
            (
                "n[1-99999999999999999999]",
                "'n[1-99999999999999999999]' has the number 99999999999999999999, which is too large",
            ),
            ("n[0-99999]", "'n[0-99999]' gives more than 65536 hosts"),
            ("a[0-999]b[0-999]", "'a[0-999]b[0-999]' gives more than 65536 hosts"),
            ("a, b", "whitespace at character 2"),
        ];
        for (list, reason) in cases {
            assert_eq!(expand_hostlist(list), Err(reason.to_string()), "for {list:?}");
        }
    }

    #[test]
    fn tasks_per_node() {
        assert_eq!(expand_tasks_per_node("2(x3),1"), Ok(vec![2, 2, 2, 1]));
        assert_eq!(expand_tasks_per_node("3(x2),2,1"), Ok(vec![3, 3, 2, 1]));
        assert_eq!(expand_tasks_per_node("4"), Ok(vec![4]));
        assert_eq!(expand_tasks_per_node("1(x1)"), Ok(vec![1]));
    }

    #[test]
    fn malformed_tasks_per_node_say_why() {
        let cases = [
            ("", "'' has '' where a number should be"),
            ("2,", "'' has '' where a number should be"),
            ("2(x)", "'2(x)' has '' where a number should be"),
            ("2(3)", "'2(3)' has '2(3)' where a number should be"),
            ("2x3", "'2x3' has '2x3' where a number should be"),
            ("(x3)", "'(x3)' has '' where a number should be"),
            ("2(x0)", "'2(x0)' repeats zero times"),
            ("1(x100000)", "'1(x100000)' gives more than 65536 nodes"),
            ("-1", "'-1' has '-1' where a number should be"),
        ];
        for (counts, reason) in cases {
            assert_eq!(expand_tasks_per_node(counts), Err(reason.to_string()), "for {counts:?}");
        }
    }
}
