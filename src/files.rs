//! What certsync does with the files it is handed, on top of the one door
//! that opens them ([`crate::beneath`]): reading what steers root certsync
//! ([`owned`]), the by-path guards of what it writes later, the one YAML
//! reader.

mod owned;
mod yaml;

pub use owned::{
    OWNED_WAY, no_other_user_may_recreate, no_other_user_may_write, only_root_may_change,
    owned_dir, read_owned, read_steering, steering_or_absent,
};
pub use yaml::{MAX_YAML_FLOW_DEPTH, YamlError, check_documents, parse_yaml};

/// Size cap of small text files: pidfiles, tokens (1 MiB is generous).
pub const SMALL_FILE: u64 = 1 << 20;
