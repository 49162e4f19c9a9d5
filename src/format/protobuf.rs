//! Protobuf bodies to JSON: proto3's canonical JSON mapping (well-known types as their JSON
//! forms: Timestamp as RFC 3339, Duration as "1.5s", wrappers as their value, Struct as
//! JSON), with field names as the `.proto` writes them, 64-bit integers as exact JSON
//! numbers (not strings), enums by name, every field present (at its default when unset,
//! except message fields, which are left out), and unknown fields dropped.

use std::collections::HashMap;

use base64::Engine;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

/// A schema's file, compiled with the files it imports.
#[derive(Debug)]
pub struct ProtoSchema {
    pool: DescriptorPool,
    file: String,
}

const OPTIONS: SerializeOptions = SerializeOptions::new()
    .stringify_64_bit_integers(false)
    .use_proto_field_name(true)
    .skip_default_fields(false);

/// One schema file as a registry holds it: `.proto` text, or (as some serializers
/// register it) a base64 `FileDescriptorProto`.
fn file(name: &str, text: &str) -> Result<File, String> {
    let trimmed = text.trim();
    if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(trimmed)
        && let Ok(file) = File::decode_file_descriptor_proto(bytes.as_slice())
        && !file.name().is_empty()
    {
        return Ok(file);
    }
    File::from_source(name, text).map_err(|e| format!("not a Protobuf schema: {e}"))
}

/// The imports a schema's references supply, by the names the schema imports them as.
struct References(HashMap<String, File>);

impl FileResolver for References {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        self.0
            .get(name)
            .cloned()
            .ok_or_else(|| protox::Error::file_not_found(name))
    }
}

impl ProtoSchema {
    /// Compiles the schema `text` with its references (import name, text).
    pub fn compile(text: &str, references: &[(String, String)]) -> Result<Self, String> {
        const MAIN: &str = "registry-schema.proto";
        let main = file(MAIN, text)?;
        let main_name = if main.name().is_empty() {
            MAIN
        } else {
            main.name()
        }
        .to_string();
        let mut files = HashMap::new();
        for (name, text) in references {
            let mut f = file(name, text)?;
            if f.name() != name {
                f = File::from_file_descriptor_proto({
                    let mut d = f.file_descriptor_proto().clone();
                    d.name = Some(name.clone());
                    d
                });
            }
            files.insert(name.clone(), f);
        }
        files.insert(main_name.clone(), main);
        let mut resolver = ChainFileResolver::new();
        resolver.add(References(files));
        resolver.add(GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler
            .open_file(&main_name)
            .map_err(|e| format!("Protobuf schema does not compile: {e}"))?;
        Ok(ProtoSchema {
            pool: compiler.descriptor_pool(),
            file: main_name,
        })
    }

    /// The message type the wire format's indexes point at.
    fn message(&self, indexes: &[usize]) -> Result<MessageDescriptor, String> {
        let file = self
            .pool
            .get_file_by_name(&self.file)
            .ok_or("Protobuf schema: its file is missing")?;
        let (first, nested) = indexes.split_first().ok_or("no message index")?;
        let mut message = file
            .messages()
            .nth(*first)
            .ok_or_else(|| format!("message index {indexes:?} is not in the schema"))?;
        for &i in nested {
            let child = message.child_messages().nth(i);
            message =
                child.ok_or_else(|| format!("message index {indexes:?} is not in the schema"))?;
        }
        Ok(message)
    }

    /// The JSON text of one message of the type at `indexes`.
    pub fn to_json(&self, indexes: &[usize], body: &[u8]) -> Result<String, String> {
        let descriptor = self.message(indexes)?;
        let name = descriptor.full_name().to_string();
        let message = DynamicMessage::decode(descriptor, body)
            .map_err(|e| format!("does not decode as Protobuf {name}: {e}"))?;
        // Through a JSON tree, whose objects keep their keys in order: a map field's
        // entries come out of the message in no fixed order, and the same record must be
        // the same text every time (a redelivery must read as the duplicate it is).
        let json = message
            .serialize_with_options(serde_json::value::Serializer, &OPTIONS)
            .map_err(|e| format!("Protobuf {name} has no JSON form: {e}"))?;
        Ok(json.to_string())
    }
}

#[cfg(test)]
#[path = "protobuf_tests.rs"]
mod tests;
