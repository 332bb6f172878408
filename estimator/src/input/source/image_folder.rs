//! A folder of images, one subfolder per class (Keras' `image_dataset_from_directory`):
//! `root/<class>/<file>.png|.jpg|.jpeg`. Classes are the subfolders' names, sorted, and the
//! label is the class's index. Files are listed when the source opens and decoded when an
//! example is read (PNG and JPEG, through the `image` crate), converted to the color mode
//! and resized to `image_size` when they differ (bilinear), as f32 values in 0 to 255.

use super::{FileSpan, Source};
use crate::input::error::{InputError, Result};
use crate::input::schema::{FeatureInfo, Row, Schema};
use engine_graph::{DType, HostData};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Files larger than this are refused before they are read: a picture is far smaller.
pub const MAX_IMAGE_FILE_BYTES: u64 = 64 << 20;
/// Decoded pixels an image may have before resizing (a decompression bomb stops here).
pub const MAX_IMAGE_PIXELS: u64 = 1 << 26;
/// Examples a folder may list.
pub const MAX_IMAGE_FILES: usize = 10_000_000;

/// Channels of the decoded images, as Keras' `color_mode` (whose default is `Rgb`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ColorMode {
    /// One channel.
    Grayscale,
    /// Three channels.
    #[default]
    Rgb,
}

impl ColorMode {
    fn channels(self) -> usize {
        match self {
            ColorMode::Grayscale => 1,
            ColorMode::Rgb => 3,
        }
    }
}

#[derive(Debug)]
pub(crate) struct ImageFolderSource {
    schema: Schema,
    /// Every image with its class index, class by class, each class's files sorted.
    images: Vec<(PathBuf, i64)>,
    image_size: [usize; 2],
    color_mode: ColorMode,
    description: String,
}

impl ImageFolderSource {
    /// With `class_names` (the training folder's, for an evaluation folder) the classes are
    /// those, in that order, and a subfolder of another name is refused: a label index then
    /// means the same class in every input of a job.
    pub fn open(
        root: &Path,
        image_size: [usize; 2],
        color_mode: ColorMode,
        class_names: Option<&[String]>,
    ) -> Result<Self> {
        if image_size.contains(&0) || (image_size[0] * image_size[1]) as u64 > MAX_IMAGE_PIXELS {
            return Err(InputError::invalid(format!(
                "image_size {image_size:?} must be positive, with at most {MAX_IMAGE_PIXELS} pixels"
            )));
        }
        let found = image_folder_classes(root)?;
        let classes = match class_names {
            None => found,
            Some(names) => {
                if let Some(other) = found.iter().find(|f| !names.contains(f)) {
                    return Err(InputError::invalid(format!(
                        "{} has a class folder `{other}` that the training folder lacks (its classes: {})",
                        root.display(),
                        names.join(", ")
                    )));
                }
                names.to_vec()
            }
        };
        let mut images = Vec::new();
        for (k, class) in classes.iter().enumerate() {
            let dir = root.join(class);
            if !dir.is_dir() {
                continue;
            }
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map_err(|e| InputError::io(&dir, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_image(p))
                .collect();
            files.sort();
            if images.len() + files.len() > MAX_IMAGE_FILES {
                return Err(InputError::invalid(format!(
                    "{} holds more than {MAX_IMAGE_FILES} images",
                    root.display()
                )));
            }
            images.extend(files.into_iter().map(|p| (p, k as i64)));
        }
        if classes.is_empty() || images.is_empty() {
            return Err(InputError::invalid(format!(
                "{} has no images: it needs one subfolder per class holding .png or .jpg files",
                root.display()
            )));
        }
        let [h, w] = image_size;
        let schema = Schema::new(
            vec![FeatureInfo::new("image", DType::F32, vec![h, w, color_mode.channels()])],
            Some(FeatureInfo::new("label", DType::I64, vec![])),
        )?;
        let description = format!(
            "image_folder({}, classes={}, n={}, {h}x{w}x{})",
            root.display(),
            classes.len(),
            images.len(),
            color_mode.channels()
        );
        Ok(ImageFolderSource { schema, images, image_size, color_mode, description })
    }

    fn decode(&self, path: &Path) -> Result<Vec<f32>> {
        let bad = |detail: String| InputError::BadImage { path: path.to_path_buf(), detail };
        // Read once, and no further than the bound: the header and the pixels both come
        // from these bytes.
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_IMAGE_FILE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| InputError::io(path, e))?;
        if bytes.len() as u64 > MAX_IMAGE_FILE_BYTES {
            return Err(bad(format!("more than the {MAX_IMAGE_FILE_BYTES} bytes an image may have")));
        }
        let reader = || {
            image::ImageReader::new(std::io::Cursor::new(&bytes[..]))
                .with_guessed_format()
                .map_err(|e| InputError::io(path, e))
        };
        let (w, h) = reader()?.into_dimensions().map_err(|e| bad(e.to_string()))?;
        if u64::from(w) * u64::from(h) > MAX_IMAGE_PIXELS {
            return Err(bad(format!("{w}x{h} pixels, more than the {MAX_IMAGE_PIXELS} an image may have")));
        }
        let decoded = reader()?.decode().map_err(|e| bad(e.to_string()))?;
        let [th, tw] = self.image_size;
        let decoded = if (decoded.height() as usize, decoded.width() as usize) == (th, tw) {
            decoded
        } else {
            decoded.resize_exact(tw as u32, th as u32, image::imageops::FilterType::Triangle)
        };
        Ok(match self.color_mode {
            ColorMode::Grayscale => decoded.to_luma8().into_raw().into_iter().map(f32::from).collect(),
            ColorMode::Rgb => decoded.to_rgb8().into_raw().into_iter().map(f32::from).collect(),
        })
    }
}

/// The class folders under `root`, sorted: the classes, by label index.
pub fn image_folder_classes(root: &Path) -> Result<Vec<String>> {
    let mut classes = Vec::new();
    for entry in std::fs::read_dir(root).map_err(|e| InputError::io(root, e))? {
        let entry = entry.map_err(|e| InputError::io(root, e))?;
        if entry.file_type().map_err(|e| InputError::io(entry.path(), e))?.is_dir() {
            classes.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    classes.sort();
    Ok(classes)
}

fn is_image(path: &Path) -> bool {
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    path.is_file() && matches!(ext.as_str(), "png" | "jpg" | "jpeg")
}

impl Source for ImageFolderSource {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn len(&self) -> u64 {
        self.images.len() as u64
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn files(&self) -> &[FileSpan] {
        &[]
    }

    fn read(&self, index: u64) -> Result<Row> {
        let (path, label) = self
            .images
            .get(index as usize)
            .ok_or_else(|| InputError::invalid(format!("example {index} of {}", self.description)))?;
        let pixels = self.decode(path)?;
        Ok(Row { values: vec![HostData::F32(pixels), HostData::I64(vec![*label])] })
    }

    fn locate(&self, index: u64) -> String {
        match self.images.get(index as usize) {
            Some((path, _)) => path.display().to_string(),
            None => format!("example {} of {}", index + 1, self.description),
        }
    }
}
