//! Behaviour every backend must share: the same names, the same conditional-put semantics.

use super::*;

fn exercise(dir: &ModelDir) -> anyhow::Result<()> {
    let first = dir.put("a/one", b"1".to_vec())?;
    assert_eq!(dir.get("a/one")?, b"1");
    assert!(dir.get_if_exists("missing")?.is_none());
    assert!(matches!(dir.get("missing"), Err(ModelDirError::NotFound { .. })));

    // Create-if-absent refuses to replace.
    assert_eq!(dir.put_if_absent("a/one", b"x".to_vec())?, PutOutcome::Conflict);
    assert!(matches!(dir.put_if_absent("b", b"b".to_vec())?, PutOutcome::Written(_)));

    // Compare-and-swap: the current version wins, a stale one is refused.
    let PutOutcome::Written(second) = dir.put_if_match("a/one", b"2".to_vec(), &first)? else {
        anyhow::bail!("update at the current version was refused in {dir}");
    };
    assert_eq!(dir.put_if_match("a/one", b"3".to_vec(), &first)?, PutOutcome::Conflict);
    assert_eq!(dir.put_if_match("nothing", b"3".to_vec(), &second)?, PutOutcome::Conflict);
    let read = dir.get_if_exists("a/one")?.ok_or_else(|| anyhow::anyhow!("a/one vanished"))?;
    assert_eq!(read.data, b"2");
    assert_eq!(read.version.e_tag, second.e_tag);

    let names: Vec<String> = dir.list("")?.into_iter().map(|i| i.name).collect();
    assert_eq!(names, vec!["a/one".to_string(), "b".to_string()]);
    assert_eq!(dir.list("a")?.len(), 1);
    assert!(dir.list("nowhere")?.is_empty());
    assert_eq!(dir.head("a/one")?.map(|i| i.size), Some(1));

    dir.delete("b")?;
    dir.delete("b")?;
    assert!(!dir.exists("b")?);
    assert!(matches!(dir.put("../escape", vec![]), Err(ModelDirError::InvalidName { .. })));
    assert!(matches!(dir.put("", vec![]), Err(ModelDirError::InvalidName { .. })));
    Ok(())
}

#[test]
fn memory_backend() -> anyhow::Result<()> {
    exercise(&ModelDir::open("memory://model-dir-unit/run")?)
}

#[test]
fn local_backend() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = ModelDir::open(&tmp.path().join("run").to_string_lossy())?;
    assert!(dir.is_local());
    exercise(&dir)?;
    assert_eq!(std::fs::read(tmp.path().join("run/a/one"))?, b"2");
    Ok(())
}

#[test]
fn memory_dirs_share_by_name_and_prefix() -> anyhow::Result<()> {
    let writer = ModelDir::open("memory://model-dir-share/p")?;
    let reader = ModelDir::open("memory://model-dir-share/p")?;
    let other_prefix = ModelDir::open("memory://model-dir-share/q")?;
    let other_store = ModelDir::open("memory://model-dir-share-2/p")?;
    writer.put("x", b"shared".to_vec())?;
    assert_eq!(reader.get("x")?, b"shared");
    assert!(!other_prefix.exists("x")?);
    assert!(!other_store.exists("x")?);
    assert_eq!(writer.url_of("x"), "memory://model-dir-share/p/x");
    Ok(())
}

#[test]
fn file_files_and_local_files_land_in_the_same_place() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let path = tmp.path().join("same");
    let plain = ModelDir::open(&path.to_string_lossy())?;
    let url = ModelDir::open(&format!("file://{}", path.display()))?;
    plain.put("f", b"v".to_vec())?;
    assert_eq!(url.get("f")?, b"v");
    assert_eq!(plain.location(), url.location());
    Ok(())
}

#[test]
fn stale_staging_files_are_removed() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = ModelDir::open(&tmp.path().to_string_lossy())?;
    std::fs::write(tmp.path().join("checkpoint#123"), b"partial")?;
    std::fs::write(tmp.path().join("keep#abc"), b"not staging")?;
    assert!(dir.list("")?.iter().all(|i| i.name != "checkpoint#123"), "staging files must not be listed");
    let removed = dir.remove_stale_staging_files("", std::time::Duration::ZERO)?;
    assert_eq!(removed.len(), 1);
    assert!(tmp.path().join("keep#abc").exists());
    Ok(())
}
