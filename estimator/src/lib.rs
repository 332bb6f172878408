pub mod checkpoint;
pub mod model_dir;
pub mod summary;
pub mod input;
