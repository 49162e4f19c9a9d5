//! What every component's settings are checked with: the problems found (each naming its
//! key), the bounds values are held to, and how a duration reads in the schema. A leaf:
//! the sources and sinks own their settings and check them with this, and `config` loads
//! and composes them, so neither imports the other's schema.

pub mod bounds;
mod duration_schema;
mod problems;
mod readable_file;
mod secret_file;

pub use duration_schema::HumanDuration;
#[cfg(test)]
pub use problems::only_key;
pub use problems::{ConfigError, LONGEST, Problems};
pub use readable_file::unreadable_file;
pub use secret_file::read_secret_file;

/// The keys a settings table reads, from the schema of the type that reads it: what is set
/// but not among them belongs to another kind, or to none.
pub fn keys_of<T: schemars::JsonSchema>() -> Vec<String> {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    schema
        .get("properties")
        .and_then(|p| p.as_object())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// Why a kind this build was compiled without cannot run: the key that names it gets this,
/// so the configuration exits 2 before anything starts instead of failing at run time.
#[cfg(not(all(feature = "kafka", feature = "amqp")))]
pub fn not_built(feature: &str, what: &str) -> String {
    format!(
        "{what} is not in this build of sluice: build it with the `{feature}` feature (it is on by default: `cargo build --release --features {feature}`)"
    )
}
